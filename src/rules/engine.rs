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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use anyhow::Result;
use regex::{Regex, RegexSet};

use super::catalog::Sites;
use super::schema::{self, Marker, Outcome, OutcomeMarker, Phase, Rule};
use super::version::Version;
use crate::log::records::{Assembler, Fed, Flags, Part, Role};
use crate::log::{self, Input, Level};
use crate::model::{
    Analysis, Evidence, Finding, InputSummary, OutcomeReport, RunOutcome, Severity, Template, Unexplained, Unrelated,
    Verdict, VersionNote, SCHEMA_VERSION,
};

/// Hits kept per group (the rest are counted).
const SAMPLE: usize = 32;
/// NCCL versions kept (the lowest), and WARN sites kept (only sites of `rules/fingerprints.toml`
/// count, so the cap is a backstop that no real log reaches).
const VERSIONS_CAP: usize = 16;
const SITES_CAP: usize = 1024;
/// Bytes of a line kept as evidence: a 1 MiB line is matched whole but not carried whole into
/// every report (200 such unexplained lines were 200 MiB of memory and of Markdown).
const HIT_TEXT_MAX: usize = 4096;
/// (host, pid) -> rank entries kept from communicator lines.
const RANK_MAP_CAP: usize = 1 << 16;
/// Inputs read ahead of the oldest unmerged one, per thread: bounds the states held in memory.
const READ_AHEAD: usize = 4;
/// Input size from which the prefilter pays for its building (about 10 ms): below, every line
/// takes the full matcher, which is quicker for a few thousand lines.
const BIG_INPUT: u64 = 1 << 20;
/// Unexplained lines kept (the rest are counted, and grouped by template when asked).
const UNEXPLAINED_KEEP: usize = 200;
/// Unrelated Python warnings kept as examples, and outcome marker lines kept per input.
const UNRELATED_KEEP: usize = 20;
const OUTCOME_KEEP: usize = 64;
const TEMPLATE_CAP: usize = 5000;
const WHO_CAP: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub max_bytes: Option<u64>,
    /// Treat the log as if it had stated this NCCL version (fixtures, `repro` cells).
    pub assume_nccl: Option<Version>,
    pub evidence: usize,
    pub templates: bool,
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
    Marker(usize),
    Outcome(usize),
    Internal(Internal),
}

pub struct Engine {
    pub rules: Vec<Rule>,
    markers: Vec<(Marker, Regex)>,
    outcome_markers: Vec<OutcomeMarker>,
    /// WARN/ATTN sites of the known NCCL releases (rules/catalog/, rules/fingerprints.toml).
    sites_db: &'static Sites,
    /// The pattern set for ASCII lines (nearly all): compiled with Unicode off, a fifth of the
    /// compile time of `unicode_set` and the same matches on ASCII text. `None` when a pattern
    /// names non-ASCII characters or does not compile that way; `unicode_set` then serves all.
    ascii_set: Option<regex::bytes::RegexSet>,
    /// The pattern set as written, for the other lines; compiled on the first one. (`None` in it:
    /// the set would not compile, e.g. over the size limit; each pattern is then run on its own.)
    unicode_set: OnceLock<Option<RegexSet>>,
    pats: Vec<String>,
    slots: Vec<Slot>,
    nccl_version_re: Regex,
    torch_version_re: Regex,
    /// Built when the input turns out big (`big_input` bytes); see `BIG_INPUT`.
    prefilter: OnceLock<log::Prefilter>,
    big_input: u64,
}

impl Engine {
    pub fn new(rules: Vec<Rule>) -> Result<Engine> {
        let markers = schema::load_markers()?;
        let outcome_markers = schema::load_outcome_markers()?;
        let sites_db = Sites::builtin()?;
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
        for (i, (m, _)) in markers.iter().enumerate() {
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
        let ascii_set = pats
            .iter()
            .all(|p| log::prefilter::ascii_safe(p))
            .then(|| regex::bytes::RegexSet::new(pats.iter().map(|p| format!("(?-u){p}"))).ok())
            .flatten();
        let unicode_set = OnceLock::new();
        if ascii_set.is_none() {
            let set = RegexSet::new(&pats).map_err(|e| {
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
            sites_db,
            ascii_set,
            unicode_set,
            pats,
            slots,
            nccl_version_re,
            torch_version_re,
            prefilter: OnceLock::new(),
            big_input: BIG_INPUT,
        })
    }

    /// Use the prefilter from this many bytes of input on (tests: 0, always).
    #[doc(hidden)]
    pub fn set_big_input(&mut self, bytes: u64) {
        self.big_input = bytes;
    }

    fn prefilter(&self) -> &log::Prefilter {
        self.prefilter.get_or_init(|| log::Prefilter::new(&self.pats))
    }

    pub fn analyze(&self, inputs: &[Input], opts: &Options) -> Result<Analysis> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(inputs.len());
        // One thread when the inputs must be read in turn: a byte budget shared across them,
        // templates (their cap depends on the order), stdin named twice.
        let in_turn = threads < 2
            || opts.max_bytes.is_some()
            || opts.templates
            || inputs.iter().filter(|i| matches!(i, Input::Stdin)).count() > 1;
        let big = inputs.iter().map(size_hint).sum::<u64>() >= self.big_input;
        let st = if in_turn {
            let mut st = State { want_templates: opts.templates, ..State::default() };
            let mut budget = opts.max_bytes;
            for (si, input) in inputs.iter().enumerate() {
                self.scan(&mut st, si, input, &mut budget, big)?;
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
        let mut st = State { want_templates: opts.templates, ..State::default() };
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
                        st.notes.push(format!("{name}: stopped reading after line {}: {e}", src.lines));
                        break;
                    }
                };
                src.lines += 1;
                self.line(&mut st, &mut src, &line);
            }
            self.end_records(&mut st, &mut src);
            st.end_source(src, name, &reader, &mut budget);
        }
        Ok(self.finish(st, opts))
    }

    /// Read `inputs` with `threads` threads, each input into a state of its own, and merge those in
    /// input order as they complete. The first input that cannot be opened (in input order) fails
    /// the whole analysis, as it does when reading in turn.
    fn scan_parallel(&self, inputs: &[Input], threads: usize, big: bool) -> Result<State> {
        struct Merge {
            next: usize,
            done: BTreeMap<usize, Result<State>>,
            st: State,
            err: Option<anyhow::Error>,
        }
        let claim = AtomicUsize::new(0);
        let merge = Mutex::new(Merge { next: 0, done: BTreeMap::new(), st: State::default(), err: None });
        let cv = Condvar::new();
        let lock = || merge.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = claim.fetch_add(1, Ordering::Relaxed);
                    if i >= inputs.len() {
                        break;
                    }
                    {
                        let mut m = lock();
                        while i >= m.next + threads * READ_AHEAD && m.err.is_none() {
                            m = cv.wait(m).unwrap_or_else(|e| e.into_inner());
                        }
                        if m.err.is_some() {
                            break;
                        }
                    }
                    let mut st = State::default();
                    let r = self.scan(&mut st, i, &inputs[i], &mut None, big).map(|()| st);
                    let mut m = lock();
                    m.done.insert(i, r);
                    while m.err.is_none() {
                        let next = m.next;
                        let Some(r) = m.done.remove(&next) else { break };
                        match r {
                            Ok(part) => m.st.merge(part),
                            Err(e) => m.err = Some(e),
                        }
                        m.next += 1;
                    }
                    cv.notify_all();
                });
            }
        });
        let m = merge.into_inner().unwrap_or_else(|e| e.into_inner());
        match m.err {
            Some(e) => Err(e),
            None => Ok(m.st),
        }
    }

    /// Read input `si` into `st`. `big`: the inputs are large enough for the prefilter; an input
    /// that turns out large sets it too.
    fn scan(&self, st: &mut State, si: usize, input: &Input, budget: &mut Option<u64>, big: bool) -> Result<()> {
        let mut reader = log::open(input, *budget)?;
        let name = input.name();
        let mut src = SourceState::new(si);
        loop {
            let big = big || reader.bytes_read >= self.big_input;
            let raw = match reader.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => {
                    // Truncated gzip/zstd and the like: keep what was read, say so.
                    st.notes.push(format!("{name}: stopped reading after line {}: {e}", src.lines));
                    break;
                }
            };
            src.lines += 1;
            // Printable ASCII is its own cleaned form (no copy); the prefilter answers for ASCII.
            if log::is_clean(raw) {
                // SAFETY: `is_clean` holds only for ASCII bytes, which are valid UTF-8.
                let line = unsafe { std::str::from_utf8_unchecked(raw) };
                // An open record (a traceback) takes every line until it closes. The prefixes are
                // stripped once, for the prefilter and the matcher.
                if !line.is_empty() {
                    let p = log::strip_prefixes(line);
                    if !big || src.records.is_open() || self.prefilter().may_matter_stripped(line, p.rest) {
                        self.prefixed_line(st, &mut src, line, p);
                    }
                }
            } else {
                let line = log::clean_line(raw);
                if !line.is_empty() {
                    let p = log::strip_prefixes(&line);
                    let ask = big && line.is_ascii() && !src.records.is_open();
                    if !ask || self.prefilter().may_matter_stripped(&line, p.rest) {
                        self.prefixed_line(st, &mut src, &line, p);
                    }
                }
            }
        }
        self.end_records(st, &mut src);
        st.end_source(src, name, &reader, budget);
        Ok(())
    }

    /// One physical line: prefixes stripped, joined into records, every record matched.
    fn line(&self, st: &mut State, src: &mut SourceState, raw: &str) {
        if !raw.is_empty() {
            self.prefixed_line(st, src, raw, log::strip_prefixes(raw));
        }
    }

    /// `line` once its prefixes are stripped (`p`); `raw` is not empty.
    fn prefixed_line(&self, st: &mut State, src: &mut SourceState, raw: &str, p: log::Prefixed<'_>) {
        self.split_version(st, src, p.rest);
        let fed = src.records.feed(src.lines, raw, &p);
        for rec in src.records.take_done() {
            self.record(st, src, rec);
        }
        if fed == Fed::Alone {
            let l = LineRef {
                line: src.lines,
                raw,
                msg: p.rest,
                rank: p.any_rank(),
                host: p.host,
                pid: p.pid,
                ts: p.ts,
                flags: Flags::default(),
                symptom: false,
                detail: None,
            };
            self.matched_line(st, src, &l, None);
        }
    }

    /// Close the records still open at the end of a source.
    fn end_records(&self, st: &mut State, src: &mut SourceState) {
        src.records.finish();
        for rec in src.records.take_done() {
            self.record(st, src, rec);
        }
    }

    /// A record of several lines. When NCCL's `Last error:` payload is explained by a rule, the
    /// error lines it restates are symptoms of it (the payload names the failing call).
    fn record(&self, st: &mut State, src: &mut SourceState, parts: Vec<Part>) {
        let payload_text = |m: &str| format!(" NCCL WARN {m}");
        let restated = parts.iter().any(|p| {
            p.role == Role::Payload
                && self.matches(&payload_text(&p.msg)).into_iter().any(|m| matches!(self.slots[m], Slot::Rule(_)))
        });
        // `terminate called after throwing ...` says only that something was thrown; when a rule
        // reads its `what():` line, that reading is the record's.
        let what_explained = parts.iter().any(|p| {
            p.msg.starts_with("what():")
                && self.matches(&p.msg).into_iter().any(|m| matches!(self.slots[m], Slot::Rule(_)))
        });
        for (i, part) in parts.iter().enumerate().filter(|(_, p)| p.role != Role::Context) {
            if i == 0 && what_explained && part.msg.starts_with("terminate called") {
                continue;
            }
            let payload = part.role == Role::Payload;
            let warn_text = payload.then(|| payload_text(&part.msg));
            let l = LineRef {
                line: part.line,
                raw: &part.raw,
                msg: &part.msg,
                rank: part.origin.rank.or(part.origin.local_rank),
                host: part.origin.host.as_deref(),
                pid: part.origin.pid,
                ts: part.origin.ts,
                flags: part.flags.clone(),
                symptom: part.flags.chained || (restated && !payload),
                detail: part.detail.as_deref(),
            };
            self.matched_line(st, src, &l, warn_text.as_deref());
        }
    }

    /// Joins an `NCCL version` line that a paste wrapped in the middle (`NCCL vers` / `ion 2.21.5`).
    fn split_version(&self, st: &mut State, src: &mut SourceState, msg: &str) {
        if let Some(tail) = src.version_tail.take() {
            let joined = format!("{tail}{msg}");
            if let Some(c) = self.nccl_version_re.captures(&joined) {
                add_version(&mut st.nccl_versions, format!("{}{}", &c[1], &c[2]));
            }
        }
        src.version_tail = version_tail(msg).map(str::to_string);
    }

    /// Match one line (or a record's part) and file what it says. `warn_text`: the part is a
    /// `Last error:` payload, matched also in this WARN form.
    fn matched_line(&self, st: &mut State, src: &mut SourceState, l: &LineRef<'_>, warn_text: Option<&str>) {
        let line = l.msg;
        let mut matches = self.matches(line);
        if let Some(w) = warn_text {
            matches.extend(self.matches(w));
            matches.sort_unstable();
            matches.dedup();
        }
        let level = if warn_text.is_some() { Level::Warn } else { log::level_of(line) };
        // Fail safe: an unlevelled line that reads like a failure, or a record cut before its
        // exception, is listed if no rule explains it.
        let error_like =
            l.flags.incomplete || (level == Level::None && !l.flags.continuation && log::looks_like_error(line));
        if matches.is_empty() && level < Level::Attn && !error_like {
            return;
        }
        let rec = log::parse(warn_text.unwrap_or(line), l.rank);
        if let Some(r) = rec.rank {
            if src.ranks.len() < 64 {
                src.ranks.insert(r);
            }
        }
        let mut cands: Vec<usize> = Vec::new();
        let mut outcome = None;
        for m in matches {
            match self.slots[m] {
                Slot::Rule(r) => {
                    if !cands.contains(&r) {
                        cands.push(r);
                    }
                }
                Slot::Marker(i) => {
                    let p = self.markers[i].0.phase;
                    // Teardown is sticky: a later communicator's init does not undo it.
                    if src.phase != Some(Phase::Teardown) || p == Phase::Teardown {
                        src.phase = Some(p);
                    }
                }
                Slot::Outcome(i) => outcome = Some(self.outcome_markers[i].outcome),
                Slot::Internal(Internal::NcclVersion) => {
                    if let Some(c) = self.nccl_version_re.captures(line) {
                        add_version(&mut st.nccl_versions, format!("{}{}", &c[1], &c[2]));
                    }
                }
                Slot::Internal(Internal::TorchVersion) => {
                    if let Some(c) = self.torch_version_re.captures(line) {
                        offer_version(&mut st.torch_version, format!("{}{}", &c[1], &c[2]));
                    }
                }
                Slot::Internal(Internal::RankMap) => {
                    if let (Some((rank, nranks)), Some(pid)) = (rank_nranks(line), rec.pid) {
                        // The world communicator (most ranks) names the rank; split comms renumber.
                        let key = (rec.host.unwrap_or("").to_string(), pid);
                        if let Some(e) = st.rank_map.get_mut(&key) {
                            if nranks > e.1 {
                                *e = (rank, nranks);
                            }
                        } else if st.rank_map.len() < RANK_MAP_CAP {
                            st.rank_map.insert(key.clone(), (rank, nranks));
                            st.rank_map_seq.push(key);
                        }
                    }
                }
            }
        }
        let phase = src.phase;
        cands.retain(|&r| self.rules[r].def.phase.allows(phase));
        // Highest priority first, then file order.
        cands.sort_by_key(|&r| (-self.rules[r].def.priority, r));
        // Fingerprint sites: NCCL's WARN and ATTN lines only (INFO unwinding lines name other
        // sites); torch's C++ lines, keyed apart (`torch File.cpp:LINE`).
        let known = match (rec.kind, level, rec.site) {
            (log::Kind::Nccl, Level::Warn | Level::Attn, Some((f, ln))) => {
                self.sites_db.lookup(f, ln, rec.msg).map(|id| (format!("{f}:{ln}"), id))
            }
            (log::Kind::Torch, _, Some((f, ln))) => {
                self.sites_db.lookup_torch(f, ln, rec.msg).map(|id| (format!("{TORCH_SITE}{f}:{ln}"), id))
            }
            _ => None,
        };
        if let Some(key) = known {
            if st.sites.len() < SITES_CAP && st.sites.insert(key.clone()) {
                st.sites_seq.push(key);
            }
        }
        if cands.is_empty() && outcome.is_none() && !(level >= Level::Attn || error_like) {
            // Matched only the engine's own patterns (a version, a rank map, a marker).
            return;
        }
        st.order += 1;
        let hit = Hit {
            source: src.idx,
            line: l.line,
            order: st.order,
            rank: rec.rank,
            host: rec.host.or(l.host).map(str::to_string),
            pid: rec.pid.or(l.pid),
            ts: rec.ts.or(l.ts),
            text: clip(l.raw),
            warn: level >= Level::Attn || error_like,
            symptom: l.symptom,
            ignored: l.flags.ignored,
            launcher: rec.kind == log::Kind::Launcher,
            detail: l.detail.map(clip),
        };
        if let Some(o) = outcome {
            st.add_outcome(o, &hit);
        }
        if cands.is_empty() {
            if hit.warn && outcome != Some(Outcome::Succeeded) {
                if log::is_unrelated_warning(line) {
                    st.add_unrelated(hit);
                } else {
                    st.add_unexplained(hit);
                }
            }
            return;
        }
        let g = st.groups.entry(cands).or_default();
        g.add(hit);
    }

    /// The indices of the patterns that match `line` (rank prefix stripped), in order.
    fn matches(&self, line: &str) -> Vec<usize> {
        let ascii = line.is_ascii() && !REFERENCE.with(std::cell::Cell::get);
        if let (Some(set), true) = (&self.ascii_set, ascii) {
            return set.matches(line.as_bytes()).into_iter().collect();
        }
        match self.unicode_set.get_or_init(|| RegexSet::new(&self.pats).ok()) {
            Some(set) => set.matches(line).into_iter().collect(),
            None => {
                (0..self.pats.len()).filter(|&i| Regex::new(&self.pats[i]).is_ok_and(|re| re.is_match(line))).collect()
            }
        }
    }

    /// Arbitration: versions, ranks, gating, findings, outcome, primary, demotion, verdict.
    fn finish(&self, mut st: State, opts: &Options) -> Analysis {
        let vs = self.versions(&mut st, opts);
        let ranks = Ranks::new(&mut st);
        let allowed: Vec<bool> = self.rules.iter().map(|r| vs.allows(r)).collect();
        let grouped = self.group(&mut st, &allowed, opts);
        let mut findings = self.findings(grouped.accs, &st, &ranks, opts);
        let outcome = self.outcome(&st, &findings, &ranks);
        self.apply_outcome(&mut findings, outcome.status);
        self.precursors(&mut findings);
        self.version_readings(&mut findings, &vs);
        let primary_idx = primary(&findings, &st);
        self.demote(&mut findings, primary_idx, outcome.status);

        let mut unexplained_hits = grouped.unexplained;
        unexplained_hits.sort_by(|a, b| st.canon(a).cmp(&st.canon(b)));
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
            unexplained_hits.into_iter().take(UNEXPLAINED_KEEP).map(|h| st.unexplained_of(h)).collect();
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
            examples: unrelated_hits.into_iter().take(UNRELATED_KEEP).map(|h| st.unexplained_of(h)).collect(),
        };

        let any_actionable = findings.iter().any(|c| c.actionable());
        let verdict = if any_actionable {
            Verdict::Actionable
        } else if total_unexplained > 0 {
            Verdict::Unknown
        } else if !findings.is_empty() {
            Verdict::Benign
        } else {
            Verdict::Clean
        };
        let primary = primary_idx.map(|i| findings[i].finding.clone());
        for (s, ranks) in st.inputs.iter_mut().zip(&st.source_ranks) {
            s.ranks = ranks.iter().copied().collect();
        }
        Analysis {
            schema_version: SCHEMA_VERSION,
            tool_version: crate::VERSION.to_string(),
            verdict,
            nccl_version: vs.nccl_out,
            torch_version: vs.torch.map(|v| v.to_string()),
            primary,
            findings: findings.into_iter().map(|c| c.finding).collect(),
            unexplained,
            versions: vs.notes,
            inputs: std::mem::take(&mut st.inputs),
            unexplained_templates: templates,
            notes: std::mem::take(&mut st.notes),
            outcome,
            unrelated,
        }
    }

    /// The NCCL and torch versions: assumed by the caller, stated by the log, or inferred.
    fn versions(&self, st: &mut State, opts: &Options) -> Versions {
        let mut notes = Vec::new();
        // With several, the lowest: the choice must not depend on the order of the rank files.
        let stated_nccl = st.nccl_versions.first().cloned();
        if st.nccl_versions.len() > 1 {
            st.notes.push(format!(
                "the log shows several NCCL versions: {}; the rules use the lowest",
                st.nccl_versions.join(", ")
            ));
        }
        let note = |value: String, how: &str, detail: String| VersionNote {
            component: "nccl".into(),
            value,
            how: how.into(),
            detail,
        };
        let (mut nccl, mut nccl_out) = (None, None);
        if let Some(v) = opts.assume_nccl {
            (nccl, nccl_out) = (Some(v), Some(v.to_string()));
            notes.push(note(v.to_string(), "assumed", "given by the caller".into()));
        } else if let Some(s) = &stated_nccl {
            nccl = Version::parse(s);
            nccl_out = nccl.map(|v| v.to_string());
            notes.push(note(s.clone(), "stated", "NCCL version line".into()));
        } else if let Some((min, max, sites)) = self.infer_nccl(&st.sites) {
            nccl = Some(min);
            let value = if min == max { min.to_string() } else { format!("{min}-{max}") };
            if min == max {
                nccl_out = Some(min.to_string());
            }
            notes.push(note(value, "inferred", format!("from the file:line of WARN sites {}", sites.join(", "))));
        }
        // torch: stated, else inferred from the file:line of its C++ log lines.
        let inferred_torch = if st.torch_version.is_none() { self.infer_torch(&st.sites) } else { None };
        let torch_one = st.torch_version.clone().or_else(|| match &inferred_torch {
            Some((a, b, _)) if a == b => Some(a.to_string()),
            _ => None,
        });
        if nccl.is_none() && opts.assume_nccl.is_none() && stated_nccl.is_none() {
            if let Some(pin) = torch_one.as_deref().and_then(|t| self.sites_db.torch_pin_note(t)) {
                nccl = Version::parse(&pin.value);
                nccl_out = Some(pin.value.clone());
                notes.push(pin);
            }
        }
        let mut torch = st.torch_version.as_deref().and_then(Version::parse);
        if let Some(t) = &st.torch_version {
            notes.push(VersionNote {
                component: "torch".into(),
                value: t.clone(),
                how: "stated".into(),
                detail: "a torch version in the log".into(),
            });
        } else if let Some((min, max, sites)) = inferred_torch {
            torch = Some(min);
            notes.push(VersionNote {
                component: "torch".into(),
                value: if min == max { min.to_string() } else { format!("{min}-{max}") },
                how: "inferred".into(),
                detail: format!("from the file:line of torch's C++ log lines {}", sites.join(", ")),
            });
        }
        Versions { nccl, nccl_out, torch, notes }
    }

    /// Every group's hits filed under the rule that wins it (version gates first, then
    /// requires/excludes against the rules that can fire); the rest are unexplained.
    fn group(&self, st: &mut State, allowed: &[bool], opts: &Options) -> Grouped {
        let winner = |cands: &[usize], fired: Option<&BTreeSet<usize>>| -> Option<usize> {
            cands.iter().copied().find(|&r| {
                allowed[r]
                    && fired.is_none_or(|f| {
                        let d = &self.rules[r].def;
                        d.requires.iter().all(|id| f.iter().any(|&x| self.rules[x].def.id == *id))
                            && !d.excludes.iter().any(|id| f.iter().any(|&x| self.rules[x].def.id == *id))
                    })
            })
        };
        let fired0: BTreeSet<usize> = st.groups.keys().filter_map(|c| winner(c, None)).collect();
        let mut accs: HashMap<usize, Acc> = HashMap::new();
        let mut unexplained = std::mem::take(&mut st.unexplained);
        let mut extra_unexplained = st.unexplained_dropped;
        for (cands, g) in std::mem::take(&mut st.groups) {
            match winner(&cands, Some(&fired0)) {
                Some(r) => {
                    let a = accs.entry(r).or_default();
                    a.count += g.count;
                    a.causes += g.causes;
                    a.ignored += g.ignored;
                    a.who.extend(g.who);
                    a.hits.extend(g.sample);
                    a.hits.extend(g.earliest_ts);
                }
                None => {
                    // Every candidate was gated out: these lines are unexplained if they are warnings.
                    let mut sampled = 0;
                    for h in g.sample.into_iter().chain(g.warn_sample) {
                        if h.warn {
                            sampled += 1;
                            if opts.templates {
                                st.add_template(&h);
                            }
                            unexplained.push(h);
                        }
                    }
                    // Only the warnings among the hits past the sample (INFO lines are no news).
                    extra_unexplained += g.warns.saturating_sub(sampled);
                }
            }
        }
        Grouped { accs, unexplained, extra_unexplained }
    }

    /// One finding per rule that fired, with its evidence in a canonical order (by time where
    /// lines have one, else by file name and line), so the order of the inputs changes nothing.
    fn findings(&self, accs: HashMap<usize, Acc>, st: &State, ranks: &Ranks, opts: &Options) -> Vec<Cand> {
        let mut out = Vec::new();
        for (r, mut a) in accs {
            let rule = &self.rules[r];
            let d = &rule.def;
            a.hits.sort_by(|x, y| st.canon(x).cmp(&st.canon(y)));
            a.hits.dedup_by(|x, y| x.source == y.source && x.line == y.line);
            // The earliest hit, preferring the lines the record does not mark as consequences.
            let causal = |h: &&Hit| !h.symptom && !h.ignored;
            let first = a
                .hits
                .iter()
                .filter(causal)
                .chain(a.hits.iter())
                .fold(None::<&Hit>, |best, h| match best {
                    Some(b) if !earlier_hit(h, b) || (causal(&b) && !causal(&h)) => Some(b),
                    _ => Some(h),
                })
                .cloned()
                .unwrap_or_default();
            let mut ev: Vec<&Hit> =
                a.hits.iter().filter(|h| h.source == first.source && h.line == first.line).take(1).collect();
            for h in &a.hits {
                if ev.len() >= opts.evidence.max(1) {
                    break;
                }
                if !ev.iter().any(|x| x.source == h.source && x.line == h.line) {
                    ev.push(h);
                }
            }
            let evidence = ev.into_iter().map(|h| st.evidence_of(h, ranks.of(h))).collect();
            let mut rank_set: BTreeSet<u32> = a.hits.iter().filter_map(|h| ranks.of(h)).collect();
            for w in &a.who {
                let h = Hit { source: w.3, rank: w.0, host: w.1.clone(), pid: w.2, launcher: w.4, ..Hit::default() };
                rank_set.extend(ranks.of(&h));
            }
            let ignored_only = a.ignored == a.count;
            let mut finding = Finding {
                rule: d.id.clone(),
                title: d.title.clone(),
                category: d.category.clone(),
                severity: d.severity,
                benign: d.benign,
                ranks: rank_set.into_iter().collect(),
                count: a.count,
                evidence,
                root_cause: d.root_cause.trim().to_string(),
                fix: d.fix.trim().to_string(),
                refs: d.refs.clone(),
                context: None,
                torch: None,
            };
            if ignored_only && !d.benign {
                finding.benign = true;
                finding.severity = finding.severity.min(Severity::Warning);
                finding.context = Some(
                    "Python printed this exception as `Exception ignored in:` (a destructor or atexit hook at \
                     interpreter exit): it did not end the process, so alone it is no failure"
                        .into(),
                );
            }
            out.push(Cand {
                finding,
                first,
                rule: r,
                priority: d.priority,
                // A rule's own symptoms, and findings whose every line the record marks as a
                // consequence (a chained exception, an error restated by its `Last error:`).
                symptom: d.symptom || (a.causes == 0 && !ignored_only),
                demotable: d.demote_on_failure || ignored_only,
                precursor: !d.precursor_of.is_empty(),
                lead: false,
            });
        }
        // Display order: where each finding first appears.
        out.sort_by(|a, b| {
            st.canon(&a.first).cmp(&st.canon(&b.first)).then_with(|| a.finding.rule.cmp(&b.finding.rule))
        });
        out
    }

    /// How the run ended: failure markers or an actionable error finding make it `failed`;
    /// success markers without either, `succeeded`; neither, `unknown`.
    fn outcome(&self, st: &State, findings: &[Cand], ranks: &Ranks) -> OutcomeReport {
        let first = |o: Outcome| {
            st.outcomes.iter().filter(|(x, _)| *x == o).map(|(_, h)| h).min_by(|a, b| st.canon(a).cmp(&st.canon(b)))
        };
        let failed_finding = findings
            .iter()
            .filter(|c| !c.precursor && c.actionable() && c.finding.severity >= Severity::Error)
            .min_by(|a, b| st.canon(&a.first).cmp(&st.canon(&b.first)));
        let ev = |h: &Hit| vec![st.evidence_of(h, ranks.of(h))];
        if let Some(h) = first(Outcome::Failed) {
            return OutcomeReport { status: RunOutcome::Failed, evidence: ev(h) };
        }
        if let Some(c) = failed_finding {
            return OutcomeReport {
                status: RunOutcome::Failed,
                evidence: c.finding.evidence.iter().take(1).cloned().collect(),
            };
        }
        match first(Outcome::Succeeded) {
            Some(h) => OutcomeReport { status: RunOutcome::Succeeded, evidence: ev(h) },
            None => OutcomeReport::default(),
        }
    }

    /// `needs_success` rules: benign only on a run seen to succeed.
    fn apply_outcome(&self, findings: &mut [Cand], outcome: RunOutcome) {
        for c in findings.iter_mut().filter(|c| self.rules[c.rule].def.needs_success) {
            match outcome {
                RunOutcome::Succeeded => {}
                RunOutcome::Failed => {
                    c.finding.benign = false;
                    c.finding.severity = c.finding.severity.max(Severity::Warning);
                    c.symptom = true;
                    c.finding.context = Some("the run failed, so this is not the harmless case: it may be why".into());
                }
                RunOutcome::Unknown => {
                    c.finding.context = Some(
                        "benign only if the run completed, and the log shows neither a success nor a failure line: \
                         check the job's exit status and last output"
                            .into(),
                    );
                }
            }
        }
    }

    /// Quiet precursors are silent alone; beside a downstream failure they name, they lead.
    fn precursors(&self, findings: &mut Vec<Cand>) {
        let fired: Vec<(String, String, bool)> = findings
            .iter()
            .filter(|c| !c.precursor)
            .map(|c| (c.finding.rule.clone(), c.finding.category.clone(), c.actionable()))
            .collect();
        findings.retain_mut(|c| {
            if !c.precursor {
                return true;
            }
            let d = &self.rules[c.rule].def;
            let Some((id, _, _)) =
                fired.iter().find(|(id, cat, act)| *act && d.precursor_of.iter().any(|p| p == id || p == cat))
            else {
                return false;
            };
            c.lead = true;
            c.symptom = false;
            c.finding.benign = false;
            c.finding.severity = c.finding.severity.max(Severity::Warning);
            c.finding.context = Some(format!("this names the cause of `{id}`, which the log shows too"));
            true
        });
    }

    /// Say which version a reading assumes when the log reveals none.
    fn version_readings(&self, findings: &mut [Cand], vs: &Versions) {
        for c in findings.iter_mut() {
            let r = &self.rules[c.rule];
            let mut said = Vec::new();
            if let (Some(range), None) = (&r.def.nccl, vs.nccl) {
                said.push(format!("NCCL {range}"));
            }
            if let (Some(range), None) = (&r.def.torch, vs.torch) {
                said.push(format!("torch {range}"));
            }
            if said.is_empty() {
                continue;
            }
            let mut t = format!("the log reveals no version; this reading holds for {}", said.join(" and "));
            if let Some(o) = &r.def.other_reading {
                t.push_str(". Outside that range: ");
                t.push_str(o.trim());
            }
            c.finding.context = Some(match c.finding.context.take() {
                Some(old) => format!("{old}; {t}"),
                None => t,
            });
        }
    }

    /// Any failure in the run (a cause, a symptom such as a non-zero exit, a failure marker)
    /// turns teardown noise into symptoms of it.
    fn demote(&self, findings: &mut [Cand], primary_idx: Option<usize>, outcome: RunOutcome) {
        let cause = primary_idx.filter(|&i| findings[i].actionable()).map(|i| {
            let p = &findings[i].finding;
            (p.rule.clone(), p.evidence.first().map(|e| format!("{}:{}", e.source, e.line)).unwrap_or_default())
        });
        let why = match (&cause, outcome) {
            (Some((id, at)), _) => format!("the run also shows `{id}` ({at})"),
            (None, RunOutcome::Failed) => "the run failed (see its outcome)".to_string(),
            _ => return,
        };
        for c in findings.iter_mut() {
            if c.finding.benign && c.demotable {
                c.finding.benign = false;
                c.finding.severity = Severity::Warning;
                c.symptom = true;
                c.finding.context =
                    Some(format!("not teardown noise here: {why}; these lines are a consequence of that failure"));
            }
        }
    }

    /// The NCCL releases whose WARN sites explain every site seen (intersection), if any.
    fn infer_nccl(&self, sites: &BTreeSet<(String, u32)>) -> Option<(Version, Version, Vec<String>)> {
        let nccl = sites.iter().filter(|(s, _)| !s.starts_with(TORCH_SITE));
        let (min, max) = self.sites_db.infer(nccl.clone().map(|(_, id)| *id))?;
        let mut used: Vec<String> = nccl.map(|(s, _)| s.clone()).collect();
        used.dedup();
        Some((min, max, used))
    }

    /// The torch releases whose C++ sites explain every torch site seen, if any.
    fn infer_torch(&self, sites: &BTreeSet<(String, u32)>) -> Option<(Version, Version, Vec<String>)> {
        let torch = sites.iter().filter_map(|(s, id)| Some((s.strip_prefix(TORCH_SITE)?, *id)));
        let (min, max) = self.sites_db.infer_torch(torch.clone().map(|(_, id)| id))?;
        let mut used: Vec<String> = torch.map(|(s, _)| s.to_string()).collect();
        used.dedup();
        Some((min, max, used))
    }
}

/// The key prefix of a torch C++ site among the fingerprint sites seen.
const TORCH_SITE: &str = "torch ";

/// Version strings in ascending order: by version number, then as text (so that which versions a
/// log shows, and which one is used, does not depend on the order its lines were read in).
fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (Version::parse(a), Version::parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Add `v` to the sorted list of distinct versions, keeping the lowest `VERSIONS_CAP`.
fn add_version(list: &mut Vec<String>, v: String) {
    if let Err(i) = list.binary_search_by(|x| version_order(x, &v)) {
        list.insert(i, v);
        list.truncate(VERSIONS_CAP);
    }
}

/// Keep the lower of `cur` and `v`.
fn offer_version(cur: &mut Option<String>, v: String) {
    if cur.as_deref().is_none_or(|c| version_order(&v, c).is_lt()) {
        *cur = Some(v);
    }
}

/// A line as kept for evidence: at most `HIT_TEXT_MAX` bytes, cut on a character boundary and
/// marked as cut.
fn clip(line: &str) -> String {
    if line.len() <= HIT_TEXT_MAX {
        return line.to_string();
    }
    let mut end = HIT_TEXT_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [... {} more bytes]", &line[..end], line.len() - end)
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

/// Whether hit `a` happened before hit `b`, where that can be told: by timestamp when both lines
/// carry one (the clocks of ranks on one machine agree), else by line within one input; `None`
/// across inputs without times.
fn happened_before(a: &Hit, b: &Hit) -> Option<bool> {
    match (a.ts, b.ts) {
        (Some(x), Some(y)) if x != y => Some(x < y),
        _ if a.source == b.source && a.line != b.line => Some(a.line < b.line),
        _ => None,
    }
}

/// `happened_before`, with ties and the unknown broken by input position (the hits a finding
/// collects are sorted canonically first, so this never depends on the order of the inputs).
fn earlier_hit(a: &Hit, b: &Hit) -> bool {
    happened_before(a, b).unwrap_or(false)
}

/// The primary: the earliest causal failure; symptoms only when nothing else is actionable; a
/// precursor that names the cause of what fired leads; benign runs get the finding that explains
/// most. Without times across inputs, the causal class (rule priority) decides, then file name and
/// line, so the choice is the same for every order of the inputs.
fn primary(findings: &[Cand], st: &State) -> Option<usize> {
    let before = |x: usize, y: usize| -> bool {
        let (a, b) = (&findings[x], &findings[y]);
        happened_before(&a.first, &b.first)
            .unwrap_or_else(|| (-a.priority, st.canon(&a.first)) < (-b.priority, st.canon(&b.first)))
    };
    let pick = |c: &mut dyn Iterator<Item = usize>| c.reduce(|x, y| if before(y, x) { y } else { x });
    let actionable: Vec<usize> = (0..findings.len()).filter(|&i| findings[i].actionable()).collect();
    if let Some(i) = pick(&mut actionable.iter().copied().filter(|&i| findings[i].lead)) {
        return Some(i);
    }
    if !actionable.is_empty() {
        return pick(&mut actionable.iter().copied().filter(|&i| !findings[i].symptom)).or_else(|| {
            // Only symptoms: the one closest to the cause (highest priority), then the earliest.
            let top = actionable.iter().map(|&i| findings[i].priority).max();
            pick(&mut actionable.iter().copied().filter(|&i| Some(findings[i].priority) == top))
        });
    }
    let top = findings.iter().map(|f| f.priority).max();
    pick(&mut (0..findings.len()).filter(|&i| Some(findings[i].priority) == top))
}

/// A finding while it is arbitrated.
struct Cand {
    finding: Finding,
    /// Its earliest (causal) hit.
    first: Hit,
    rule: usize,
    priority: i32,
    symptom: bool,
    /// Benign noise that a failure in the run turns into a symptom.
    demotable: bool,
    precursor: bool,
    /// A precursor whose downstream failure fired: it is the cause.
    lead: bool,
}

impl Cand {
    fn actionable(&self) -> bool {
        !self.finding.benign && self.finding.severity >= Severity::Warning
    }
}

#[derive(Default)]
struct Acc {
    count: u64,
    causes: u64,
    ignored: u64,
    hits: Vec<Hit>,
    who: BTreeSet<Who>,
}

struct Grouped {
    accs: HashMap<usize, Acc>,
    unexplained: Vec<Hit>,
    extra_unexplained: u64,
}

struct Versions {
    nccl: Option<Version>,
    nccl_out: Option<String>,
    torch: Option<Version>,
    notes: Vec<VersionNote>,
}

impl Versions {
    /// The version gates of rule `r`.
    fn allows(&self, r: &Rule) -> bool {
        let gate = |range: &Option<super::version::Range>, v: Option<Version>| match (range, v) {
            (None, _) => true,
            (Some(rg), Some(v)) => rg.contains(v),
            (Some(_), None) => r.def.if_version_unknown,
        };
        gate(&r.nccl, self.nccl) && gate(&r.torch, self.torch)
    }
}

/// Which rank a hit belongs to: its own prefix or line, else its (host, pid) from NCCL's init
/// lines, else its pid alone, else the one rank its input shows (never for a launcher's line).
struct Ranks {
    map: HashMap<(String, u32), (u32, u32)>,
    pid_only: HashMap<u32, u32>,
    source_ranks: Vec<BTreeSet<u32>>,
    /// What each input's file or folder name says (`rank3.log`, `attempt_0/3/stderr.log`, ...).
    names: Vec<Option<log::NameHint>>,
}

impl Ranks {
    fn new(st: &mut State) -> Ranks {
        let map = std::mem::take(&mut st.rank_map);
        let mut m: HashMap<u32, Option<u32>> = HashMap::new();
        for ((_, pid), (rank, _)) in &map {
            let e = m.entry(*pid).or_insert(Some(*rank));
            if *e != Some(*rank) {
                *e = None;
            }
        }
        let pid_only = m.into_iter().filter_map(|(p, r)| r.map(|r| (p, r))).collect();
        let names: Vec<&str> = st.names.iter().map(String::as_str).collect();
        Ranks { map, pid_only, source_ranks: st.source_ranks.clone(), names: log::ranks_from_names(&names) }
    }

    fn of(&self, h: &Hit) -> Option<u32> {
        h.rank
            .or_else(|| h.pid.and_then(|p| self.map.get(&(h.host.clone().unwrap_or_default(), p)).map(|x| x.0)))
            .or_else(|| h.pid.and_then(|p| self.pid_only.get(&p).copied()))
            .or_else(|| match self.names.get(h.source)?.as_ref()? {
                _ if h.launcher => None,
                log::NameHint::Rank { rank, .. } => Some(*rank),
                log::NameHint::HostPid { host, pid } => self.map.get(&(host.clone(), *pid)).map(|x| x.0),
            })
            .or_else(|| {
                let rs = self.source_ranks.get(h.source)?;
                (!h.launcher && rs.len() == 1).then(|| *rs.iter().next().unwrap())
            })
    }
}

#[derive(Debug, Clone, Default)]
struct Hit {
    source: usize,
    line: u64,
    order: u64,
    rank: Option<u32>,
    host: Option<String>,
    pid: Option<u32>,
    ts: Option<f64>,
    text: String,
    /// `level_of` rated the line a warning or an error (or it reads like a failure).
    warn: bool,
    /// The record makes this line a consequence: a chained exception, an error line whose
    /// `Last error:` payload names the failing call.
    symptom: bool,
    /// An exception Python printed as `Exception ignored in:` (it ended nothing).
    ignored: bool,
    /// A launcher's own line (torchrun's agent): never attributed to a rank by its file.
    launcher: bool,
    /// What the record adds (innermost frame, backtrace libraries, the restated error).
    detail: Option<String>,
}

/// `rank N nRanks M` of a communicator line that `rank_map_re` matched, read without running the
/// regex a second time for its groups (logs of many split communicators have one in seven lines).
fn rank_nranks(line: &str) -> Option<(u32, u32)> {
    let c = line.find("comm 0x")?;
    let i = c + line[c..].find(" rank ")?;
    let mut it = line[i + 6..].split(' ');
    let rank = it.next()?.parse().ok()?;
    let kw = it.next()?;
    if !kw.eq_ignore_ascii_case("nranks") {
        return None;
    }
    Some((rank, it.next()?.parse().ok()?))
}

/// A line (or a record's part) as the matcher takes it.
struct LineRef<'a> {
    line: u64,
    raw: &'a str,
    msg: &'a str,
    rank: Option<u32>,
    host: Option<&'a str>,
    pid: Option<u32>,
    ts: Option<f64>,
    flags: Flags,
    symptom: bool,
    detail: Option<&'a str>,
}

/// If `msg` ends in the first part of an `NCCL version X.Y.Z` that a paste may have wrapped, that
/// part (from `NCCL` on).
fn version_tail(msg: &str) -> Option<&str> {
    let i = msg.rfind("NCCL")?;
    let tail = &msg[i..];
    const FULL: &str = "NCCL version ";
    if tail.len() < FULL.len() {
        return FULL.starts_with(tail).then_some(tail);
    }
    let rest = tail.strip_prefix(FULL)?;
    // A version cut in its middle: digits and dots, ending in a dot or short of three numbers.
    let ok =
        rest.bytes().all(|c| c.is_ascii_digit() || c == b'.') && (rest.ends_with('.') || rest.matches('.').count() < 2);
    ok.then_some(tail)
}

/// (rank, host, pid, source, launcher) of the lines of a group, for its ranks list.
type Who = (Option<u32>, Option<String>, Option<u32>, usize, bool);

#[derive(Default)]
struct Group {
    count: u64,
    /// Hits the record does not mark as consequences (`Hit::symptom`) or as ignored.
    causes: u64,
    ignored: u64,
    /// Hits that are warnings or errors (those count as unexplained when every rule is gated out).
    warns: u64,
    /// The first warnings past `sample`, so that they can be listed as unexplained too.
    warn_sample: Vec<Hit>,
    sample: Vec<Hit>,
    earliest_ts: Option<Hit>,
    /// Distinct (rank, host, pid, source) that produced hits, for the ranks list.
    who: BTreeSet<Who>,
    /// The same, in the order first seen (what `merge` needs to respect `WHO_CAP` as `add` does).
    who_seq: Vec<Who>,
    /// Like `earliest_ts` but over hits with a number for a time (`merge` needs it: a NaN time,
    /// once earliest, is never replaced).
    earliest_num: Option<Hit>,
}

impl Group {
    fn add(&mut self, h: Hit) {
        self.count += 1;
        self.causes += u64::from(!h.symptom && !h.ignored);
        self.ignored += u64::from(h.ignored);
        self.warns += u64::from(h.warn);
        if self.who.len() < WHO_CAP {
            let w = (h.rank, h.host.clone(), h.pid, h.source, h.launcher);
            if !self.who.contains(&w) {
                self.who.insert(w.clone());
                self.who_seq.push(w);
            }
        }
        if self.sample.len() >= SAMPLE {
            self.after_sample(&h);
        }
        if self.sample.len() < SAMPLE {
            self.sample.push(h);
        }
    }

    /// A hit that came once the sample was full.
    fn after_sample(&mut self, h: &Hit) {
        if h.warn && self.warn_sample.len() < SAMPLE {
            self.warn_sample.push(h.clone());
        }
        if h.ts.is_some() && self.earliest_ts.as_ref().is_none_or(|e| h.ts < e.ts) {
            self.earliest_ts = Some(h.clone());
        }
        if h.ts.is_some_and(|t| !t.is_nan()) && self.earliest_num.as_ref().is_none_or(|e| h.ts < e.ts) {
            self.earliest_num = Some(h.clone());
        }
    }

    /// Append `o`, the group of a later input (hit orders already shifted): the same group as
    /// `add` would have made from this group's hits followed by `o`'s.
    fn merge(&mut self, o: Group) {
        self.count += o.count;
        self.causes += o.causes;
        self.ignored += o.ignored;
        self.warns += o.warns;
        for w in o.who_seq {
            if self.who.len() < WHO_CAP && self.who.insert(w.clone()) {
                self.who_seq.push(w);
            }
        }
        for h in o.sample {
            if self.sample.len() < SAMPLE {
                self.sample.push(h);
            } else {
                self.after_sample(&h);
            }
        }
        // `o`'s warnings past its own sample came after every hit of its sample.
        for h in o.warn_sample {
            if self.warn_sample.len() < SAMPLE {
                self.warn_sample.push(h);
            }
        }
        // `o`'s hits after its own sample, summed up by `o.earliest_ts` (from nothing) and
        // `o.earliest_num` (the earliest with a number).
        match &self.earliest_ts {
            None => self.earliest_ts = o.earliest_ts,
            Some(e) if e.ts.is_some_and(f64::is_nan) => {}
            Some(e) => {
                if let Some(m) = o.earliest_num.as_ref().filter(|m| m.ts < e.ts) {
                    self.earliest_ts = Some(m.clone());
                }
            }
        }
        if let Some(m) = o.earliest_num {
            if self.earliest_num.as_ref().is_none_or(|e| m.ts < e.ts) {
                self.earliest_num = Some(m);
            }
        }
    }
}

struct SourceState {
    idx: usize,
    phase: Option<Phase>,
    ranks: BTreeSet<u32>,
    lines: u64,
    records: Assembler,
    /// The start of an `NCCL version` line cut at its end (see `version_tail`).
    version_tail: Option<String>,
}

impl SourceState {
    fn new(idx: usize) -> SourceState {
        SourceState {
            idx,
            phase: None,
            ranks: BTreeSet::new(),
            lines: 0,
            records: Assembler::default(),
            version_tail: None,
        }
    }
}

#[derive(Default)]
struct State {
    order: u64,
    groups: HashMap<Vec<usize>, Group>,
    unexplained: Vec<Hit>,
    unexplained_dropped: u64,
    templates: HashMap<String, (u64, Hit)>,
    nccl_versions: Vec<String>,
    torch_version: Option<String>,
    rank_map: HashMap<(String, u32), (u32, u32)>,
    /// `rank_map`'s keys in the order first seen (for `merge`: which keys the cap keeps must not
    /// depend on a hash map's order).
    rank_map_seq: Vec<(String, u32)>,
    sites: BTreeSet<(String, u32)>,
    /// `sites` in the order first seen (for `merge`).
    sites_seq: Vec<(String, u32)>,
    source_ranks: Vec<BTreeSet<u32>>,
    names: Vec<String>,
    inputs: Vec<InputSummary>,
    notes: Vec<String>,
    want_templates: bool,
    /// Outcome marker lines (at most `OUTCOME_KEEP` per input).
    outcomes: Vec<(Outcome, Hit)>,
    unrelated: Vec<Hit>,
    unrelated_dropped: u64,
}

impl State {
    /// Record what reading one input left: its notes, its summary, the byte budget still open.
    fn end_source(&mut self, src: SourceState, name: String, reader: &log::LineReader, budget: &mut Option<u64>) {
        if reader.cut_lines > 0 {
            self.notes.push(format!("{name}: {} line(s) longer than 1 MiB were cut", reader.cut_lines));
        }
        if reader.hit_limit {
            self.notes.push(format!("{name}: stopped at the --max-bytes limit"));
        }
        if let Some(b) = budget.as_mut() {
            *b = b.saturating_sub(reader.bytes_read);
        }
        self.source_ranks.push(src.ranks);
        self.inputs.push(InputSummary {
            source: name.clone(),
            lines: src.lines,
            bytes: reader.bytes_read,
            ranks: Vec::new(),
        });
        self.names.push(name);
    }

    /// Append `o`, the state of the next input read on its own (without templates): the result is
    /// the state reading that input after this one would have made.
    fn merge(&mut self, o: State) {
        let shift = |mut h: Hit| {
            h.order += self.order;
            h
        };
        for (cands, g) in o.groups {
            let g = Group {
                sample: g.sample.into_iter().map(shift).collect(),
                warn_sample: g.warn_sample.into_iter().map(shift).collect(),
                earliest_ts: g.earliest_ts.map(shift),
                earliest_num: g.earliest_num.map(shift),
                ..g
            };
            self.groups.entry(cands).or_default().merge(g);
        }
        for h in o.unexplained {
            if self.unexplained.len() < UNEXPLAINED_KEEP {
                self.unexplained.push(shift(h));
            } else {
                self.unexplained_dropped += 1;
            }
        }
        self.unexplained_dropped += o.unexplained_dropped;
        for (k, h) in o.outcomes {
            self.outcomes.push((k, shift(h)));
        }
        for h in o.unrelated {
            let h = shift(h);
            if self.unrelated.len() < UNRELATED_KEEP {
                self.unrelated.push(h);
            } else {
                self.unrelated_dropped += 1;
            }
        }
        self.unrelated_dropped += o.unrelated_dropped;
        self.order += o.order;
        for v in o.nccl_versions {
            add_version(&mut self.nccl_versions, v);
        }
        if let Some(t) = o.torch_version {
            offer_version(&mut self.torch_version, t);
        }
        for k in o.rank_map_seq {
            let Some(&v) = o.rank_map.get(&k) else { continue };
            if let Some(e) = self.rank_map.get_mut(&k) {
                if v.1 > e.1 {
                    *e = v;
                }
            } else if self.rank_map.len() < RANK_MAP_CAP {
                self.rank_map.insert(k.clone(), v);
                self.rank_map_seq.push(k);
            }
        }
        for s in o.sites_seq {
            if self.sites.len() < SITES_CAP && self.sites.insert(s.clone()) {
                self.sites_seq.push(s);
            }
        }
        self.source_ranks.extend(o.source_ranks);
        self.names.extend(o.names);
        self.inputs.extend(o.inputs);
        self.notes.extend(o.notes);
    }

    /// Where `h` sits in the inputs, as a key that does not depend on their order.
    fn canon<'s>(&'s self, h: &Hit) -> (&'s str, u64) {
        (self.names.get(h.source).map_or("", String::as_str), h.line)
    }

    fn evidence_of(&self, h: &Hit, rank: Option<u32>) -> Evidence {
        Evidence {
            source: self.names.get(h.source).cloned().unwrap_or_default(),
            line: h.line,
            rank,
            text: h.text.clone(),
            detail: h.detail.clone(),
            column: None,
        }
    }

    fn unexplained_of(&self, h: Hit) -> Unexplained {
        Unexplained { source: self.names.get(h.source).cloned().unwrap_or_default(), line: h.line, text: h.text }
    }

    fn add_outcome(&mut self, o: Outcome, h: &Hit) {
        if self.outcomes.iter().filter(|(_, x)| x.source == h.source).count() < OUTCOME_KEEP {
            self.outcomes.push((o, h.clone()));
        }
    }

    fn add_unrelated(&mut self, h: Hit) {
        if self.unrelated.len() < UNRELATED_KEEP {
            self.unrelated.push(h);
        } else {
            self.unrelated_dropped += 1;
        }
    }

    fn add_unexplained(&mut self, h: Hit) {
        if self.want_templates {
            self.add_template(&h);
        }
        if self.unexplained.len() < UNEXPLAINED_KEEP {
            self.unexplained.push(h);
        } else {
            self.unexplained_dropped += 1;
        }
    }

    fn add_template(&mut self, h: &Hit) {
        let t = template_of(&h.text);
        if let Some(e) = self.templates.get_mut(&t) {
            e.0 += 1;
        } else if self.templates.len() < TEMPLATE_CAP {
            self.templates.insert(t, (1, h.clone()));
        }
    }
}

/// A line with its variable parts masked: host:pid:tid prefixes, timestamps, addresses, numbers.
pub fn template_of(line: &str) -> String {
    use std::sync::OnceLock;
    static RES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        [
            (r"^\[\d{4}-\d\d-\d\d [\d:.]+\] ", ""),
            (r"^\S+:\d+:\d+ \[\d+\] ", "<host>:<pid>:<tid> [<dev>] "),
            (r"^\[[IWEF]\d{4} [\d:.]+ ", "[W<time> "),
            (r"\b(?:\d{1,3}\.){3}\d{1,3}\b", "<ip>"),
            (r"0x[0-9a-fA-F]+", "0x<hex>"),
            (r"\b\d+\b", "<n>"),
        ]
        .into_iter()
        .map(|(p, r)| (Regex::new(p).unwrap(), r))
        .collect()
    });
    let rest = log::strip_prefixes(line).rest;
    let mut s = rest.to_string();
    for (re, rep) in res {
        s = re.replace_all(&s, *rep).into_owned();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine with its prefilter on from the first byte (small inputs would skip it).
    fn engine() -> Engine {
        let mut e = Engine::new(schema::load_rules(&[]).unwrap()).unwrap();
        e.set_big_input(0);
        e
    }

    fn mem(name: &str, text: String) -> Input {
        Input::Memory { name: name.to_string(), text }
    }

    /// `analyze` and `analyze_reference` agree, to the byte of the JSON.
    fn same(e: &Engine, inputs: &[Input], opts: &Options) {
        let fast = serde_json::to_string_pretty(&e.analyze(inputs, opts).unwrap()).unwrap();
        let slow = serde_json::to_string_pretty(&e.analyze_reference(inputs, opts).unwrap()).unwrap();
        assert!(
            fast == slow,
            "analyze differs from the reference on {:?}",
            inputs.iter().map(Input::name).collect::<Vec<_>>()
        );
    }

    fn fixture_inputs() -> Vec<Input> {
        let mut v: Vec<Input> = schema::builtin_fixtures()
            .map(|(p, t)| {
                let text: String = t
                    .lines()
                    .filter(|l| !l.starts_with("#=") || l.starts_with("#=MATCH=# "))
                    .map(|l| format!("{}\n", l.strip_prefix("#=MATCH=# ").unwrap_or(l)))
                    .collect();
                mem(p, text)
            })
            .collect();
        v.push(mem(
            "examples/deepep-intranode-teardown.log",
            include_str!("../../examples/deepep-intranode-teardown.log").into(),
        ));
        v
    }

    #[test]
    fn torch_version_inferred_from_the_destructor_warning_line_and_nccl_from_its_pin() {
        let e = engine();
        let log = "[rank0]:[W1004 15:16:15.503072590 ProcessGroupNCCL.cpp:1479] Warning: WARNING: \
                   destroy_process_group() was not called before program exit, which can leak resources.\n";
        let a = e.analyze(&[mem("a.log", log.into())], &Options::default()).unwrap();
        let torch = a.versions.iter().find(|v| v.component == "torch").expect("a torch note");
        assert_eq!((torch.value.as_str(), torch.how.as_str()), ("2.7.1", "inferred"), "{:?}", a.versions);
        assert!(torch.detail.contains("ProcessGroupNCCL.cpp:1479"), "{}", torch.detail);
        let nccl = a.versions.iter().find(|v| v.component == "nccl").expect("the pinned NCCL");
        assert_eq!(nccl.how, "inferred");
        // Another release's line for the same message says that release; a line no release has, none.
        let a = e.analyze(&[mem("b.log", log.replace(":1479]", ":1639]"))], &Options::default()).unwrap();
        assert!(a.versions.iter().any(|v| v.component == "torch" && v.value == "2.15.0"), "{:?}", a.versions);
        let a = e.analyze(&[mem("c.log", log.replace(":1479]", ":7]"))], &Options::default()).unwrap();
        assert!(!a.versions.iter().any(|v| v.component == "torch"), "{:?}", a.versions);
    }

    #[test]
    fn prefilter_and_parallel_merge_change_nothing_on_the_fixtures() {
        let e = engine();
        let all = fixture_inputs();
        assert!(all.len() > 20);
        let opts = Options { evidence: 5, ..Default::default() };
        for one in &all {
            same(&e, std::slice::from_ref(one), &opts);
        }
        // Many inputs at once: read in parallel and merged.
        same(&e, &all, &opts);
        same(&e, &all[..7], &opts);
        // Templates and a byte budget read in turn; still the same.
        same(&e, &all, &Options { templates: true, ..opts.clone() });
        same(&e, &all, &Options { max_bytes: Some(20_000), ..opts.clone() });
    }

    #[test]
    fn ascii_set_matches_as_the_unicode_set_on_ascii_lines() {
        let e = engine();
        let ascii = e.ascii_set.as_ref().expect("the built-in patterns are ASCII-safe");
        let unicode = RegexSet::new(&e.pats).unwrap();
        let mut lines: Vec<String> = Vec::new();
        for i in fixture_inputs() {
            if let Input::Memory { text, .. } = i {
                lines.extend(text.lines().map(String::from));
            }
        }
        lines.extend(
            ["torch 2.5.1", "PyTorch Version: 2.4.0+cu121", "TORCH==2.1", "Killed process 12 (python)", "a\tb", ""]
                .map(String::from),
        );
        let mut n = 0;
        for l in lines.iter().filter(|l| l.is_ascii()) {
            let line = log::strip_prefixes(l).rest;
            let a: Vec<usize> = ascii.matches(line.as_bytes()).into_iter().collect();
            let u: Vec<usize> = unicode.matches(line).into_iter().collect();
            assert_eq!(a, u, "{line}");
            n += usize::from(!u.is_empty());
        }
        assert!(n > 100, "only {n} matching lines");
    }

    #[test]
    fn parallel_merge_respects_every_cap() {
        // Enough hits, sources, pids, sites, versions and unexplained lines to overflow every cap,
        // spread over inputs so that the caps are reached in the middle of a merge; with NaN and
        // equal timestamps for the earliest-hit logic.
        let e = engine();
        let mut inputs = Vec::new();
        for f in 0..9u32 {
            let mut t = String::new();
            for i in 0..700u32 {
                let pid = f * 1000 + i;
                let sec = match (f + i) % 7 {
                    0 => "nan".to_string(),
                    1 => "10".to_string(),
                    _ => format!("{:02}", (i * 13 + f * 7) % 60),
                };
                t += &format!("[2026-11-29 12:{sec}:05] h{f}:{pid}:{pid} [0] proxy.cc:{} NCCL WARN [Service thread] Accept failed Resource temporarily unavailable\n", 1458 + i % 90);
                t += &format!("h{f}:{pid}:{pid} [0] NCCL INFO NCCL version 2.{}.3+cuda12.4\n", 10 + (f + i) % 25);
                t += &format!("h{f}:{pid}:{pid} [0] NCCL INFO comm 0x5{f}a rank {i} nRanks {} nNodes 1\n", 1 + i % 5);
                t += &format!("[rank{i}]:[W1129 12:00:{sec}.5 Foo.cpp:{i}] something unexplained {i}\n");
                t += "h:1:1 [0] NCCL INFO AllReduce: opCount 1 comm 0x55 [nranks=8] stream 0x1\n";
            }
            inputs.push(mem(&format!("f{f}.log"), t));
        }
        let opts = Options { evidence: 5, ..Default::default() };
        same(&e, &inputs, &opts);
        same(&e, &inputs[3..5], &opts);
    }

    #[test]
    fn rank_map_cap_keeps_the_pairs_seen_first() {
        // 2 x 40 000 (host, pid) pairs against a cap of 65 536: the second input's later pairs are
        // dropped, the same ones whether the inputs are read in turn or merged.
        let e = engine();
        let file = |f: u32| {
            let mut t = String::new();
            for i in 0..40_000u32 {
                let pid = f * 100_000 + i;
                t += &format!("h:{pid}:{pid} [0] NCCL INFO comm 0x5a rank {} nRanks 512 nNodes 64\n", i % 512);
            }
            for pid in (0..20).chain([39_999]).map(|i| f * 100_000 + i).filter(|_| f == 2) {
                t += &format!("h:{pid}:{pid} [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Success\n");
            }
            // Names without a number: a file name must not give the pairs past the cap a rank.
            mem(&format!("pairs-{}.log", ["a", "b", "c"][f as usize]), t)
        };
        let inputs = [file(1), file(2)];
        let opts = Options { evidence: 50, ..Default::default() };
        same(&e, &inputs, &opts);
        let a = e.analyze(&inputs, &opts).unwrap();
        let ranks: Vec<Option<u32>> = a.findings.iter().flat_map(|f| f.evidence.iter().map(|x| x.rank)).collect();
        assert_eq!(ranks.iter().filter(|r| r.is_some()).count(), 20, "{ranks:?}");
        assert_eq!(ranks.len(), 21, "{ranks:?}");
    }

    #[test]
    fn unreadable_input_fails_as_when_read_in_turn() {
        let e = engine();
        let inputs = vec![
            mem("a.log", "x NCCL WARN y\n".into()),
            Input::File("/nonexistent/epdoctor/one.log".into()),
            Input::File("/nonexistent/epdoctor/two.log".into()),
        ];
        let fast = e.analyze(&inputs, &Options::default()).unwrap_err().to_string();
        let slow = e.analyze_reference(&inputs, &Options::default()).unwrap_err().to_string();
        assert_eq!(fast, slow);
        assert!(fast.contains("one.log"));
    }

    /// `EPDOCTOR_EQUIV=path[:path...] cargo test --release equivalence_on_given_logs -- --ignored`:
    /// the same check on logs of your own (the benchmark runs it on what it generates).
    #[test]
    #[ignore]
    fn equivalence_on_given_logs() {
        let paths: Vec<std::path::PathBuf> =
            std::env::var("EPDOCTOR_EQUIV").expect("EPDOCTOR_EQUIV").split(':').map(Into::into).collect();
        let inputs = log::expand(&paths).unwrap().inputs;
        same(&engine(), &inputs, &Options { evidence: 5, ..Default::default() });
    }
}
