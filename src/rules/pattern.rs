//! What a rule pattern must be, and the one rewrite the engine makes of it: pure functions of the
//! pattern's text, so `build.rs` includes this file too and checks every built-in pattern at build
//! time (loading the rules then parses none of them again; it used to be a third of a small log's
//! start-up). Hence std and `regex_syntax` only, no `crate::` paths.

use regex_syntax::hir::{Hir, HirKind};

/// Why a pattern is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not a regex; the parser's message.
    Invalid(String),
    /// Its shortest match is empty, so it would match every line.
    MatchesEmpty,
    /// Counted repetitions multiply past `EXPANSION_MAX`.
    TooBig,
}

/// About how many pieces a pattern may compile to, counted repetitions multiplied out (bounded
/// ones by their maximum, open ones by their minimum plus one). The set is compiled lazily, so a
/// pattern too big to compile must be caught when it is loaded (`(\w{500}){500}`).
const EXPANSION_MAX: u64 = 100_000;

/// Whether `pattern` may be a rule pattern. Parsing is enough (the engine compiles all patterns
/// once, as one set; compiling each one here as well dominated the start-up of a small `explain`).
pub fn check(pattern: &str) -> Result<(), Refused> {
    let hir = regex_syntax::Parser::new().parse(pattern).map_err(|e| Refused::Invalid(e.to_string()))?;
    if hir.properties().minimum_len() == Some(0) {
        return Err(Refused::MatchesEmpty);
    }
    if expansion(&hir) > EXPANSION_MAX {
        return Err(Refused::TooBig);
    }
    Ok(())
}

fn expansion(h: &Hir) -> u64 {
    match h.kind() {
        HirKind::Repetition(r) => {
            let n = u64::from(r.max.unwrap_or(r.min).max(1));
            n.saturating_mul(expansion(&r.sub))
        }
        HirKind::Capture(c) => expansion(&c.sub),
        HirKind::Concat(v) | HirKind::Alternation(v) => v.iter().map(expansion).fold(0u64, u64::saturating_add),
        _ => 1,
    }
}

/// `pattern` with its word boundaries `\b` and `\B` made ASCII (`(?-u:\b)`), for the one
/// `RegexSet` the engine runs on every line. A Unicode word boundary makes the regex crate's DFAs
/// give up on any non-ASCII byte and fall back to its slowest engine: a log full of progress bars
/// (`45%|████▌`) or non-English text then took ~400x longer per line. The two differ only next to
/// a non-ASCII letter, where no rule's boundary is meant to fall.
pub fn ascii_word_boundaries(pattern: &str) -> String {
    if !pattern.contains("\\b") && !pattern.contains("\\B") {
        return pattern.to_string();
    }
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        // An escape: a backslash and the character it escapes, as one unit (so `\\b` stays).
        match chars.next() {
            Some(b @ ('b' | 'B')) => {
                out.push_str("(?-u:\\");
                out.push(b);
                out.push(')');
            }
            Some(e) => {
                out.push('\\');
                out.push(e);
            }
            None => out.push('\\'),
        }
    }
    out
}
