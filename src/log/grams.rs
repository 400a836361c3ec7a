//! The prefilter's first stage on a large input: which of its keys a line holds, found through a
//! 4-byte piece of each key instead of an automaton.
//!
//! An Aho-Corasick DFA over several hundred keys reads a byte per state transition, each a load
//! that depends on the one before: about 2 ns a byte on the development VM, the largest single cost
//! of `explain` on an `NCCL_DEBUG=INFO` log. Here every key is represented by one of its 4-byte
//! windows (the one INFO chatter is least likely to hold); each window of the line is hashed into a
//! 64 Kibit table (8 KiB, in L1), and the loads of successive windows do not depend on each other.
//! Only where a bit is set is the window looked up exactly, and the keys it stands for are compared
//! with the line. Every occurrence of every key is found: its chosen window is one of the line's
//! windows, and that window's bit is set.

use super::literals::commonness;

/// Log2 of the table's bits.
const BITS: u32 = 16;
const WORDS: usize = (1 << BITS) / 64;
/// ASCII letters fold to lowercase by this bit; other bytes fold onto others, which only adds
/// candidates (each is then compared exactly, case ignored).
const FOLD: u32 = 0x2020_2020;

pub(super) struct Gate {
    bits: Box<[u64; WORDS]>,
    /// The distinct folded windows, sorted, and for each the range of `owners` standing for it.
    grams: Vec<u32>,
    spans: Vec<(u32, u32)>,
    /// (key, offset of the window in the key), grouped by window.
    owners: Vec<(u32, u32)>,
    /// The keys, lowercase.
    keys: Vec<Vec<u8>>,
}

#[inline(always)]
fn window(w: &[u8]) -> u32 {
    u32::from_le_bytes([w[0], w[1], w[2], w[3]]) | FOLD
}

#[inline(always)]
fn slot(w: u32) -> usize {
    (w.wrapping_mul(0x9E37_79B1) >> (32 - BITS)) as usize
}

impl Gate {
    /// A gate over `keys` (lowercase), or `None` when a key is shorter than a window.
    pub(super) fn new(keys: &[Vec<u8>]) -> Option<Gate> {
        if keys.is_empty() || keys.iter().any(|k| k.len() < 4) {
            return None;
        }
        let common = commonness(4);
        let mut chosen: Vec<(u32, u32, u32)> = Vec::with_capacity(keys.len());
        for (k, key) in keys.iter().enumerate() {
            let o = (0..=key.len() - 4).min_by_key(|&o| common(&key[o..o + 4]))?;
            chosen.push((window(&key[o..o + 4]), k as u32, o as u32));
        }
        chosen.sort_unstable();
        let mut bits = Box::new([0u64; WORDS]);
        let (mut grams, mut spans, mut owners) = (Vec::new(), Vec::new(), Vec::new());
        for &(w, k, o) in &chosen {
            if grams.last() != Some(&w) {
                grams.push(w);
                spans.push((owners.len() as u32, owners.len() as u32));
                let s = slot(w);
                bits[s / 64] |= 1 << (s % 64);
            }
            owners.push((k, o));
            spans.last_mut()?.1 += 1;
        }
        Some(Gate { bits, grams, spans, owners, keys: keys.to_vec() })
    }

    /// Adds to `found` each key `hay` holds (once).
    pub(super) fn keys_in(&self, hay: &[u8], found: &mut Vec<usize>) {
        let bits = &*self.bits;
        for (i, w) in hay.windows(4).enumerate() {
            let w = window(w);
            let s = slot(w);
            if bits[s / 64] >> (s % 64) & 1 != 0 {
                self.at(hay, i, w, found);
            }
        }
    }

    /// The keys whose window `w` is at `i` of `hay`, if they are there. Kept out of the loop above,
    /// which then holds its few values in registers.
    #[inline(never)]
    fn at(&self, hay: &[u8], i: usize, w: u32, found: &mut Vec<usize>) {
        let Ok(g) = self.grams.binary_search(&w) else { return };
        let (a, b) = self.spans[g];
        for &(k, o) in &self.owners[a as usize..b as usize] {
            let (k, o) = (k as usize, o as usize);
            let key = &self.keys[k];
            let Some(start) = i.checked_sub(o) else { continue };
            if hay.get(start..start + key.len()).is_some_and(|x| x.eq_ignore_ascii_case(key)) && !found.contains(&k) {
                found.push(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ks: &[&str]) -> Vec<Vec<u8>> {
        ks.iter().map(|k| k.as_bytes().to_vec()).collect()
    }

    #[test]
    fn every_occurrence_of_every_key_is_found_case_ignored() {
        let ks = keys(&["comm 0x", " nranks ", ".cc:", "[service thread]", "socket"]);
        let g = Gate::new(&ks).unwrap();
        let mut found = Vec::new();
        g.keys_in(b"h:1:1 [0] NCCL INFO comm 0x55 rank 3 nRanks 8 misc/socket.cc:826 -> 3", &mut found);
        found.sort_unstable();
        assert_eq!(found, [0, 1, 2, 4]);
        found.clear();
        g.keys_in(b"NCCL WARN [Service Thread] Accept failed", &mut found);
        assert_eq!(found, [3]);
        found.clear();
        // At the very start and end, and nowhere.
        g.keys_in(b".cc:", &mut found);
        assert_eq!(found, [2]);
        found.clear();
        g.keys_in(b"NCCL INFO Channel 00/0 : 1 -> 2 via P2P/CUMEM/read", &mut found);
        g.keys_in(b"abc", &mut found);
        assert!(found.is_empty());
    }

    #[test]
    fn it_agrees_with_an_automaton_on_every_window() {
        // Keys sharing windows, and bytes that fold onto others (`[` and `{`, `@` and a backtick).
        let ks = keys(&["[abcd", "{abcd", "abcde", "@x@y", "`x`y", "bcde"]);
        let g = Gate::new(&ks).unwrap();
        let ac = aho_corasick::AhoCorasick::builder().ascii_case_insensitive(true).build(&ks).unwrap();
        for hay in ["[ABCDE", "{abcd`x`y", "@X@Y", "zzbcdezz", "[abc", "{ABCD {abcd"] {
            let mut found = Vec::new();
            g.keys_in(hay.as_bytes(), &mut found);
            found.sort_unstable();
            let mut want: Vec<usize> = ac.find_overlapping_iter(hay).map(|m| m.pattern().as_usize()).collect();
            want.sort_unstable();
            want.dedup();
            assert_eq!(found, want, "{hay}");
        }
    }

    #[test]
    fn short_keys_leave_it_to_the_automaton() {
        assert!(Gate::new(&keys(&["abc", "abcdef"])).is_none());
        assert!(Gate::new(&[]).is_none());
    }
}
