//! The rule files: their schema, loading (built-in + user), and validation with errors that name
//! the file, the rule and the problem.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::pattern::{self, Refused};
use super::version::Range;
use crate::model::Severity;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    #[default]
    Any,
    Init,
    Runtime,
    Teardown,
}

/// A rule as written in TOML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDef {
    pub id: String,
    pub title: String,
    pub category: String,
    pub severity: Severity,
    #[serde(default)]
    pub benign: bool,
    pub patterns: Vec<String>,
    #[serde(default)]
    pub nccl: Option<String>,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default = "yes")]
    pub if_version_unknown: bool,
    #[serde(default)]
    pub phase: PhaseSpec,
    #[serde(default)]
    pub requires: Vec<String>,
    #[serde(default)]
    pub excludes: Vec<String>,
    #[serde(default)]
    pub symptom: bool,
    #[serde(default)]
    pub demote_on_failure: bool,
    /// What the run left behind (a process, a file, a socket): actionable, and reported with how
    /// the run ended, never as the cause of the other lines (no teardown noise becomes its symptom).
    #[serde(default)]
    pub left_behind: bool,
    #[serde(default)]
    pub priority: i32,
    /// A quiet precursor: the line (often INFO) names a cause, but alone it is no failure. The
    /// finding is reported only when a rule listed here (by id or category) fires too, and then it
    /// is the cause.
    #[serde(default)]
    pub precursor_of: Vec<String>,
    /// A wrapper of a cause, not a cause: 1 for a report that names a failure only by its effect
    /// (a watchdog timeout, a remote error surfaced in torch), 2 for a generic banner (a launcher's
    /// summary of a Python exception, a native-crash banner, std::terminate, ChildFailedError).
    /// The primary comes from the lowest level present, so a wrapper never outranks a cause.
    #[serde(default)]
    pub wrapper: u8,
    /// Harmless by origin: the rule's lines count only as the exception of a Python traceback
    /// whose innermost frame matches one of these (regexes over `File "...", line N, in fn`): a
    /// helper process's traceback (multiprocessing's resource tracker) is told by where it was
    /// raised, not by its words, which any program could print.
    #[serde(default)]
    pub frames: Vec<String>,
    /// Lines that show the retry or wait this rule reports succeeded (`The client socket has
    /// connected`): such a line after the finding's first makes it one harmless record.
    #[serde(default)]
    pub resolved_by: Vec<String>,
    /// The rule's lines count attempts: its patterns capture `try` and `max` (`retrying (34/34)`).
    /// A line whose `try` reaches `max` is the last attempt: with no `resolved_by` line after
    /// it, the retries ran out, and the finding is a failure however quiet its level.
    #[serde(default)]
    pub last_attempt: bool,
    /// A wait (`resolved_by` names the line that ends it) that no such line follows on a run not
    /// seen to succeed: what that means. The finding is then actionable with this as its context
    /// (a store barrier still waiting for the other workers when the log ends).
    #[serde(default)]
    pub unresolved: Option<String>,
    /// Texts of the line that says the most of this rule's lines (the heartbeat monitor's fatal
    /// `watchdog got stuck` after its `timed out`): the first line holding one leads the evidence.
    #[serde(default)]
    pub lead_text: Vec<String>,
    /// The last such line leads instead (torchelastic prints the root cause's record last).
    #[serde(default)]
    pub lead_last: bool,
    /// A teardown-kind message: what it means when printed after the run's last success marker
    /// on a run seen to succeed (then it is benign, with this text as its context).
    #[serde(default)]
    pub after_success: Option<String>,
    /// The culprit over a victim: when this rule fires and the primary the engine picked is one of
    /// the rules listed here (or there is none), this finding is the primary and the verdict is
    /// actionable. `"*"` means over any primary (Flight Recorder's rank that never joined).
    #[serde(default)]
    pub leads_over: Vec<String>,
    /// Benign only when the run is seen to succeed (an optional transport that did not come up):
    /// a symptom when it failed, and "check that the run completed" when the log shows neither.
    #[serde(default)]
    pub needs_success: bool,
    /// A teardown-kind message (an abort's chatter, a peer's closed store connection): harmless
    /// only when the run finished, so on a log that shows neither success nor failure the verdict
    /// is `unknown` ("looks like teardown noise, but the log does not show the run finishing").
    #[serde(default)]
    pub teardown: bool,
    /// Stricter `needs_success`: benign only when the log shows the run succeeded; with neither
    /// success nor failure seen, a warning that says what to check (the benign reading is the
    /// rarer one, e.g. NVSHMEM's IBGDA, which DeepEP's internode kernels need).
    #[serde(default)]
    pub success_seen: bool,
    /// What the same lines mean outside the rule's version range, said when the log reveals no
    /// version.
    #[serde(default)]
    pub other_reading: Option<String>,
    pub root_cause: String,
    pub fix: String,
    #[serde(default)]
    pub refs: Vec<String>,
}

/// `phase = "teardown"` or `phase = ["runtime", "teardown"]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PhaseSpec {
    One(Phase),
    Many(Vec<Phase>),
}

impl Default for PhaseSpec {
    fn default() -> Self {
        PhaseSpec::One(Phase::Any)
    }
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Any => "any",
            Phase::Init => "init",
            Phase::Runtime => "runtime",
            Phase::Teardown => "teardown",
        }
    }
}

impl PhaseSpec {
    /// As written in a rule file: `teardown`, `runtime, teardown`.
    pub fn text(&self) -> String {
        match self {
            PhaseSpec::One(p) => p.as_str().to_string(),
            PhaseSpec::Many(ps) => ps.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
        }
    }

    /// A source whose phase is unknown (no markers) satisfies any condition.
    pub fn allows(&self, have: Option<Phase>) -> bool {
        let Some(h) = have else { return true };
        let ok = |w: &Phase| *w == Phase::Any || *w == h;
        match self {
            PhaseSpec::One(w) => ok(w),
            PhaseSpec::Many(ws) => ws.iter().any(ok),
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RuleDef>,
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub def: RuleDef,
    pub nccl: Option<Range>,
    pub torch: Option<Range>,
    /// Where it was defined, for `rules show` and error messages.
    pub origin: String,
    /// `def.frames`, compiled (None: no condition).
    pub frames: Option<regex::RegexSet>,
}

/// Phase markers (rules/phases.toml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    pub phase: Phase,
    pub pattern: String,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PhaseFile {
    marker: Vec<Marker>,
}

/// File:line sites of known NCCL WARNs per release (rules/fingerprints.toml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fingerprint {
    /// Lowest and highest release the sites identify.
    pub min: String,
    pub max: String,
    pub sites: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FingerprintFile {
    nccl: Vec<Fingerprint>,
}

pub const PHASES_FILE: &str = "rules/phases.toml";
pub const FINGERPRINTS_FILE: &str = "rules/fingerprints.toml";
pub const OUTCOME_FILE: &str = "rules/outcome.toml";

/// A line that tells how the run ended (rules/outcome.toml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeMarker {
    pub outcome: Outcome,
    pub pattern: String,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Succeeded,
    Failed,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutcomeFile {
    marker: Vec<OutcomeMarker>,
}

pub fn load_outcome_markers() -> Result<Vec<OutcomeMarker>> {
    let text = embedded().iter().find(|(p, _)| *p == OUTCOME_FILE).map(|(_, t)| *t).unwrap_or("marker = []");
    let f: OutcomeFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("{OUTCOME_FILE}: {e}"))?;
    for m in &f.marker {
        valid_marker(OUTCOME_FILE, &m.pattern)?;
    }
    Ok(f.marker)
}

pub fn embedded() -> &'static [(&'static str, &'static str)] {
    crate::meta::EMBEDDED
}

/// Built-in rule files: `rules/*.toml` except the phase and fingerprint tables.
pub fn builtin_rule_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    embedded().iter().copied().filter(|(p, _)| {
        p.starts_with("rules/")
            && p.ends_with(".toml")
            && !p[6..].contains('/')
            && *p != PHASES_FILE
            && *p != FINGERPRINTS_FILE
            && *p != OUTCOME_FILE
    })
}

pub fn builtin_fixtures() -> impl Iterator<Item = (&'static str, &'static str)> {
    embedded().iter().copied().filter(|(p, _)| p.starts_with("rules/fixtures/") && p.ends_with(".log"))
}

pub fn parse_rule_file(origin: &str, text: &str) -> Result<Vec<Rule>> {
    let file: RuleFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("rule file {origin}: {e}"))?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for def in file.rule {
        if !seen.insert(def.id.clone()) {
            bail!("rule file {origin}: rule id `{}` is defined twice", def.id);
        }
        out.push(compile(origin, def)?);
    }
    Ok(out)
}

fn compile(origin: &str, def: RuleDef) -> Result<Rule> {
    let ctx = |what: String| format!("rule file {origin}, rule `{}`: {what}", def.id);
    if def.id.is_empty() || !def.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("{}", ctx("the id must be non-empty and use letters, digits, '-' and '_' only".into()));
    }
    if def.patterns.is_empty() {
        bail!("{}", ctx("it has no patterns".into()));
    }
    if def.last_attempt {
        if let Some(i) = def.patterns.iter().position(|p| !p.contains("(?P<try>") || !p.contains("(?P<max>")) {
            bail!("{}", ctx(format!("last_attempt is set, but pattern {} captures no `try` and `max` groups", i + 1)));
        }
    }
    if def.unresolved.is_some() && def.resolved_by.is_empty() {
        bail!("{}", ctx("unresolved is set without resolved_by: nothing could end the wait".into()));
    }
    for (i, p) in def.patterns.iter().enumerate() {
        // Built-in patterns were checked when the binary was built (`build.rs`).
        if built::CHECKED.binary_search(&p.as_str()).is_ok() {
            continue;
        }
        let why = match pattern::check(p) {
            Ok(()) => continue,
            Err(Refused::Invalid(e)) => format!("pattern {} is not a valid regex: {e}", i + 1),
            Err(Refused::MatchesEmpty) => {
                format!("pattern {} matches the empty line, so it would match every line", i + 1)
            }
            Err(Refused::TooBig) => {
                format!("pattern {} is too big to compile (its counted repetitions multiply past a limit)", i + 1)
            }
        };
        bail!("{}", ctx(why));
    }
    let nccl = def
        .nccl
        .as_deref()
        .map(Range::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{}", ctx(format!("nccl: {e}"))))?;
    let torch = def
        .torch
        .as_deref()
        .map(Range::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{}", ctx(format!("torch: {e}"))))?;
    let frames = if def.frames.is_empty() {
        None
    } else {
        Some(regex::RegexSet::new(&def.frames).map_err(|e| anyhow::anyhow!("{}", ctx(format!("frames: {e}"))))?)
    };
    Ok(Rule { def, nccl, torch, origin: origin.to_string(), frames })
}

pub use super::pattern::ascii_word_boundaries;

/// The built-in patterns that `build.rs` found good (`pattern::check`), sorted.
mod built {
    include!(concat!(env!("OUT_DIR"), "/checked.rs"));
}

/// Whether `build.rs` checked `pattern` (the tests hold it to cover every built-in one).
#[cfg(test)]
pub(crate) fn checked_at_build(pattern: &str) -> bool {
    built::CHECKED.binary_search(&pattern).is_ok()
}

/// All rules: built-in files, then user files/folders (a user rule replaces a built-in one by id).
pub fn load_rules(extra: &[PathBuf]) -> Result<Vec<Rule>> {
    load_rules_with(extra, true)
}

pub fn load_rules_with(extra: &[PathBuf], builtin: bool) -> Result<Vec<Rule>> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (path, text) in builtin_rule_files().filter(|_| builtin) {
        for r in parse_rule_file(path, text)? {
            if let Some(&i) = index.get(&r.def.id) {
                bail!("rule id `{}` is defined in both {} and {path}", r.def.id, rules[i].origin);
            }
            index.insert(r.def.id.clone(), rules.len());
            rules.push(r);
        }
    }
    // A user rule may replace a built-in one, but two user files must not define the same id:
    // which one wins would depend on the order of --rules.
    let mut user_ids: HashMap<String, String> = HashMap::new();
    let mut seen_files = std::collections::HashSet::new();
    for p in extra {
        for file in user_files(p)? {
            if !seen_files.insert(std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone())) {
                continue; // the same file named twice
            }
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("cannot read rule file {}", file.display()))?;
            let origin = file.display().to_string();
            for r in parse_rule_file(&origin, &text)? {
                if let Some(prev) = user_ids.insert(r.def.id.clone(), origin.clone()) {
                    bail!("rule id `{}` is defined in both {prev} and {origin}", r.def.id);
                }
                match index.get(&r.def.id) {
                    Some(&i) => rules[i] = r,
                    None => {
                        index.insert(r.def.id.clone(), rules.len());
                        rules.push(r);
                    }
                }
            }
        }
    }
    for r in &rules {
        for dep in r.def.requires.iter().chain(&r.def.excludes) {
            if !index.contains_key(dep) {
                bail!("rule file {}, rule `{}`: requires/excludes names `{dep}`, which is no rule", r.origin, r.def.id);
            }
        }
    }
    Ok(rules)
}

fn user_files(p: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(p).with_context(|| format!("cannot read rule path {}", p.display()))?;
    if !meta.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .with_context(|| format!("cannot read rule folder {}", p.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        // A copy of the built-in rules/ folder also holds the phase and fingerprint tables.
        .filter(|p| !p.file_name().is_some_and(|n| n == "phases.toml" || n == "fingerprints.toml"))
        .collect();
    v.sort();
    if v.is_empty() {
        bail!("rule folder {} holds no .toml files", p.display());
    }
    Ok(v)
}

pub fn load_markers() -> Result<Vec<Marker>> {
    let text = embedded().iter().find(|(p, _)| *p == PHASES_FILE).map(|(_, t)| *t).unwrap_or("marker = []");
    let f: PhaseFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("{PHASES_FILE}: {e}"))?;
    for m in &f.marker {
        valid_marker(PHASES_FILE, &m.pattern)?;
    }
    Ok(f.marker)
}

/// A marker pattern compiles (the engine compiles it again, in its set); one `build.rs` checked
/// needs no compile here.
fn valid_marker(file: &str, pattern: &str) -> Result<()> {
    if built::CHECKED.binary_search(&pattern).is_err() {
        Regex::new(pattern).map_err(|e| anyhow::anyhow!("{file}: pattern `{pattern}`: {e}"))?;
    }
    Ok(())
}

pub fn load_fingerprints() -> Result<Vec<Fingerprint>> {
    let text = embedded().iter().find(|(p, _)| *p == FINGERPRINTS_FILE).map(|(_, t)| *t).unwrap_or("nccl = []");
    let f: FingerprintFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("{FINGERPRINTS_FILE}: {e}"))?;
    Ok(f.nccl)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
[[rule]]
id = "x"
title = "t"
category = "teardown"
severity = "warning"
patterns = ['abc \d+']
root_cause = "r"
fix = "f"
"#;

    #[test]
    fn parses_a_rule() {
        let r = parse_rule_file("t.toml", OK).unwrap();
        assert_eq!(r[0].def.id, "x");
        assert!(r[0].def.if_version_unknown);
    }

    #[test]
    fn bad_regex_names_file_rule_and_pattern() {
        let e = parse_rule_file("my.toml", &OK.replace(r"abc \d+", "abc (")).unwrap_err().to_string();
        assert!(e.contains("my.toml") && e.contains("`x`") && e.contains("pattern 1"), "{e}");
    }

    #[test]
    fn unknown_field_is_an_error_with_its_line() {
        let e =
            parse_rule_file("my.toml", &OK.replace("fix = \"f\"", "fix = \"f\"\nsevrity = 1")).unwrap_err().to_string();
        assert!(e.contains("my.toml") && e.contains("sevrity") && e.contains("line"), "{e}");
    }

    #[test]
    fn duplicate_id_is_an_error() {
        let e = parse_rule_file("d.toml", &format!("{OK}\n{OK}")).unwrap_err().to_string();
        assert!(e.contains("defined twice"), "{e}");
    }

    #[test]
    fn attempt_and_wait_keys_are_checked() {
        let e = parse_rule_file("a.toml", &OK.replace("fix = \"f\"", "fix = \"f\"\nlast_attempt = true"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.toml") && e.contains("`try` and `max`"), "{e}");
        let counted = OK.replace(r"abc \d+", r"retrying \((?P<try>\d+)/(?P<max>\d+)\)");
        assert!(parse_rule_file("a.toml", &counted.replace("fix = \"f\"", "fix = \"f\"\nlast_attempt = true")).is_ok());
        let e = parse_rule_file("w.toml", &OK.replace("fix = \"f\"", "fix = \"f\"\nunresolved = \"still waiting\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.toml") && e.contains("without resolved_by"), "{e}");
    }

    #[test]
    fn empty_matching_pattern_rejected() {
        let e = parse_rule_file("e.toml", &OK.replace(r"abc \d+", ".*")).unwrap_err().to_string();
        assert!(e.contains("empty line"), "{e}");
    }

    #[test]
    fn word_boundaries_become_ascii_and_nothing_else_changes() {
        assert_eq!(ascii_word_boundaries(r"\bfoo\b \d+"), r"(?-u:\b)foo(?-u:\b) \d+");
        assert_eq!(ascii_word_boundaries(r"a\Bb"), r"a(?-u:\B)b");
        // An escaped backslash followed by `b` is a literal `\b`, not a boundary.
        assert_eq!(ascii_word_boundaries(r"C:\\build\\b"), r"C:\\build\\b");
        assert_eq!(ascii_word_boundaries(r"x\\\bfoo"), r"x\\(?-u:\b)foo");
        assert_eq!(ascii_word_boundaries("plain"), "plain");
        // Every built-in pattern still compiles, and matches what it matched on ASCII lines.
        for r in load_rules(&[]).unwrap() {
            for p in &r.def.patterns {
                let a = Regex::new(&ascii_word_boundaries(p)).unwrap();
                for line in ["torch version 2.5.1", "x NCCL WARN y", "comm 0x1 rank 0 nranks 2 - Abort COMPLETE"] {
                    assert_eq!(a.is_match(line), Regex::new(p).unwrap().is_match(line), "{p} on {line}");
                }
            }
        }
    }

    #[test]
    fn builtin_rules_load() {
        load_rules(&[]).unwrap();
        load_markers().unwrap();
        load_fingerprints().unwrap();
    }
}
