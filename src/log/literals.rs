//! The literals every match of a pattern must contain, read from its syntax tree: what the
//! prefilter (`prefilter.rs`) looks for before any regex runs.
//!
//! A pure function of the pattern's text, so `build.rs` includes this file too and computes the
//! answer for every built-in pattern at build time (`Prefilter::new` then only looks it up):
//! parsing a thousand patterns was most of a small log's start-up. Hence std and `regex_syntax`
//! only, no `crate::` paths.

use regex_syntax::hir::{Class, Hir, HirKind};

/// Shortest literal worth looking for: a pattern with only shorter ones (`x\d+`) is run on every
/// line instead, which costs less than taking every line that holds an `x` to the full matcher.
const MIN_FACTOR: usize = 3;
/// Factors kept per pattern (the longest): each one more makes the check stricter, not safer.
const MAX_FACTORS: usize = 3;

/// A literal; `ci`: ASCII case-insensitive, stored lowercase.
pub type Lit = (Vec<u8>, bool);
/// Alternative literals, one of which every match contains.
pub type Factor = Vec<Lit>;

/// Whether `pattern` matches the same on ASCII text with Unicode off (`(?-u)`): true unless it
/// spells a non-ASCII character or class (a literal, `\x{..}`, `\u`, `\p{..}`), which Unicode
/// case folding could match to an ASCII letter (`(?i)\x{212A}` is K, the Kelvin sign, and matches
/// `k`). Conservative: `\\x` (an escaped backslash, then x) also counts.
pub fn ascii_safe(pattern: &str) -> bool {
    pattern.is_ascii() && !["\\x", "\\u", "\\U", "\\p", "\\P", "\\N"].iter().any(|e| pattern.contains(e))
}

/// The factors every match of `pattern` contains on ASCII text, or `None` when there are none
/// (or the pattern cannot be read under ASCII semantics).
pub fn required_factors(pattern: &str) -> Option<Vec<Factor>> {
    if !ascii_safe(pattern) {
        return None;
    }
    let hir = regex_syntax::ParserBuilder::new().unicode(false).utf8(false).build().parse(pattern).ok()?;
    let mut fs = factors(&hir);
    fs.retain(|f| !f.is_empty() && f.iter().all(|l| !l.0.is_empty()));
    fs.retain(|f| score(f) >= MIN_FACTOR);
    fs.sort_by_key(|f| std::cmp::Reverse(score(f)));
    // The first stage looks for the first factor: of the best, the one INFO chatter holds least.
    let rarest = (fs.len() > 1).then(|| (0..fs.len()).min_by_key(|&i| fs[i].iter().map(common).sum::<usize>()));
    if let Some(i) = rarest.flatten() {
        let f = fs.remove(i);
        fs.insert(0, f);
    }
    fs.truncate(MAX_FACTORS);
    (!fs.is_empty()).then_some(fs)
}

/// The shapes of the INFO lines a large job prints by the thousand (from `NCCL_DEBUG=INFO` runs
/// of NCCL 2.22 and 2.28 on H200, and the 512-rank init of issue 24), numbers and pointers
/// varied: a literal found in them makes a poor first-stage key, since nearly every line of such
/// a log would then take the second look.
const COMMON: &[&str] = &[
    "node-001:12345:12399 [7] NCCL INFO Channel 03/0 : 5 -> 6 via P2P/CUMEM/read",
    "NCCL INFO Channel 03/1 : 5[5] -> 13[5] [send] via NET/IB/5/GDRDMA",
    "NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0",
    "NCCL INFO Channel 00/02 : 0 1 2 3 4 5 6 7",
    "NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "NCCL INFO Connected all trees",
    "NCCL INFO Trees [0] 6/-1/-1->5->13 [1] 6/-1/-1->5->13",
    "NCCL INFO NET/IB : Using [0]mlx5_5:1/IB [1]mlx5_6:1/IB ; OOB ib0:10.0.0.5<0>",
    "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
    "NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>",
    "NCCL INFO Using network Socket",
    "NCCL INFO misc/socket.cc:826 -> 3",
    "NCCL INFO comm 0x55d0a1b2c3d0 rank 5 nRanks 512 nNodes 64 localRanks 8 localRank 5 MNNVL 0",
    "NCCL INFO Received and initiated operation=Init res=0",
    "NCCL INFO resp.opId=0x7f1e5b695b66 matches expected opId=0x7f1e5b695b66",
    "NCCL INFO ncclPollProxyResponse Received new opId=0x7f1e5b695b66",
    "NCCL INFO New proxy send connection 2 from local rank 1, transport 0",
    "NCCL INFO proxyProgressAsync opId=0x7f17 op.type=1 op.reqBuff=0x7f1b op.respSize=16 done",
    "NCCL INFO Connected to proxy localRank 1 -> connection 0x7ffcf19724d3",
    "NCCL INFO UDS: ClientGetFd handle 0x7f12 tpRank 1 returned fd 53 sameProcess 0",
    "NCCL INFO UDS converted handle 0x7f12 to fd 53 on remote peer 1",
    "NCCL INFO AllReduce: opCount 1a2 sendbuff 0x7f10 recvbuff 0x7f10 count 1024 datatype 7 op 0 root 0 comm 0x55d0 [nranks=8] stream 0x55d1",
    "NCCL INFO 32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
    "NCCL INFO threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
    "NCCL INFO P2P Chunksize set to 524288",
];

/// Bytes of a literal that the prefilter's first stage looks for: a shorter key set makes a
/// smaller automaton (quicker to build for a small log, fewer cache misses on a large one), and a
/// line holding the literal holds any piece of it.
pub const KEY_LEN: usize = 12;

/// Where the first stage's key of `l` starts: of its `KEY_LEN`-byte pieces, the first that the
/// fewest `COMMON` lines hold (0 for a literal no longer than that).
pub fn key_start(l: &Lit) -> usize {
    if l.0.len() <= KEY_LEN {
        return 0;
    }
    let lower: Vec<String> = COMMON.iter().map(|c| c.to_ascii_lowercase()).collect();
    let held = |w: &[u8]| {
        let w = w.to_ascii_lowercase();
        lower.iter().filter(|c| c.as_bytes().windows(w.len()).any(|x| x == w.as_slice())).count()
    };
    (0..=l.0.len() - KEY_LEN).min_by_key(|&i| held(&l.0[i..i + KEY_LEN])).unwrap_or(0)
}

/// Bytes of English and log text from the most to the least common (a rough order): ties between
/// pieces that no `COMMON` line holds go to the one of rarer bytes.
const COMMON_BYTES: &[u8] = b" etaoinsrlhdcumpfgybwvk0123456789.:-_/,=()[]";

/// How likely a line of INFO chatter is to hold a piece of `n` bytes (ASCII case ignored), as a
/// function made once: lower is rarer. The number of `COMMON` lines holding it first, then how
/// common its bytes are.
pub fn commonness(n: usize) -> impl Fn(&[u8]) -> (usize, usize) {
    let mut lines: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    for c in COMMON {
        let mut seen: Vec<&[u8]> = Vec::new();
        let c = c.to_ascii_lowercase();
        for w in c.as_bytes().windows(n) {
            if !seen.contains(&w) {
                seen.push(w);
                *lines.entry(w.to_vec()).or_default() += 1;
            }
        }
    }
    move |piece: &[u8]| {
        let p = piece.to_ascii_lowercase();
        let bytes =
            p.iter().map(|b| COMMON_BYTES.iter().position(|c| c == b).map_or(0, |i| COMMON_BYTES.len() - i)).sum();
        (lines.get(&p).copied().unwrap_or(0), bytes)
    }
}

/// How many lines of `COMMON` hold `l` (ASCII case ignored).
fn common(l: &Lit) -> usize {
    let l = l.0.to_ascii_lowercase();
    COMMON.iter().filter(|c| c.to_ascii_lowercase().as_bytes().windows(l.len()).any(|w| w == l.as_slice())).count()
}

/// How selective a factor is: its shortest literal.
fn score(f: &Factor) -> usize {
    f.iter().map(|l| l.0.len()).min().unwrap_or(0)
}

/// A conjunction: every factor listed is contained in every match of `h`.
fn factors(h: &Hir) -> Vec<Factor> {
    match h.kind() {
        HirKind::Literal(l) => vec![vec![norm(l.0.to_vec(), false)]],
        HirKind::Class(c) => class_lit(c).map(|l| vec![vec![l]]).unwrap_or_default(),
        HirKind::Capture(c) => factors(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => factors(&r.sub),
        HirKind::Alternation(branches) => {
            let mut alt = Vec::new();
            for b in branches {
                let best = factors(b).into_iter().max_by_key(score);
                match best {
                    Some(f) if !f.is_empty() => alt.extend(f),
                    _ => return Vec::new(),
                }
            }
            vec![alt]
        }
        HirKind::Concat(children) => {
            // Runs of children that match few strings each are joined into their products
            // (`NCCL (?:WARN|ATTN) ` is `NCCL WARN ` or `NCCL ATTN `).
            let mut out = Vec::new();
            let mut run: Vec<Lit> = vec![(Vec::new(), false)];
            let flush = |run: &mut Vec<Lit>, out: &mut Vec<Factor>| {
                let f: Factor =
                    std::mem::replace(run, vec![(Vec::new(), false)]).into_iter().map(|(b, ci)| norm(b, ci)).collect();
                if f.iter().all(|l| !l.0.is_empty()) {
                    out.push(f);
                }
            };
            for c in children {
                match strings(c) {
                    Some(set) if run.len() * set.len() <= MAX_STRINGS => run = product(&run, &set),
                    Some(set) => {
                        flush(&mut run, &mut out);
                        run = set;
                    }
                    None => {
                        flush(&mut run, &mut out);
                        out.extend(factors(c));
                    }
                }
            }
            flush(&mut run, &mut out);
            out
        }
        _ => Vec::new(),
    }
}

/// Strings kept in one literal set: more make the automata larger than they make the check stricter.
const MAX_STRINGS: usize = 16;

/// The strings `h` matches (ignoring ASCII case where a flag is set), if they are at most
/// `MAX_STRINGS`; the empty string among them when `h` may match nothing.
fn strings(h: &Hir) -> Option<Vec<Lit>> {
    let set = match h.kind() {
        HirKind::Empty => vec![(Vec::new(), false)],
        HirKind::Literal(l) => vec![(l.0.to_vec(), false)],
        HirKind::Class(c) => vec![class_lit(c)?],
        HirKind::Capture(c) => strings(&c.sub)?,
        HirKind::Repetition(r) if r.max == Some(r.min) && r.min <= 16 => {
            let sub = strings(&r.sub)?;
            let mut out = vec![(Vec::new(), false)];
            for _ in 0..r.min {
                out = product(&out, &sub);
                if out.len() > MAX_STRINGS {
                    return None;
                }
            }
            out
        }
        HirKind::Repetition(r) if r.min == 0 && r.max == Some(1) => {
            let mut out = strings(&r.sub)?;
            out.push((Vec::new(), false));
            out
        }
        HirKind::Concat(children) => {
            let mut out = vec![(Vec::new(), false)];
            for c in children {
                out = product(&out, &strings(c)?);
                if out.len() > MAX_STRINGS {
                    return None;
                }
            }
            out
        }
        HirKind::Alternation(branches) => {
            let mut out = Vec::new();
            for b in branches {
                out.extend(strings(b)?);
                if out.len() > MAX_STRINGS {
                    return None;
                }
            }
            out
        }
        _ => return None,
    };
    (set.len() <= MAX_STRINGS).then_some(set)
}

/// Every string of `a` followed by every string of `b`.
fn product(a: &[Lit], b: &[Lit]) -> Vec<Lit> {
    let mut out: Vec<Lit> = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let l = ([x.0.as_slice(), y.0.as_slice()].concat(), x.1 || y.1);
            if !out.contains(&l) {
                out.push(l);
            }
        }
    }
    out
}

/// A class of one byte, or of one ASCII letter in both cases.
fn class_lit(c: &Class) -> Option<Lit> {
    let bytes: Vec<(u32, u32)> = match c {
        Class::Bytes(b) => b.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()))).collect(),
        Class::Unicode(u) => u.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()))).collect(),
    };
    match bytes[..] {
        [(a, b)] if a == b && a < 0x80 => Some((vec![a as u8], false)),
        [(a, b), (c, d)] if a == b && c == d && a < 0x80 && c < 0x80 => {
            let (x, y) = (a as u8, c as u8);
            (x.is_ascii_alphabetic() && x.eq_ignore_ascii_case(&y) && x != y)
                .then(|| (vec![x.to_ascii_lowercase()], true))
        }
        _ => None,
    }
}

/// Lowercase a case-insensitive literal; one without letters is case-sensitive.
fn norm(mut bytes: Vec<u8>, ci: bool) -> Lit {
    if ci && bytes.iter().any(u8::is_ascii_alphabetic) {
        bytes.make_ascii_lowercase();
        (bytes, true)
    } else {
        (bytes, false)
    }
}
