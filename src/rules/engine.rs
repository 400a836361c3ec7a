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
use super::schema::{self, Marker, Phase, Rule};
use super::version::Version;
use crate::log::{self, Input, Level};
use crate::model::{
    Analysis, Evidence, Finding, InputSummary, Severity, Template, Unexplained, Verdict, VersionNote, SCHEMA_VERSION,
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
    Internal(Internal),
}

pub struct Engine {
    pub rules: Vec<Rule>,
    markers: Vec<(Marker, Regex)>,
    /// WARN/ATTN sites of the known NCCL releases (rules/catalog/, rules/fingerprints.toml).
    sites_db: Sites,
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
    rank_map_re: Regex,
    torch_version_re: Regex,
    /// Built when the input turns out big (`big_input` bytes); see `BIG_INPUT`.
    prefilter: OnceLock<log::Prefilter>,
    big_input: u64,
}

impl Engine {
    pub fn new(rules: Vec<Rule>) -> Result<Engine> {
        let markers = schema::load_markers()?;
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
            sites_db,
            ascii_set,
            unicode_set,
            pats,
            slots,
            nccl_version_re,
            rank_map_re,
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
            let mut src = SourceState { idx: si, phase: None, ranks: BTreeSet::new(), lines: 0 };
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
        let mut src = SourceState { idx: si, phase: None, ranks: BTreeSet::new(), lines: 0 };
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
                if !line.is_empty() && (!big || self.prefilter().may_matter(line)) {
                    self.line(st, &mut src, line);
                }
            } else {
                let line = log::clean_line(raw);
                if !big || !line.is_ascii() || self.prefilter().may_matter(&line) {
                    self.line(st, &mut src, &line);
                }
            }
        }
        st.end_source(src, name, &reader, budget);
        Ok(())
    }

    fn line(&self, st: &mut State, src: &mut SourceState, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let (prefix_rank, line) = log::strip_rank_prefix(raw);
        let matches = self.matches(line);
        let level = log::level_of(line);
        if matches.is_empty() && level < Level::Warn {
            return;
        }
        let rec = log::parse(line, prefix_rank);
        if let Some(r) = rec.rank {
            if src.ranks.len() < 64 {
                src.ranks.insert(r);
            }
        }
        let mut cands: Vec<usize> = Vec::new();
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
                    if let (Some(c), Some(pid)) = (self.rank_map_re.captures(line), rec.pid) {
                        let rank: u32 = c[1].parse().unwrap_or(0);
                        let nranks: u32 = c[2].parse().unwrap_or(0);
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
        // Fingerprint sites: WARN lines only (INFO unwinding lines name other sites).
        if level == Level::Warn && rec.kind == log::Kind::Nccl {
            if let Some((f, l)) = rec.site {
                if let Some(id) = self.sites_db.lookup(f, l, rec.msg) {
                    let key = (format!("{f}:{l}"), id);
                    if st.sites.len() < SITES_CAP && st.sites.insert(key.clone()) {
                        st.sites_seq.push(key);
                    }
                }
            }
        }
        st.order += 1;
        let hit = Hit {
            source: src.idx,
            line: src.lines,
            order: st.order,
            rank: rec.rank,
            host: rec.host.map(str::to_string),
            pid: rec.pid,
            ts: rec.ts,
            text: clip(raw),
            warn: level >= Level::Warn,
        };
        if cands.is_empty() {
            if level >= Level::Warn {
                st.add_unexplained(hit);
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

    fn finish(&self, mut st: State, opts: &Options) -> Analysis {
        // Versions.
        let mut versions = Vec::new();
        // With several, the lowest: the choice must not depend on the order of the rank files.
        let stated_nccl = st.nccl_versions.first().cloned();
        if st.nccl_versions.len() > 1 {
            st.notes.push(format!(
                "the log shows several NCCL versions: {}; the rules use the lowest",
                st.nccl_versions.join(", ")
            ));
        }
        let mut nccl_v: Option<Version> = None;
        let mut nccl_out: Option<String> = None;
        if let Some(v) = opts.assume_nccl {
            nccl_v = Some(v);
            nccl_out = Some(v.to_string());
            versions.push(VersionNote {
                component: "nccl".into(),
                value: v.to_string(),
                how: "assumed".into(),
                detail: "given by the caller".into(),
            });
        } else if let Some(s) = &stated_nccl {
            nccl_v = Version::parse(s);
            nccl_out = nccl_v.map(|v| v.to_string());
            versions.push(VersionNote {
                component: "nccl".into(),
                value: s.clone(),
                how: "stated".into(),
                detail: "NCCL version line".into(),
            });
        } else if let Some((min, max, sites)) = self.infer_nccl(&st.sites) {
            nccl_v = Some(min);
            let value = if min == max { min.to_string() } else { format!("{min}-{max}") };
            if min == max {
                nccl_out = Some(min.to_string());
            }
            versions.push(VersionNote {
                component: "nccl".into(),
                value,
                how: "inferred".into(),
                detail: format!("from the file:line of WARN sites {}", sites.join(", ")),
            });
        } else if let Some(note) = st.torch_version.as_deref().and_then(|t| self.sites_db.torch_pin_note(t)) {
            nccl_v = Version::parse(&note.value);
            nccl_out = Some(note.value.clone());
            versions.push(note);
        }
        let torch_v = st.torch_version.as_deref().and_then(Version::parse);
        if let Some(t) = &st.torch_version {
            versions.push(VersionNote {
                component: "torch".into(),
                value: t.clone(),
                how: "stated".into(),
                detail: "a torch version in the log".into(),
            });
        }

        // Rank resolution: explicit rank, else (host, pid) from NCCL init lines, else the source's
        // single rank.
        let rank_map = std::mem::take(&mut st.rank_map);
        let source_ranks = st.source_ranks.clone();
        let pid_only: HashMap<u32, u32> = {
            let mut m: HashMap<u32, Option<u32>> = HashMap::new();
            for ((_, pid), (rank, _)) in &rank_map {
                let e = m.entry(*pid).or_insert(Some(*rank));
                if *e != Some(*rank) {
                    *e = None;
                }
            }
            m.into_iter().filter_map(|(p, r)| r.map(|r| (p, r))).collect()
        };
        let resolve = |h: &Hit| -> Option<u32> {
            h.rank
                .or_else(|| h.pid.and_then(|p| rank_map.get(&(h.host.clone().unwrap_or_default(), p)).map(|x| x.0)))
                .or_else(|| h.pid.and_then(|p| pid_only.get(&p).copied()))
                .or_else(|| {
                    let rs = &source_ranks[h.source];
                    (rs.len() == 1).then(|| *rs.iter().next().unwrap())
                })
        };

        // Version gates first, then requires/excludes against the rules that can fire.
        let version_ok = |r: &Rule| -> bool {
            let gate = |range: &Option<super::version::Range>, v: Option<Version>| match (range, v) {
                (None, _) => true,
                (Some(rg), Some(v)) => rg.contains(v),
                (Some(_), None) => r.def.if_version_unknown,
            };
            gate(&r.nccl, nccl_v) && gate(&r.torch, torch_v)
        };
        let allowed: Vec<bool> = self.rules.iter().map(version_ok).collect();
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

        #[derive(Default)]
        struct Acc {
            count: u64,
            hits: Vec<Hit>,
            ranks: BTreeSet<u32>,
        }
        let mut accs: HashMap<usize, Acc> = HashMap::new();
        let mut unexplained_hits = std::mem::take(&mut st.unexplained);
        let mut extra_unexplained = st.unexplained_dropped;
        for (cands, g) in std::mem::take(&mut st.groups) {
            match winner(&cands, Some(&fired0)) {
                Some(r) => {
                    let a = accs.entry(r).or_default();
                    a.count += g.count;
                    for h in &g.sample {
                        if let Some(rk) = resolve(h) {
                            a.ranks.insert(rk);
                        }
                    }
                    for w in &g.who {
                        if let Some(rk) = w.0.or_else(|| {
                            resolve(&Hit { source: w.3, rank: None, host: w.1.clone(), pid: w.2, ..Hit::default() })
                        }) {
                            a.ranks.insert(rk);
                        }
                    }
                    a.hits.extend(g.sample);
                    if let Some(e) = g.earliest_ts {
                        a.hits.push(e);
                    }
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
                            unexplained_hits.push(h);
                        }
                    }
                    // Only the warnings among the hits past the sample (INFO lines are no news).
                    extra_unexplained += g.warns.saturating_sub(sampled);
                }
            }
        }

        let mut findings: Vec<(Finding, Hit, i32, bool)> = Vec::new();
        for (r, mut a) in accs {
            let rule = &self.rules[r];
            a.hits.sort_by_key(|h| h.order);
            a.hits.dedup_by_key(|h| h.order);
            let earliest = a.hits.iter().cloned().reduce(|x, y| if earlier(&y, &x) { y } else { x });
            let mut ev: Vec<&Hit> = Vec::new();
            if let Some(e) = &earliest {
                ev.push(a.hits.iter().find(|h| h.order == e.order).unwrap());
            }
            for h in &a.hits {
                if ev.len() >= opts.evidence.max(1) {
                    break;
                }
                if !ev.iter().any(|x| x.order == h.order) {
                    ev.push(h);
                }
            }
            let evidence = ev
                .into_iter()
                .map(|h| Evidence {
                    source: st.names[h.source].clone(),
                    line: h.line,
                    rank: resolve(h),
                    text: h.text.clone(),
                })
                .collect();
            let d = &rule.def;
            findings.push((
                Finding {
                    rule: d.id.clone(),
                    title: d.title.clone(),
                    category: d.category.clone(),
                    severity: d.severity,
                    benign: d.benign,
                    ranks: a.ranks.into_iter().collect(),
                    count: a.count,
                    evidence,
                    root_cause: d.root_cause.trim().to_string(),
                    fix: d.fix.trim().to_string(),
                    refs: d.refs.clone(),
                    context: None,
                },
                earliest.unwrap_or_default(),
                d.priority,
                d.symptom,
            ));
        }
        // Display order: where each finding first appears in the input.
        findings.sort_by(|a, b| a.1.order.cmp(&b.1.order).then_with(|| a.0.rule.cmp(&b.0.rule)));
        // The earliest (see `earlier`) non-symptom actionable finding is the cause; symptoms only
        // when nothing else is actionable.
        let pick = |cands: &mut dyn Iterator<Item = usize>, f: &[(Finding, Hit, i32, bool)]| {
            cands.reduce(|x, y| if earlier(&f[y].1, &f[x].1) { y } else { x })
        };
        let is_actionable = |f: &Finding| !f.benign && f.severity >= Severity::Warning;

        // The primary is chosen before any demotion below, so demoted noise never outranks the
        // failure it is a consequence of.
        let actionable: Vec<usize> = (0..findings.len()).filter(|&i| is_actionable(&findings[i].0)).collect();
        let primary_idx = if !actionable.is_empty() {
            pick(&mut actionable.iter().copied().filter(|&i| !findings[i].3), &findings).or_else(|| {
                // Only symptoms: the one closest to the cause (highest priority), then the earliest.
                let top = actionable.iter().map(|&i| findings[i].2).max();
                pick(&mut actionable.iter().copied().filter(|&i| Some(findings[i].2) == top), &findings)
            })
        } else {
            // Benign: the finding that explains most (priority), then the earliest.
            let top = findings.iter().map(|f| f.2).max();
            pick(&mut (0..findings.len()).filter(|&i| Some(findings[i].2) == top), &findings)
        };

        // Any failure in the run (a cause, or a symptom such as a non-zero exit) turns teardown noise
        // into symptoms of it.
        if !actionable.is_empty() {
            let p = &findings[primary_idx.expect("actionable findings give a primary")].0;
            let (cause_id, at) =
                (p.rule.clone(), p.evidence.first().map(|e| format!("{}:{}", e.source, e.line)).unwrap_or_default());
            for (f, _, _, symptom) in findings.iter_mut() {
                let r = self.rules.iter().find(|r| r.def.id == f.rule).unwrap();
                if f.benign && r.def.demote_on_failure {
                    f.benign = false;
                    f.severity = Severity::Warning;
                    *symptom = true;
                    f.context = Some(format!(
                        "not teardown noise here: the run also shows `{cause_id}` ({at}); these lines are a consequence of that failure"
                    ));
                }
            }
        }

        // Unexplained lines, in input order.
        unexplained_hits.sort_by_key(|h| h.order);
        let total_unexplained = unexplained_hits.len() as u64 + extra_unexplained;
        let templates = opts.templates.then(|| {
            let mut v: Vec<Template> = st
                .templates
                .drain()
                .map(|(t, (count, h))| Template {
                    template: t,
                    count,
                    example: Unexplained { source: st.names[h.source].clone(), line: h.line, text: h.text },
                })
                .collect();
            v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.template.cmp(&b.template)));
            v
        });
        let unexplained: Vec<Unexplained> = unexplained_hits
            .into_iter()
            .take(UNEXPLAINED_KEEP)
            .map(|h| Unexplained { source: st.names[h.source].clone(), line: h.line, text: h.text })
            .collect();
        if total_unexplained > unexplained.len() as u64 {
            st.notes.push(format!(
                "{} unexplained warning/error lines in all; the first {} are listed",
                total_unexplained,
                unexplained.len()
            ));
        }

        let verdict = if !actionable.is_empty() {
            Verdict::Actionable
        } else if total_unexplained > 0 {
            Verdict::Unknown
        } else if !findings.is_empty() {
            Verdict::Benign
        } else {
            Verdict::Clean
        };
        let primary = primary_idx.map(|i| findings[i].0.clone());

        for (s, ranks) in st.inputs.iter_mut().zip(&st.source_ranks) {
            s.ranks = ranks.iter().copied().collect();
        }

        Analysis {
            schema_version: SCHEMA_VERSION,
            tool_version: crate::VERSION.to_string(),
            verdict,
            nccl_version: nccl_out,
            torch_version: torch_v.map(|v| v.to_string()),
            primary,
            findings: findings.into_iter().map(|f| f.0).collect(),
            unexplained,
            versions,
            inputs: st.inputs,
            unexplained_templates: templates,
            notes: st.notes,
        }
    }

    /// The NCCL releases whose WARN sites explain every site seen (intersection), if any.
    fn infer_nccl(&self, sites: &BTreeSet<(String, u32)>) -> Option<(Version, Version, Vec<String>)> {
        let (min, max) = self.sites_db.infer(sites.iter().map(|(_, id)| *id))?;
        let mut used: Vec<String> = sites.iter().map(|(s, _)| s.clone()).collect();
        used.dedup();
        Some((min, max, used))
    }
}

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
    }
}

/// Whether `a` happened before `b`: by timestamp when both lines carry one (the clocks of ranks on
/// one machine agree), otherwise by position in the input, which is all we know.
fn earlier(a: &Hit, b: &Hit) -> bool {
    match (a.ts, b.ts) {
        (Some(x), Some(y)) if x != y => x < y,
        _ => a.order < b.order,
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
    /// `level_of` rated the line a warning or an error.
    warn: bool,
}

type Who = (Option<u32>, Option<String>, Option<u32>, usize);

#[derive(Default)]
struct Group {
    count: u64,
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
        self.warns += u64::from(h.warn);
        if self.who.len() < WHO_CAP {
            let w = (h.rank, h.host.clone(), h.pid, h.source);
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
    let (_, rest) = log::strip_rank_prefix(line);
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
            let line = log::strip_rank_prefix(l).1;
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
            mem(&format!("r{f}.log"), t)
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
        let inputs = log::expand(&paths).unwrap();
        same(&engine(), &inputs, &Options { evidence: 5, ..Default::default() });
    }
}
