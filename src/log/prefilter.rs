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
//! case). One Aho-Corasick automaton over all those literals and `level_of`'s `WARN_LITERALS`
//! finds the ones a line holds; the line can matter only if a level literal is there, or every
//! factor of some pattern is, or it has a c10 severity prefix (`positional_warn`). Patterns with no
//! usable literal go into a small `RegexSet` of their own that is run on every line.
//!
//! Two stages, since searching for every match of every literal costs more than asking whether
//! there is any: a first automaton holds only the level literals and the best factor of each
//! pattern (minus literals that contain another one), and answers "no" for almost every line with
//! one leftmost search; the overlapping search over all literals runs on the lines it lets through.
//!
//! The literals are taken under ASCII semantics (`(?-u)`), which agree with Unicode semantics on
//! ASCII text, so the engine asks only about lines that are printable ASCII after cleaning; other
//! lines always take the full matcher.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex_syntax::hir::{Class, Hir, HirKind};

#[cfg(test)]
use super::prefix::strip_prefixes;
use super::record::{positional_warn, ERROR_LIKE_LITERALS, WARN_LITERALS};

/// Shortest literal worth looking for: a pattern with only shorter ones (`x\d+`) is run on every
/// line instead, which costs less than taking every line that holds an `x` to the full matcher.
const MIN_FACTOR: usize = 3;
/// Factors kept per pattern (the longest): each one more makes the check stricter, not safer.
const MAX_FACTORS: usize = 3;
/// Distinct literals tracked per line; a line with more takes the full matcher.
const PRESENT: usize = 32;
/// Words of the bit set of literals present (literal ids past `64 * BITS` are looked up in a list).
const BITS: usize = 16;

/// A literal; `ci`: ASCII case-insensitive, stored lowercase.
type Lit = (Vec<u8>, bool);
/// Alternative literals, one of which every match contains.
type Factor = Vec<Lit>;

pub struct Prefilter {
    /// `None`: an automaton could not be built; every line matters.
    ac: Option<AhoCorasick>,
    /// The first stage: some literal of it is in every line that can matter (a DFA: it reads
    /// every byte of the input; the second stage reads few lines, an NFA is enough there).
    first: Option<AhoCorasick>,
    lits: Vec<LitInfo>,
    /// Per prefiltered pattern, its factors as literal ids.
    factors: Vec<Vec<Vec<u32>>>,
    /// Per literal id, the patterns (indices into `factors`) that use it.
    users: Vec<Vec<u32>>,
    /// Per prefiltered pattern, its index among the patterns given to `new`.
    pattern_of: Vec<u32>,
    /// Patterns without literals, run on every line, and their indices among those given.
    residual: Option<regex::RegexSet>,
    residual_of: Vec<u32>,
}

/// What `Prefilter::reach` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// No pattern can match, and `level_of` cannot rate the line a warning.
    Nothing,
    /// Only the patterns it lists can match, and `level_of` cannot rate the line a warning.
    Some,
    /// Any pattern may match (a warning's level, a c10 prefix, too many literals).
    Any,
}

struct LitInfo {
    bytes: Vec<u8>,
    ci: bool,
    /// One of `WARN_LITERALS`: its presence alone makes the line matter.
    level: bool,
}

/// A case-sensitive literal that contains one of the level literals.
fn holds_level_literal(l: &Lit) -> bool {
    !l.1 && level_literals().any(|w| memchr::memmem::find(&l.0, w.as_bytes()).is_some())
}

/// Literals whose presence alone makes a line matter: warning and error levels, the words of
/// `looks_like_error` (fail safe), and the openers of multi-line records.
fn level_literals() -> impl Iterator<Item = &'static str> {
    WARN_LITERALS.iter().chain(ERROR_LIKE_LITERALS).chain(crate::log::records::OPENERS).copied()
}

impl Prefilter {
    /// The prefilter for the engine's patterns (rules, phase markers, its own version lines).
    pub fn new(patterns: &[String]) -> Prefilter {
        let mut b = Builder::default();
        for w in level_literals() {
            let id = b.lit(&(w.as_bytes().to_vec(), false));
            b.lits[id as usize].level = true;
        }
        let mut residual = Vec::new();
        let (mut pattern_of, mut residual_of) = (Vec::new(), Vec::new());
        let mut first: Vec<Lit> = level_literals().map(|w| (w.as_bytes().to_vec(), false)).collect();
        for (i, p) in patterns.iter().enumerate() {
            match required_factors(p) {
                Some(fs) => {
                    pattern_of.push(i as u32);
                    // A factor whose every literal holds a level literal (`Call to bind failed`
                    // holds `failed`) needs nothing in the first stage: the level literal already
                    // lets such lines through. Otherwise the best factor goes in.
                    if !fs.iter().any(|f| f.iter().all(holds_level_literal)) {
                        first.extend(fs[0].iter().cloned());
                    }
                    let ids: Vec<Vec<u32>> = fs.iter().map(|f| f.iter().map(|l| b.lit(l)).collect()).collect();
                    let pi = b.factors.len() as u32;
                    for id in ids.iter().flatten() {
                        let users = &mut b.users[*id as usize];
                        if users.last() != Some(&pi) {
                            users.push(pi);
                        }
                    }
                    b.factors.push(ids);
                }
                None => {
                    residual.push(p.as_str());
                    residual_of.push(i as u32);
                }
            }
        }
        let ac = automaton(b.lits.iter().map(|l| &l.bytes), AhoCorasickKind::ContiguousNFA);
        let first = automaton(&minimal(first), AhoCorasickKind::DFA);
        if ac.is_none() || first.is_none() {
            return Prefilter::everything();
        }
        let residual = if residual.is_empty() {
            None
        } else {
            match regex::RegexSet::new(&residual) {
                Ok(set) => Some(set),
                Err(_) => return Prefilter::everything(),
            }
        };
        Prefilter { ac, first, lits: b.lits, factors: b.factors, users: b.users, pattern_of, residual, residual_of }
    }

    /// A prefilter that lets every line through.
    fn everything() -> Prefilter {
        Prefilter {
            ac: None,
            first: None,
            lits: Vec::new(),
            factors: Vec::new(),
            users: Vec::new(),
            pattern_of: Vec::new(),
            residual: None,
            residual_of: Vec::new(),
        }
    }

    /// False only when no pattern can match `line` and `level_of` cannot rate it `Warn` or above
    /// (the tests' view of `reach`; the engine calls `reach` on the stripped message itself).
    #[cfg(test)]
    fn may_matter(&self, line: &str) -> bool {
        self.reach(strip_prefixes(line).rest, &mut Vec::new()) != Reach::Nothing
    }

    /// Which patterns can match `rest` (a line with its prefixes stripped, ASCII). On
    /// `Reach::Some`, `out` holds them (indices into the patterns given to `new`, ascending): the
    /// engine then runs those alone, not the whole set. Only `rest` is searched: the patterns,
    /// the level and the record openers see nothing else (Ray's prefix is 40 bytes of a line).
    pub fn reach(&self, rest: &str, out: &mut Vec<usize>) -> Reach {
        out.clear();
        let (Some(ac), Some(first)) = (&self.ac, &self.first) else { return Reach::Any };
        if positional_warn(rest) {
            return Reach::Any;
        }
        let hay = rest.as_bytes();
        if first.is_match(hay) {
            let mut present = [0u32; PRESENT];
            let mut n = 0;
            // The same, as bits for the first `64 * BITS` literal ids: the factor checks below
            // test membership many times per line.
            let mut bits = [0u64; BITS];
            let has = |bits: &[u64; BITS], present: &[u32], x: u32| match bits.get(x as usize / 64) {
                Some(w) => w >> (x % 64) & 1 == 1,
                None => present.contains(&x),
            };
            for m in ac.find_overlapping_iter(hay) {
                let id = m.pattern().as_usize();
                let lit = &self.lits[id];
                if !lit.ci && hay[m.start()..m.end()] != lit.bytes[..] {
                    continue;
                }
                if lit.level {
                    return Reach::Any;
                }
                let id = id as u32;
                if has(&bits, &present[..n], id) {
                    continue;
                }
                if n == PRESENT {
                    return Reach::Any;
                }
                present[n] = id;
                n += 1;
                if let Some(w) = bits.get_mut(id as usize / 64) {
                    *w |= 1 << (id % 64);
                }
            }
            let present = &present[..n];
            for &id in present {
                for &p in &self.users[id as usize] {
                    let pat = self.pattern_of[p as usize] as usize;
                    if !out.contains(&pat)
                        && self.factors[p as usize].iter().all(|f| f.iter().any(|&x| has(&bits, present, x)))
                    {
                        out.push(pat);
                    }
                }
            }
        }
        if let Some(r) = self.residual.as_ref().filter(|r| r.is_match(rest)) {
            out.extend(r.matches(rest).into_iter().map(|i| self.residual_of[i] as usize));
        }
        if out.is_empty() {
            return Reach::Nothing;
        }
        out.sort_unstable();
        out.dedup();
        Reach::Some
    }

    /// Patterns the prefilter could not take literals from (run on every line).
    #[cfg(test)]
    fn residual_len(&self) -> usize {
        self.residual.as_ref().map_or(0, |r| r.len())
    }
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

/// Whether `pattern` matches the same on ASCII text with Unicode off (`(?-u)`): true unless it
/// spells a non-ASCII character or class (a literal, `\x{..}`, `\u`, `\p{..}`), which Unicode
/// case folding could match to an ASCII letter (`(?i)\x{212A}` is K, the Kelvin sign, and matches
/// `k`). Conservative: `\\x` (an escaped backslash, then x) also counts.
pub fn ascii_safe(pattern: &str) -> bool {
    pattern.is_ascii() && !["\\x", "\\u", "\\U", "\\p", "\\P", "\\N"].iter().any(|e| pattern.contains(e))
}

/// `lits` without the ones that contain another (finding the shorter one is then enough), as
/// case-insensitive literals: the first stage may say "yes" too often, never too seldom.
fn minimal(mut lits: Vec<Lit>) -> Vec<Vec<u8>> {
    for l in &mut lits {
        l.0.make_ascii_lowercase();
    }
    lits.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
    lits.dedup_by(|a, b| a.0 == b.0);
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (l, _) in lits {
        if !out.iter().any(|o| memchr::memmem::find(&l, o).is_some()) {
            out.push(l);
        }
    }
    out
}

#[derive(Default)]
struct Builder {
    lits: Vec<LitInfo>,
    index: std::collections::HashMap<Lit, u32>,
    factors: Vec<Vec<Vec<u32>>>,
    users: Vec<Vec<u32>>,
}

impl Builder {
    fn lit(&mut self, l: &Lit) -> u32 {
        if let Some(&id) = self.index.get(l) {
            return id;
        }
        let id = self.lits.len() as u32;
        self.lits.push(LitInfo { bytes: l.0.clone(), ci: l.1, level: false });
        self.users.push(Vec::new());
        self.index.insert(l.clone(), id);
        id
    }
}

/// The factors every match of `pattern` contains on ASCII text, or `None` when there are none
/// (or the pattern cannot be read under ASCII semantics).
fn required_factors(pattern: &str) -> Option<Vec<Factor>> {
    if !ascii_safe(pattern) {
        return None;
    }
    let hir = regex_syntax::ParserBuilder::new().unicode(false).utf8(false).build().parse(pattern).ok()?;
    let mut fs = factors(&hir);
    fs.retain(|f| !f.is_empty() && f.iter().all(|l| !l.0.is_empty()));
    fs.retain(|f| score(f) >= MIN_FACTOR);
    fs.sort_by_key(|f| std::cmp::Reverse(score(f)));
    fs.truncate(MAX_FACTORS);
    (!fs.is_empty()).then_some(fs)
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
            let mut out = Vec::new();
            let mut run: Lit = (Vec::new(), false);
            for c in children {
                if let Some((bytes, ci)) = single_string(c) {
                    run.0.extend(bytes);
                    run.1 |= ci;
                    continue;
                }
                if !run.0.is_empty() {
                    out.push(vec![norm(std::mem::take(&mut run.0), run.1)]);
                    run.1 = false;
                }
                out.extend(factors(c));
            }
            if !run.0.is_empty() {
                out.push(vec![norm(run.0, run.1)]);
            }
            out
        }
        _ => Vec::new(),
    }
}

/// `h` if it matches exactly one string (ignoring ASCII case when the flag is set).
fn single_string(h: &Hir) -> Option<Lit> {
    match h.kind() {
        HirKind::Literal(l) => Some((l.0.to_vec(), false)),
        HirKind::Class(c) => class_lit(c),
        HirKind::Capture(c) => single_string(&c.sub),
        HirKind::Repetition(r) if r.max == Some(r.min) && r.min <= 16 => {
            let (b, ci) = single_string(&r.sub)?;
            Some((b.repeat(r.min as usize), ci))
        }
        HirKind::Concat(children) => {
            let mut out: Lit = (Vec::new(), false);
            for c in children {
                let (b, ci) = single_string(c)?;
                out.0.extend(b);
                out.1 |= ci;
            }
            Some(out)
        }
        _ => None,
    }
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
        assert_eq!(
            lits(r"DeepEP timeout for (?:dispatch|combine) (?:senders|receivers)")[0],
            vec![("DeepEP timeout for ".to_string(), false)]
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
        let p = Prefilter::new(&["(?i)\\x{212A}ill".to_string()]);
        assert_eq!(p.residual_len(), 1);
        assert!(may(&p, "then kill it"));
    }

    #[test]
    fn prefilter_answers() {
        let pats = [r"comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)".to_string(), r"^\d+ \d+$".to_string()];
        let p = Prefilter::new(&pats);
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
        assert_eq!(p.reach("h:1:1 [0] proxy.cc:1 NCCL WARN comm 0x55 rank 3 nRanks 8", &mut out), Reach::Any);
        assert_eq!(p.reach("h:1:1 [0] NCCL INFO AllReduce: opCount 1", &mut out), Reach::Nothing);
        assert!(out.is_empty());
    }
}
