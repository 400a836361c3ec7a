//! Which lines can matter to the engine, decided without running the rule set on them.
//!
//! A line matters when one of the engine's patterns matches it or `level_of` rates it a warning
//! or an error. Almost every line of an `NCCL_DEBUG=INFO` log does neither, so `explain` first asks
//! this prefilter, which only says "no" when that is certain, and runs the full matcher (the one
//! `RegexSet` pass, the level, the parse) on the rest, exactly as before.
//!
//! How: every pattern is parsed, and the literal strings any match of it must contain are taken
//! from its syntax tree: a conjunction of factors, each a set of alternative literals (for
//! `comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks` that is `comm 0x` and ` rank ` and `nranks ` ignoring
//! case). The line can matter only if a literal of `level_of`'s (`WARN_LITERALS` and the like) is
//! there, or every factor of some pattern is, or it has a c10 severity prefix (`positional_warn`).
//! Patterns with no usable literal go into a small `RegexSet` of their own that is run on every line.
//!
//! One first stage reads every byte for the keys: the level literals and the best factor of each
//! pattern (minus literals that contain another one, ASCII case ignored), of which almost every
//! line holds none. On a large input that stage is the gate of `grams.rs` (a 4-byte window of each
//! key, hashed into a bit table); on a small one an NFA, quicker to build. For each key found,
//! only what that key stands for is checked: the level literal, or the other factors of the patterns whose best factor holds it, each literal with a
//! `memmem` finder of its own. (An automaton over every literal of every pattern, searched for all
//! its matches, cost more than the rest of the engine on INFO lines that hold a common word.)
//!
//! The literals are taken under ASCII semantics (`(?-u)`), which agree with Unicode semantics on
//! ASCII text, so the engine asks only about lines that are printable ASCII after cleaning; other
//! lines always take the full matcher.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};

use super::grams::Gate;
#[cfg(test)]
use super::literals::ascii_safe;
use super::literals::{key_start, required_factors, Factor, Lit, KEY_LEN};

#[cfg(test)]
use super::prefix::strip_prefixes;
use super::record::{positional_warn, ERROR_LIKE_LITERALS, WARN_LITERALS};

pub struct Prefilter {
    /// Some key of it is in every line that can matter (ASCII case ignored): the first stage when
    /// there is no `gate`, and what tells which key stands for which literal. `None`: it could not
    /// be built; every line matters.
    first: Option<AhoCorasick>,
    /// On a large input, what finds the keys instead of `first` (see `grams.rs`), when it can.
    gate: Option<Gate>,
    /// Per key of `first`, what its presence may mean: a level literal, or a pattern whose best
    /// factor holds the key. Only these are checked on a line, each with its own finders.
    deps: Vec<Vec<Dep>>,
    lits: Vec<LitInfo>,
    /// Per prefiltered pattern, its factors as literal ids.
    factors: Vec<Vec<Vec<u32>>>,
    /// Per prefiltered pattern, its index among the patterns given to `new`.
    pattern_of: Vec<u32>,
    /// Whether no key of `first` holds another (see `reach`).
    minimal: bool,
    /// The patterns that need a level literal (index among those given, factors): only `warns`
    /// reads them, so their finders are made with its automaton, not at start-up.
    level_only: Vec<(u32, Vec<Factor>)>,
    /// What `warns` searches with, built on the first line a level lets through.
    warn_keys: std::sync::OnceLock<Option<WarnKeys>>,
    /// Patterns without literals, run on every line, and their indices among those given.
    residual: Option<regex::RegexSet>,
    residual_of: Vec<u32>,
    /// When every residual pattern is anchored at the start with a known set of first bytes
    /// (`^OK ...`): those bytes; the set is then run only on lines that start with one of them.
    residual_heads: Option<Vec<Vec<u8>>>,
}

/// What `Prefilter::reach` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// No pattern can match, and `level_of` cannot rate the line a warning.
    Nothing,
    /// Only the patterns it lists can match, and `level_of` cannot rate the line a warning.
    Some,
    /// The line matters (a warning's level, a c10 prefix), and only the patterns listed can match.
    Warns,
    /// The line matters, and any pattern may match.
    Any,
}

/// An automaton over the first factor's literals of every pattern with factors (any match of the
/// pattern holds one of them), and what each literal leads to.
struct WarnKeys {
    ac: AhoCorasick,
    /// Per literal of `ac`, the patterns (indices into `factors`) whose first factor holds it.
    pats: Vec<Vec<u32>>,
    /// Per pattern: its index among those given to `Prefilter::new`, its factors as ids of `lits`.
    factors: Vec<(u32, Vec<Vec<u32>>)>,
    lits: Vec<LitInfo>,
}

/// What a key of the first stage stands for.
#[derive(Clone, Copy, PartialEq)]
enum Dep {
    /// A level literal (its id) that holds the key: if present, the line matters.
    Level(u32),
    /// A prefiltered pattern (index into `factors`) whose best factor has a literal holding it.
    Pattern(u32),
}

struct LitInfo {
    /// Finds the literal (lowercase, in a lowercased line, when `ci`).
    finder: memchr::memmem::Finder<'static>,
    ci: bool,
}

/// A case-sensitive literal that contains one of the level literals (`level`: an automaton over
/// them; without it, none is found: the pattern keeps its place, a "maybe" more, never a "no").
fn holds_level(level: &Option<AhoCorasick>, l: &Lit) -> bool {
    !l.1 && level.as_ref().is_some_and(|a| a.is_match(&l.0))
}

/// Literals whose presence alone makes a line matter: warning and error levels, the words of
/// `looks_like_error` (fail safe), and the openers of multi-line records. Also NCCL's level words
/// without the space `level_of` wants before them: hundreds of patterns begin with `NCCL WARN `,
/// and such a pattern can then match only where the line is taken whole anyway, so it needs no
/// literal of its own (a line reading `NCCL WARN` at its very start is taken whole too: one more
/// "maybe", never a "no" too many).
fn level_literals() -> impl Iterator<Item = &'static str> {
    const NCCL_LEVELS: &[&str] = &["NCCL WARN", "NCCL ATTN"];
    WARN_LITERALS.iter().chain(ERROR_LIKE_LITERALS).chain(crate::log::records::OPENERS).chain(NCCL_LEVELS).copied()
}

impl Prefilter {
    /// The prefilter for the engine's patterns (rules, phase markers, its own version lines).
    /// `dfa`: its automaton is a DFA, which reads a large input several times faster and takes
    /// several times longer to build than the NFA that serves a small one.
    pub fn new(patterns: &[String], dfa: bool) -> Prefilter {
        let mut b = Builder::default();
        // What the first stage must find: each level literal, and the best factor's literals of
        // each prefiltered pattern.
        let mut entries: Vec<(Lit, Dep)> = Vec::new();
        for w in level_literals() {
            let l = (w.as_bytes().to_vec(), false);
            entries.push((l.clone(), Dep::Level(b.lit(&l))));
        }
        let level_ac = AhoCorasick::new(level_literals()).ok();
        let mut residual = Vec::new();
        let (mut pattern_of, mut residual_of) = (Vec::new(), Vec::new());
        let mut level_only = Vec::new();
        for (i, p) in patterns.iter().enumerate() {
            match factors_of(p) {
                // A factor whose every literal holds a level literal (`Call to bind failed` holds
                // `failed`): the pattern can match only on lines that `reach` answers `Warns` for
                // anyway, so it needs no key in the first stage.
                Some((fs, _)) if fs.iter().any(|f| f.iter().all(|l| holds_level(&level_ac, l))) => {
                    level_only.push((i as u32, fs));
                }
                Some((fs, starts)) => {
                    let pi = b.factors.len() as u32;
                    pattern_of.push(i as u32);
                    // The first stage looks for a piece of each literal (`key_start`); the
                    // second checks every factor whole.
                    let key = |(l, &s): (&Lit, &usize)| (l.0[s..(s + KEY_LEN).min(l.0.len())].to_vec(), l.1);
                    entries.extend(fs[0].iter().zip(&starts).map(|x| (key(x), Dep::Pattern(pi))));
                    let ids = fs.iter().map(|f| f.iter().map(|l| b.lit(l)).collect()).collect();
                    b.factors.push(ids);
                }
                None => {
                    residual.push(p.as_str());
                    residual_of.push(i as u32);
                }
            }
        }
        // A smaller DFA reads a large input faster; a small one is read before the reduction
        // (another automaton over every literal) would pay for itself. Either key set finds every
        // literal's line: a literal's key is the longest one it holds, itself when all are kept.
        let lits = entries.iter().map(|(l, _)| l.clone()).collect();
        let keys = if dfa { minimal(lits) } else { lowercase(lits) };
        // The gate reads a large input several times faster than a DFA; the automaton then only
        // tells below which key stands for which literal (an NFA is quicker to build).
        let gate = if dfa { Gate::new(&keys) } else { None };
        let kind = if dfa && gate.is_none() { AhoCorasickKind::DFA } else { AhoCorasickKind::ContiguousNFA };
        let Some(first) = automaton(&keys, kind) else { return Prefilter::everything() };
        let mut deps: Vec<Vec<Dep>> = vec![Vec::new(); keys.len()];
        for (l, d) in &entries {
            // The longest key the literal holds (`minimal` kept one of them, or it is one).
            let k = first.find_overlapping_iter(&l.0).map(|m| m.pattern().as_usize()).max_by_key(|&k| keys[k].len());
            match k {
                // A pattern is checked once per key, whichever of its literals led there.
                Some(k) if !deps[k].contains(d) => deps[k].push(*d),
                Some(_) => {}
                None => return Prefilter::everything(),
            }
        }
        let residual_heads = heads(&residual);
        let residual = if residual.is_empty() {
            None
        } else {
            match regex::RegexSet::new(&residual) {
                Ok(set) => Some(set),
                Err(_) => return Prefilter::everything(),
            }
        };
        Prefilter {
            first: Some(first),
            gate,
            deps,
            lits: b.lits,
            factors: b.factors,
            pattern_of,
            minimal: dfa,
            level_only,
            warn_keys: std::sync::OnceLock::new(),
            residual,
            residual_of,
            residual_heads,
        }
    }

    /// A prefilter that lets every line through.
    fn everything() -> Prefilter {
        Prefilter {
            first: None,
            gate: None,
            deps: Vec::new(),
            lits: Vec::new(),
            factors: Vec::new(),
            pattern_of: Vec::new(),
            minimal: false,
            level_only: Vec::new(),
            warn_keys: std::sync::OnceLock::new(),
            residual: None,
            residual_of: Vec::new(),
            residual_heads: None,
        }
    }

    /// False only when no pattern can match `line` and `level_of` cannot rate it `Warn` or above
    /// (the tests' view of `reach`; the engine calls `reach` on the stripped message itself).
    #[cfg(test)]
    fn may_matter(&self, line: &str) -> bool {
        self.reach(strip_prefixes(line).rest, &mut Vec::new()) != Reach::Nothing
    }

    /// Which patterns can match `rest` (a line with its prefixes stripped, ASCII). On
    /// `Reach::Some` and `Reach::Warns`, `out` holds them (indices into the patterns given to
    /// `new`, ascending): the engine then runs those alone, not the whole set. Only `rest` is
    /// searched: the patterns, the level and the record openers see nothing else (Ray's prefix is
    /// 40 bytes of a line).
    pub fn reach(&self, rest: &str, out: &mut Vec<usize>) -> Reach {
        out.clear();
        let Some(first) = &self.first else { return Reach::Any };
        if positional_warn(rest) {
            return self.warns(rest, out);
        }
        let hay = rest.as_bytes();
        let mut lower: Vec<u8> = Vec::new();
        // The keys the line holds, each once.
        let mut seen: Vec<usize> = Vec::new();
        if let Some(g) = &self.gate {
            g.keys_in(hay, &mut seen);
        } else if let Some(m) = first.find(hay) {
            // The earliest key, found by the automaton's own fast loop (almost every line has
            // none). No key of a minimal set holds another, so none starts before it: the search
            // for all of them starts there, not at the line's start.
            let from = if self.minimal { m.start() } else { 0 };
            for m in first.find_overlapping_iter(aho_corasick::Input::new(hay).span(from..hay.len())) {
                if !seen.contains(&m.pattern().as_usize()) {
                    seen.push(m.pattern().as_usize());
                }
            }
        }
        for &k in &seen {
            for d in &self.deps[k] {
                match *d {
                    Dep::Level(id) => {
                        if self.present(id, hay, &mut lower) {
                            return self.warns(rest, out);
                        }
                    }
                    Dep::Pattern(p) => {
                        let pat = self.pattern_of[p as usize] as usize;
                        if !out.contains(&pat)
                            // The best factor last: its key is here, so it is the likeliest.
                            && self.factors[p as usize]
                                .iter()
                                .rev()
                                .all(|f| f.iter().any(|&x| self.present(x, hay, &mut lower)))
                        {
                            out.push(pat);
                        }
                    }
                }
            }
        }
        self.add_residual(rest, out);
        if out.is_empty() {
            return Reach::Nothing;
        }
        out.sort_unstable();
        out.dedup();
        Reach::Some
    }

    /// A line that matters whatever it matches (its level, a logger head): which patterns can
    /// match it, each pattern's factors checked (those that need a level literal too), so that the
    /// engine runs them alone, not the set of every pattern: on a teardown's thousands of WARN
    /// lines that set's lazy DFA thrashed its cache. `Reach::Any` when that cannot be told.
    pub fn warns(&self, rest: &str, out: &mut Vec<usize>) -> Reach {
        out.clear();
        let Some(w) = self.warn_keys.get_or_init(|| self.build_warn_keys()) else { return Reach::Any };
        let hay = rest.as_bytes();
        let mut lower: Vec<u8> = Vec::new();
        for m in w.ac.find_overlapping_iter(hay) {
            for &p in &w.pats[m.pattern().as_usize()] {
                let (pat, fs) = &w.factors[p as usize];
                let pat = *pat as usize;
                if !out.contains(&pat) && fs.iter().all(|f| f.iter().any(|&x| present(&w.lits, x, hay, &mut lower))) {
                    out.push(pat);
                }
            }
        }
        self.add_residual(rest, out);
        out.sort_unstable();
        out.dedup();
        Reach::Warns
    }

    /// The automaton of `warns` (ASCII case ignored; the factors are then checked exactly).
    fn build_warn_keys(&self) -> Option<WarnKeys> {
        let mut b = Builder::default();
        let lit_of = |id: u32| (self.lits[id as usize].finder.needle().to_vec(), self.lits[id as usize].ci);
        let mut factors: Vec<(u32, Vec<Vec<u32>>)> = Vec::new();
        for (fs, &pat) in self.factors.iter().zip(&self.pattern_of) {
            factors.push((pat, fs.iter().map(|f| f.iter().map(|&id| b.lit(&lit_of(id))).collect()).collect()));
        }
        for (pat, fs) in &self.level_only {
            factors.push((*pat, fs.iter().map(|f| f.iter().map(|l| b.lit(l)).collect()).collect()));
        }
        let mut index: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        let mut needles: Vec<&[u8]> = Vec::new();
        let mut pats: Vec<Vec<u32>> = Vec::new();
        for (p, (_, fs)) in factors.iter().enumerate() {
            for &id in fs.first()? {
                let k = *index.entry(id).or_insert_with(|| {
                    needles.push(b.lits[id as usize].finder.needle());
                    pats.push(Vec::new());
                    needles.len() - 1
                });
                if !pats[k].contains(&(p as u32)) {
                    pats[k].push(p as u32);
                }
            }
        }
        let ac = automaton(&needles, AhoCorasickKind::ContiguousNFA)?;
        Some(WarnKeys { ac, pats, factors, lits: b.lits })
    }

    /// Adds the residual patterns (those without literals) that match `rest`.
    fn add_residual(&self, rest: &str, out: &mut Vec<usize>) {
        // A call of the set costs more than the search on a short line (its cache pool), and the
        // residual patterns begin with known bytes: ask them first.
        if let Some(hs) = &self.residual_heads {
            if !hs.iter().any(|h| rest.as_bytes().starts_with(h)) {
                return;
            }
        }
        if let Some(r) = self.residual.as_ref().filter(|r| r.is_match(rest)) {
            out.extend(r.matches(rest).into_iter().map(|i| self.residual_of[i] as usize));
        }
    }

    fn present(&self, id: u32, hay: &[u8], lower: &mut Vec<u8>) -> bool {
        present(&self.lits, id, hay, lower)
    }

    /// Patterns the prefilter could not take literals from (run on every line).
    #[cfg(test)]
    fn residual_len(&self) -> usize {
        self.residual.as_ref().map_or(0, |r| r.len())
    }
}

/// The byte strings one of which every match of every pattern starts with, when each is anchored at
/// the start of the text (`^`, not `(?m)^`) and its prefixes are few and known; else `None`.
fn heads(patterns: &[&str]) -> Option<Vec<Vec<u8>>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    use regex_syntax::hir::Look;
    let mut out = Vec::new();
    for p in patterns {
        // As the residual set reads it (Unicode on).
        let hir = regex_syntax::Parser::new().parse(p).ok()?;
        if !hir.properties().look_set_prefix().contains(Look::Start) {
            return None;
        }
        let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
        let lits = seq.literals()?;
        if lits.is_empty() || lits.iter().any(|l| l.as_bytes().is_empty()) {
            return None;
        }
        out.extend(lits.iter().map(|l| l.as_bytes().to_vec()));
    }
    Some(out)
}

/// Whether literal `id` of `lits` is in `hay`; `lower`: `hay` lowercased, made on first need.
fn present(lits: &[LitInfo], id: u32, hay: &[u8], lower: &mut Vec<u8>) -> bool {
    let l = &lits[id as usize];
    if !l.ci {
        return l.finder.find(hay).is_some();
    }
    if lower.is_empty() {
        *lower = hay.to_ascii_lowercase();
    }
    l.finder.find(lower).is_some()
}

/// One ASCII-case-insensitive automaton over `lits` (case-sensitive literals are checked after),
/// of the kind asked for if it can be built, else of whatever kind can.
fn automaton<I, P>(lits: I, kind: AhoCorasickKind) -> Option<AhoCorasick>
where
    I: IntoIterator<Item = P> + Clone,
    P: AsRef<[u8]>,
{
    let b = || {
        let mut b = AhoCorasick::builder();
        b.ascii_case_insensitive(true).match_kind(MatchKind::Standard);
        b
    };
    b().kind(Some(kind)).build(lits.clone()).or_else(|_| b().build(lits)).ok()
}

/// The factors of each built-in pattern, computed by `build.rs` with `literals.rs`, sorted by
/// pattern; `&[]`: none (the pattern is run on every line).
mod built {
    include!(concat!(env!("OUT_DIR"), "/factors.rs"));
}

/// `required_factors(pattern)` and the `key_start` of each literal of its first factor, from the
/// build's table when the pattern is a built-in one.
fn factors_of(pattern: &str) -> Option<(Vec<Factor>, Vec<usize>)> {
    let Ok(i) = built::FACTORS.binary_search_by(|(p, _, _)| (*p).cmp(pattern)) else {
        let fs = required_factors(pattern)?;
        let starts = fs[0].iter().map(key_start).collect();
        return Some((fs, starts));
    };
    let (_, fs, starts) = built::FACTORS[i];
    let fs: Vec<Factor> = fs.iter().map(|f| f.iter().map(|&(l, ci)| (l.to_vec(), ci)).collect()).collect();
    (!fs.is_empty()).then(|| (fs, starts.iter().map(|&s| usize::from(s)).collect()))
}

/// Whether `pattern` is in the build's table (the tests hold it to cover the built-in ones).
#[cfg(test)]
pub(crate) fn in_build_table(pattern: &str) -> bool {
    built::FACTORS.binary_search_by(|(p, _, _)| (*p).cmp(pattern)).is_ok()
}

/// `lits` lowercased, sorted (shortest first) and without repeats.
fn lowercase(lits: Vec<Lit>) -> Vec<Vec<u8>> {
    let mut lits: Vec<Vec<u8>> = lits.into_iter().map(|l| l.0.to_ascii_lowercase()).collect();
    lits.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    lits.dedup();
    lits
}

/// `lits` without the ones that contain another (finding the shorter one is then enough), as
/// case-insensitive literals: the first stage may say "yes" too often, never too seldom.
fn minimal(lits: Vec<Lit>) -> Vec<Vec<u8>> {
    let lits = lowercase(lits);
    // A literal holding another holds one that is kept (a smallest one it holds), so one search
    // of each literal for all others tells.
    let Some(all) = automaton(&lits, AhoCorasickKind::ContiguousNFA) else { return lits };
    let holds_other = |i: usize| all.find_overlapping_iter(&lits[i]).any(|m| m.pattern().as_usize() != i);
    (0..lits.len()).filter(|&i| !holds_other(i)).map(|i| lits[i].clone()).collect()
}

#[derive(Default)]
struct Builder {
    lits: Vec<LitInfo>,
    index: std::collections::HashMap<Lit, u32>,
    factors: Vec<Vec<Vec<u32>>>,
}

impl Builder {
    fn lit(&mut self, l: &Lit) -> u32 {
        if let Some(&id) = self.index.get(l) {
            return id;
        }
        let id = self.lits.len() as u32;
        let finder = memchr::memmem::Finder::new(&l.0).into_owned();
        self.lits.push(LitInfo { finder, ci: l.1 });
        self.index.insert(l.clone(), id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(p: &str) -> Vec<Vec<(String, bool)>> {
        required_factors(p)
            .unwrap_or_default()
            .into_iter()
            .map(|f| f.into_iter().map(|(b, ci)| (String::from_utf8(b).unwrap(), ci)).collect())
            .collect()
    }

    #[test]
    fn factors_of_typical_patterns() {
        assert_eq!(
            lits(r"comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)"),
            vec![vec![(" nranks ".to_string(), true)], vec![("comm 0x".into(), false)], vec![(" rank ".into(), false)]]
        );
        assert_eq!(
            lits(r"(?i:out of memory): Killed process (?P<pid>\d+)")[0],
            vec![("out of memory: killed process ".to_string(), true)]
        );
        // Few strings in a row: their products.
        assert_eq!(
            lits(r"DeepEP timeout for (?:dispatch|combine) (?:senders|receivers)")[0],
            ["dispatch senders", "dispatch receivers", "combine senders", "combine receivers"]
                .map(|w| (format!("DeepEP timeout for {w}"), false))
        );
        assert_eq!(
            lits(r"NCCL (?:WARN|ATTN) (?:NET/IB ?: \S+ GID table changed)"),
            vec![
                vec![
                    ("NCCL WARN NET/IB : ".to_string(), false),
                    ("NCCL WARN NET/IB: ".into(), false),
                    ("NCCL ATTN NET/IB : ".into(), false),
                    ("NCCL ATTN NET/IB: ".into(), false)
                ],
                vec![(" GID table changed".to_string(), false)],
            ]
        );
        assert_eq!(
            lits(r"(?:NCCL version |^\[epdoctor\] rank=\d+ .*\bnccl_version=)(\d+)"),
            vec![vec![("NCCL version ".to_string(), false), ("[epdoctor] rank=".into(), false)]]
        );
        // Nothing literal to hold on to: the pattern is run on every line.
        assert!(required_factors(r"^\w+ \d+$").is_none());
        assert!(required_factors(r"x\d+").is_none());
        assert!(required_factors(r"(?:foo|\d+)bar").is_some());
    }

    #[test]
    fn the_builds_table_is_what_the_patterns_give() {
        assert!(built::FACTORS.len() > 500);
        assert!(built::FACTORS.windows(2).all(|w| w[0].0 < w[1].0), "sorted, for the binary search");
        for (p, _, _) in built::FACTORS {
            let fs = required_factors(p);
            let starts = fs.as_ref().map(|fs| fs[0].iter().map(key_start).collect());
            assert_eq!(factors_of(p), fs.zip(starts), "{p}");
        }
    }

    fn may(p: &Prefilter, line: &str) -> bool {
        p.may_matter(line)
    }

    #[test]
    fn non_ascii_patterns_are_run_on_every_line() {
        assert!(!ascii_safe(r"(?i)\x{212A}ill"));
        assert!(!ascii_safe("(?i)\u{17F}ome"));
        assert!(!ascii_safe("caf\u{e9}"));
        assert!(!ascii_safe("caf\u{00e9}"));
        assert!(!ascii_safe("\\p{Greek}"));
        assert!(ascii_safe(r"NCCL WARN \[Service thread\] (?i:kill)"));
        let p = Prefilter::new(&["(?i)\\x{212A}ill".to_string()], false);
        assert_eq!(p.residual_len(), 1);
        assert!(may(&p, "then kill it"));
    }

    #[test]
    fn patterns_that_need_a_level_word_take_no_place_in_the_stages() {
        let pats = [r"NCCL (?:WARN|ATTN) NET/IB ?: \S+ GID table changed".to_string(), r"via P2P/(\w+)".to_string()];
        let p = Prefilter::new(&pats, true);
        // Its factors are kept for `warns` only.
        assert_eq!(p.pattern_of, [1]);
        assert_eq!(p.level_only.len(), 1);
        let mut out = Vec::new();
        // An INFO line holding the WARN pattern's other literals: nothing it could match.
        assert_eq!(p.reach("NCCL INFO NET/IB : mlx5_0 GID table changed", &mut out), Reach::Nothing);
        assert_eq!(p.reach("NCCL WARN NET/IB : mlx5_0 GID table changed", &mut out), Reach::Warns);
        assert_eq!(out, [0]);
        assert_eq!(p.reach("x NCCL WARN NET/IB : mlx5_0 GID table changed", &mut out), Reach::Warns);
        assert_eq!(out, [0]);
        assert_eq!(p.reach("x NCCL WARN NET/IB : mlx5_0 GID", &mut out), Reach::Warns);
        assert!(out.is_empty());
        assert_eq!(p.reach("NCCL INFO Channel 00/0 : 1 -> 2 via P2P/CUMEM/read", &mut out), Reach::Some);
        assert_eq!(out, [1]);
    }

    #[test]
    fn residual_patterns_are_asked_by_their_heads() {
        let ok = heads(&[r"^OK(?: \(skipped=\d+\))?$"]).unwrap();
        assert!(ok.contains(&b"OK".to_vec()) && ok.iter().all(|h| h.starts_with(b"OK")));
        // Unicode case folding: `k` is also the Kelvin sign.
        assert_eq!(heads(&[r"^(?i)ok\d"]).map(|h| h.len()), Some(6));
        assert_eq!(heads(&[r"(?m)^OK\d"]), None);
        assert_eq!(heads(&[r"x\d+"]), None);
        assert_eq!(heads(&[r"^\d+ \d+$"]), None);
        let p = Prefilter::new(&[r"^OK\d".to_string(), r"comm 0x[0-9a-f]+ rank".to_string()], true);
        assert_eq!(p.residual_len(), 1);
        assert!(may(&p, "OK1"));
        assert!(!may(&p, "OK"));
        assert!(!may(&p, "x OK1"));
    }

    #[test]
    fn prefilter_answers() {
        let pats = [r"comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)".to_string(), r"^\d+ \d+$".to_string()];
        let p = Prefilter::new(&pats, true);
        assert_eq!(p.residual_len(), 1);
        assert!(may(&p, "h:1:1 [0] NCCL INFO comm 0x55 rank 3 nRanks 8 nNodes 1"));
        assert!(!may(&p, "h:1:1 [0] NCCL INFO AllReduce: opCount 1 comm 0x55 [nranks=8] stream 0x1"));
        assert!(may(&p, "h:1:1 [0] proxy.cc:1 NCCL WARN anything"));
        assert!(may(&p, "[rank1]:[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1] m"));
        assert!(may(&p, "[rank1]:12 34"));
        assert!(!may(&p, "[rank1]:12 pears"));
        assert!(may(&p, "RuntimeError: boom"));
        // Which patterns can match: the comm line's, the residual's, or any on a warning.
        let mut out = Vec::new();
        assert_eq!(p.reach("h:1:1 [0] NCCL INFO comm 0x55 rank 3 nRanks 8 nNodes 1", &mut out), Reach::Some);
        assert_eq!(out, [0]);
        assert_eq!(p.reach("12 34", &mut out), Reach::Some);
        assert_eq!(out, [1]);
        assert_eq!(p.reach("h:1:1 [0] proxy.cc:1 NCCL WARN comm 0x55 rank 3 nRanks 8", &mut out), Reach::Warns);
        assert_eq!(out, [0]);
        assert_eq!(p.warns("12 34", &mut out), Reach::Warns);
        assert_eq!(out, [1]);
        assert_eq!(p.reach("h:1:1 [0] NCCL INFO AllReduce: opCount 1", &mut out), Reach::Nothing);
        assert!(out.is_empty());
    }
}
