//! The matcher: one pass over every line with a single `RegexSet` (rules, phase markers and the
//! engine's own version and rank lines together), then arbitration into findings and a verdict.
//!
//! Memory stays bounded whatever the input size: per group of hits we keep a count, a capped
//! sample of lines and the earliest one; unexplained lines are capped the same way.
//!
//! Speed: a literal prefilter (`log::Prefilter`) lets only the lines that can match a pattern or be
//! a warning reach the `RegexSet`, and lines are borrowed from the reader's buffer, not copied.
//! Several inputs are read by one thread per core, each into a state of its own; the states are
//! merged in input order into exactly the state one thread reading them in turn would have built.
//!
//! By what each part decides: `scan` (reading, the prefilter, records, each line matched), `state`
//! (what reading keeps, and the merge), `versions` (stated, assumed or inferred; the gates and the
//! readings), `ranks`, `findings` (grouping under the winning rule), `outcome`, `primary` (the
//! culprit), `verdict` (demotion and the verdict); `finish` here runs them in order.

mod chunked;
mod findings;
mod outcome;
mod primary;
mod ranks;
mod scan;
mod state;
mod verdict;
mod versions;

use std::sync::OnceLock;

use anyhow::Result;
use regex::{Regex, RegexSet};

use super::catalog::{KnownClass, Sites};
use super::schema::{self, Marker, OutcomeMarker, Rule};
use super::version::Version;
use crate::log::{self, Input};
use crate::model::{Analysis, Template, Unexplained, Unrelated, SCHEMA_VERSION};
use primary::primary;
use ranks::Ranks;
use state::{SourceState, State};

/// NCCL versions kept (the lowest).
const VERSIONS_CAP: usize = 16;
/// Bytes of a line kept as evidence: a 1 MiB line is matched whole but not carried whole into
/// every report (200 such unexplained lines were 200 MiB of memory and of Markdown).
const HIT_TEXT_MAX: usize = 4096;
/// Inputs read ahead of the oldest unmerged one, per thread: bounds the states held in memory.
const READ_AHEAD: usize = 4;
/// Bytes per chunk when one large file is read on every core (`chunked`).
const CHUNK: u64 = 1 << 19;
/// Input size from which the prefilter is used. 0: always, since it takes less to build than the
/// whole pattern set, which a small log then need not compile at all (see `ascii_set`).
const BIG_INPUT: u64 = 0;
/// Input size from which the prefilter's automaton is a DFA (see `log::Prefilter::new`).
const DFA_INPUT: u64 = 1 << 20;
/// Success and failure markers shown in the outcome, each.
const OUTCOME_SHOWN: usize = 5;

/// What reading keeps at most, whatever the input's size: memory stays bounded, and past each cap
/// lines are only counted. One value per engine; tests set caps of tens (`Engine::set_caps`) so
/// that reaching them takes a few hundred lines, not tens of thousands.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct Caps {
    /// Hits kept per group (the rest are counted).
    pub sample: usize,
    /// Distinct (rank, host, pid, input) origins per group, for its ranks list.
    pub who: usize,
    /// Unexplained lines kept (the rest are counted, and grouped by template when asked).
    pub unexplained: usize,
    /// Unrelated Python warnings kept as examples.
    pub unrelated: usize,
    /// Outcome marker lines kept per input, and resolving or last-attempt lines per rule.
    pub outcome: usize,
    /// Templates of unexplained lines (`--templates`).
    pub templates: usize,
    /// (host, pid) -> rank entries kept from communicator lines.
    pub rank_map: usize,
    /// WARN sites kept (only sites of `rules/fingerprints.toml` count, so no real log reaches it).
    pub sites: usize,
}

impl Default for Caps {
    fn default() -> Caps {
        Caps {
            sample: 32,
            who: 4096,
            unexplained: 200,
            unrelated: 20,
            outcome: 64,
            templates: 5000,
            // A process each: every rank of a 1M-GPU job and then some (16 bytes an entry).
            rank_map: 1 << 21,
            sites: 1024,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub max_bytes: Option<u64>,
    /// Treat the log as if it had stated this NCCL version (fixtures, `repro` cells).
    pub assume_nccl: Option<Version>,
    pub evidence: usize,
    pub templates: bool,
    /// Parts of the input that `expand` could not read (see `Expanded::unread`).
    pub unread: Vec<String>,
    /// The pipeline reads every input as one job (a repro cell's logs) rather than splitting
    /// them into the jobs `log::jobs` finds.
    pub one_job: bool,
}

/// What the engine looks for besides rules.
#[derive(Debug, Clone, Copy)]
enum Internal {
    NcclVersion,
    RankMap,
    TorchVersion,
}

enum Slot {
    Rule(usize),
    /// A line showing that what rule N reports was resolved (`resolved_by`).
    Resolves(usize),
    Marker(usize),
    Outcome(usize),
    Internal(Internal),
}

pub struct Engine {
    pub rules: Vec<Rule>,
    markers: Vec<Marker>,
    outcome_markers: Vec<OutcomeMarker>,
    /// The rule each class of catalogued message gets when no rule reads its line (rules/known-sites.toml).
    known_rules: Vec<(KnownClass, usize)>,
    /// The rule an unexplained error line gets when it is the likely cause of a reaction
    /// (`unexplained-cause`, rules/known-sites.toml).
    unexplained_cause: Option<usize>,
    /// The pattern set for ASCII lines (nearly all): compiled with Unicode off, a fifth of the
    /// compile time of `unicode_set` and the same matches on ASCII text. Compiled on the first
    /// line the prefilter cannot narrow down (a small log may need none: its lines are matched by
    /// the few patterns the prefilter names). `None` in it: it does not compile that way;
    /// `unicode_set` then serves all lines. Not used at all unless `ascii_ok`.
    ascii_set: OnceLock<Option<regex::bytes::RegexSet>>,
    /// No pattern names non-ASCII characters: the byte set and the prefilter's singles may serve.
    ascii_ok: bool,
    /// The pattern set as written, for the other lines; compiled on the first one. (`None` in it:
    /// the set would not compile, e.g. over the size limit; each pattern is then run on its own.)
    unicode_set: OnceLock<Option<RegexSet>>,
    pats: Vec<String>,
    /// Each pattern alone, as in `ascii_set`; compiled when the prefilter first names it.
    singles: Vec<OnceLock<Option<regex::bytes::Regex>>>,
    slots: Vec<Slot>,
    nccl_version_re: Regex,
    torch_version_re: Regex,
    /// Built when the input turns out big (`big_input` bytes); see `BIG_INPUT`.
    prefilter: OnceLock<log::Prefilter>,
    big_input: u64,
    /// The first input analyzed is large (`DFA_INPUT`): the prefilter is built as a DFA.
    large_input: std::sync::atomic::AtomicBool,
    /// Chunk size and thread count of the chunked reading (tests set them; `None`: every core).
    chunk_size: u64,
    chunk_threads: Option<usize>,
    caps: Caps,
}

impl Engine {
    pub fn new(rules: Vec<Rule>) -> Result<Engine> {
        let markers = schema::load_markers()?;
        let outcome_markers = schema::load_outcome_markers()?;
        let nccl_version_re =
            Regex::new(r"(?:NCCL version |^\[epdoctor\] rank=\d+ .*\bnccl_version=)(\d+\.\d+\.\d+)(\S*)").unwrap();
        let rank_map_re = Regex::new(r"comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)").unwrap();
        let torch_version_re = Regex::new(
            r"(?i)(?:\bpytorch version|\btorch version|\btorch==|\btorch\.__version__[ =:]*|\btorch )[ :=]*v?(\d+\.\d+(?:\.\d+)?)(\S*)",
        )
        .unwrap();
        let mut pats: Vec<String> = Vec::new();
        let mut slots = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for p in &r.def.patterns {
                pats.push(schema::ascii_word_boundaries(p));
                slots.push(Slot::Rule(i));
            }
        }
        for (i, r) in rules.iter().enumerate() {
            for p in &r.def.resolved_by {
                pats.push(schema::ascii_word_boundaries(p));
                slots.push(Slot::Resolves(i));
            }
        }
        for (i, m) in markers.iter().enumerate() {
            pats.push(schema::ascii_word_boundaries(&m.pattern));
            slots.push(Slot::Marker(i));
        }
        for (i, m) in outcome_markers.iter().enumerate() {
            pats.push(schema::ascii_word_boundaries(&m.pattern));
            slots.push(Slot::Outcome(i));
        }
        for (re, k) in [
            (&nccl_version_re, Internal::NcclVersion),
            (&rank_map_re, Internal::RankMap),
            (&torch_version_re, Internal::TorchVersion),
        ] {
            pats.push(schema::ascii_word_boundaries(re.as_str()));
            slots.push(Slot::Internal(k));
        }
        let ascii_ok = pats.iter().all(|p| log::literals::ascii_safe(p));
        let known_rules = KnownClass::ALL
            .into_iter()
            .filter_map(|c| rules.iter().position(|r| r.def.id == c.rule_id()).map(|i| (c, i)))
            .collect();
        let unexplained_cause = rules.iter().position(|r| r.def.id == "unexplained-cause");
        let unicode_set = OnceLock::new();
        if !ascii_ok {
            let set = scan::unicode_set(&pats).map_err(|e| {
                // Name the pattern that is too big or otherwise refused (rule files only parse it).
                let culprit = pats.iter().zip(&slots).find(|(p, _)| Regex::new(p).is_err());
                match culprit {
                    Some((p, Slot::Rule(i))) => {
                        anyhow::anyhow!(
                            "rule file {}, rule `{}`: pattern `{p}`: {e}",
                            rules[*i].origin,
                            rules[*i].def.id
                        )
                    }
                    _ => anyhow::anyhow!("cannot build the rule set: {e}"),
                }
            })?;
            let _ = unicode_set.set(Some(set));
        }
        Ok(Engine {
            rules,
            markers,
            outcome_markers,
            known_rules,
            unexplained_cause,
            ascii_set: OnceLock::new(),
            ascii_ok,
            unicode_set,
            singles: pats.iter().map(|_| OnceLock::new()).collect(),
            pats,
            slots,
            nccl_version_re,
            torch_version_re,
            prefilter: OnceLock::new(),
            big_input: BIG_INPUT,
            large_input: std::sync::atomic::AtomicBool::new(false),
            chunk_size: CHUNK,
            chunk_threads: None,
            caps: Caps::default(),
        })
    }

    /// Use the prefilter from this many bytes of input on (tests: 0, always).
    #[doc(hidden)]
    pub fn set_big_input(&mut self, bytes: u64) {
        self.big_input = bytes;
    }

    /// Build the prefilter as for a large input whatever the input's size (tests: the gate of
    /// `log::grams` on the fixtures).
    #[doc(hidden)]
    pub fn set_large_input(&mut self) {
        self.large_input.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Read one large file in chunks of `bytes` with `threads` threads (tests: tiny chunks; `threads`
    /// below 2 turns the chunked reading off).
    #[doc(hidden)]
    pub fn set_chunking(&mut self, bytes: u64, threads: usize) {
        self.chunk_size = bytes.max(1);
        self.chunk_threads = Some(threads);
    }

    /// Keep at most these (tests: small caps, reached by a few hundred lines).
    #[doc(hidden)]
    pub fn set_caps(&mut self, caps: Caps) {
        self.caps = caps;
    }

    /// A fresh reading state under this engine's caps.
    fn state(&self, templates: bool) -> State {
        State { want_templates: templates, caps: self.caps, ..State::default() }
    }

    /// WARN/ATTN sites of the known NCCL releases (rules/catalog/, rules/fingerprints.toml),
    /// loaded on first need: a log without warnings may need none.
    fn sites(&self) -> &'static Sites {
        Sites::builtin_or_empty()
    }

    fn prefilter(&self) -> &log::Prefilter {
        let dfa = self.large_input.load(std::sync::atomic::Ordering::Relaxed);
        self.prefilter.get_or_init(|| log::Prefilter::new(&self.pats, dfa))
    }

    pub fn analyze(&self, inputs: &[Input], opts: &Options) -> Result<Analysis> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(inputs.len());
        // One thread when the inputs must be read in turn: a byte budget shared across them,
        // templates (their cap depends on the order), stdin named twice.
        let in_turn = threads < 2
            || opts.max_bytes.is_some()
            || opts.templates
            || inputs.iter().filter(|i| matches!(i, Input::Stdin)).count() > 1;
        let size = inputs.iter().map(size_hint).sum::<u64>();
        let big = size >= self.big_input;
        if size >= DFA_INPUT {
            self.large_input.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let st = if in_turn {
            let mut st = self.state(opts.templates);
            let mut budget = opts.max_bytes;
            for (si, input) in inputs.iter().enumerate() {
                match self.chunked_source(input, big, budget) {
                    Some((src, len)) => self.scan_chunked(&mut st, si, input, &src, len),
                    None => self.scan(&mut st, si, input, &mut budget, big)?,
                }
            }
            st
        } else {
            self.scan_parallel(inputs, threads, big)?
        };
        Ok(self.finish(st, opts))
    }

    /// `analyze` without its shortcuts (no prefilter, every line cleaned into a new string and
    /// matched by the Unicode set, inputs read in turn): what the tests hold `analyze` to.
    #[doc(hidden)]
    pub fn analyze_reference(&self, inputs: &[Input], opts: &Options) -> Result<Analysis> {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                REFERENCE.with(|r| r.set(false));
            }
        }
        REFERENCE.with(|r| r.set(true));
        let _reset = Reset;
        let mut st = self.state(opts.templates);
        let mut budget = opts.max_bytes;
        for (si, input) in inputs.iter().enumerate() {
            let mut reader = log::open(input, budget)?;
            let name = input.name();
            let mut src = SourceState::new(si);
            loop {
                let line = match reader.next_line() {
                    Ok(Some(l)) => log::clean_line(l),
                    Ok(None) => break,
                    Err(e) => {
                        st.cut_short(si, &name, src.lines, &e);
                        break;
                    }
                };
                src.lines += 1;
                self.line(&mut st, &mut src, &line);
            }
            self.end_records(&mut st, &mut src);
            st.end_source(src, name, reader.stats(), &mut budget);
        }
        Ok(self.finish(st, opts))
    }

    /// Arbitration: versions, ranks, gating, findings, outcome, primary, demotion, verdict.
    fn finish(&self, mut st: State, opts: &Options) -> Analysis {
        let vs = self.versions(&mut st, opts);
        self.level_mismatches(&mut st, &vs);
        let ranks = Ranks::new(&mut st);
        let allowed: Vec<bool> = self.rules.iter().map(|r| vs.allows(r)).collect();
        let grouped = self.group(&mut st, &allowed, opts);
        let mut findings = self.findings(grouped.accs, &st, &ranks, opts);
        let outcome = self.outcome(&st, &ranks);
        self.after_success(&mut findings, &st, outcome.status);
        self.apply_outcome(&mut findings, outcome.status);
        self.resolved(&mut findings, &st);
        self.unresolved(&mut findings, &st, &ranks, outcome.status);
        self.teardown_undecided(&mut findings, outcome.status);
        self.precursors(&mut findings);
        self.version_readings(&mut findings, &vs);
        let primary_idx = primary(&findings, &st);
        self.demote(&mut findings, primary_idx, outcome.status);
        let culprit = self.culprit(&findings, primary_idx);
        let primary_idx = culprit.or(primary_idx);

        let mut unexplained_hits = grouped.unexplained;
        unexplained_hits.sort_by(|a, b| st.canon(a).cmp(&st.canon(b)));
        let failed = (outcome.status == crate::model::RunOutcome::Failed)
            .then(|| {
                st.outcomes
                    .iter()
                    .filter(|(o, _)| *o == schema::Outcome::Failed)
                    .map(|(_, h)| h)
                    .min_by_key(|h| st.canon(h))
            })
            .flatten();
        let primary_idx = self
            .unexplained_cause(&mut findings, primary_idx, failed, &mut unexplained_hits, &st, &ranks, opts)
            .or(primary_idx);
        let total_unexplained = unexplained_hits.len() as u64 + grouped.extra_unexplained;
        let templates = opts.templates.then(|| {
            let mut v: Vec<Template> = std::mem::take(&mut st.templates)
                .into_iter()
                .map(|(t, (count, h))| Template { template: t, count, example: st.unexplained_of(h) })
                .collect();
            v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.template.cmp(&b.template)));
            v
        });
        let unexplained: Vec<Unexplained> =
            unexplained_hits.into_iter().take(self.caps.unexplained).map(|h| st.unexplained_of(h)).collect();
        if total_unexplained > unexplained.len() as u64 {
            st.notes.push(format!(
                "{} unexplained warning/error lines in all; the first {} are listed",
                total_unexplained,
                unexplained.len()
            ));
        }
        let mut unrelated_hits = std::mem::take(&mut st.unrelated);
        unrelated_hits.sort_by(|a, b| st.canon(a).cmp(&st.canon(b)));
        let unrelated = Unrelated {
            count: unrelated_hits.len() as u64 + st.unrelated_dropped,
            examples: unrelated_hits.into_iter().take(self.caps.unrelated).map(|h| st.unexplained_of(h)).collect(),
        };

        let mut unread = opts.unread.clone();
        unread.append(&mut st.unread);
        if st.inputs.iter().all(|i| i.lines == 0) {
            unread.push("nothing was read: the input is empty".into());
        }
        let verdict = if culprit.is_some() {
            crate::model::Verdict::Actionable
        } else {
            verdict::verdict(&findings, total_unexplained, unrelated.count, !unread.is_empty())
        };
        let primary = primary_idx.map(|i| findings[i].finding.clone());
        let left_behind = primary_idx.is_some_and(|i| self.rules[findings[i].rule].def.left_behind);
        let undecided: Vec<String> = findings.iter().filter(|c| c.undecided).map(|c| c.finding.rule.clone()).collect();
        for (s, ranks) in st.inputs.iter_mut().zip(&st.source_ranks) {
            s.ranks = ranks.iter().copied().collect();
        }
        let mut a = Analysis {
            schema_version: SCHEMA_VERSION,
            tool_version: crate::meta::VERSION.to_string(),
            verdict,
            torch_version: vs.torch_out(),
            nccl_version: vs.nccl_out,
            primary,
            findings: findings.into_iter().map(|c| c.finding).collect(),
            unexplained,
            versions: vs.notes,
            inputs: std::mem::take(&mut st.inputs),
            unexplained_templates: templates,
            notes: std::mem::take(&mut st.notes),
            outcome,
            unrelated,
            unread,
            reason: String::new(),
            jobs: Vec::new(),
        };
        a.reason = verdict::reason(&a, &undecided, left_behind);
        a
    }
}

thread_local! {
    /// Set while `analyze_reference` runs on this thread: `matches` then uses the Unicode set.
    static REFERENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// About how many bytes `input` holds (0 when unknown: stdin).
fn size_hint(input: &Input) -> u64 {
    match input {
        Input::File(p) => std::fs::metadata(p).map_or(0, |m| m.len()),
        Input::Stdin => 0,
        Input::Memory { text, .. } => text.len() as u64,
        Input::Bytes { bytes, .. } => bytes.len() as u64,
        Input::Member(m) => m.size(),
    }
}

#[cfg(test)]
mod tests;
