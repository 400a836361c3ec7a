//! Reading the inputs: the prefilter, records, and each line matched and filed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use anyhow::Result;
use regex::{Regex, RegexSet};

use super::state::{proc_key, Hit, SourceState, State};
use super::versions::{add_version, offer_version, version_tail, LEVEL_SITE, TORCH_SITE};
use super::{Engine, Internal, Slot, HIT_TEXT_MAX, READ_AHEAD, REFERENCE};
use crate::log::records::{Fed, Flags, Part, Role};
use crate::log::{self, Input, Level};
use crate::rules::catalog::Sites;
use crate::rules::schema::{Outcome, Phase};

impl Engine {
    /// Read `inputs` with `threads` threads, each input into a state of its own, and merge those in
    /// input order as they complete. The first input that cannot be opened (in input order) fails
    /// the whole analysis, as it does when reading in turn.
    pub(crate) fn scan_parallel(&self, inputs: &[Input], threads: usize, big: bool) -> Result<State> {
        struct Merge {
            next: usize,
            done: BTreeMap<usize, Result<State>>,
            st: State,
            err: Option<anyhow::Error>,
        }
        let claim = AtomicUsize::new(0);
        let merge = Mutex::new(Merge { next: 0, done: BTreeMap::new(), st: self.state(false), err: None });
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
                    let mut st = self.state(false);
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
    pub(crate) fn scan(
        &self,
        st: &mut State,
        si: usize,
        input: &Input,
        budget: &mut Option<u64>,
        big: bool,
    ) -> Result<()> {
        let mut reader = log::open(input, *budget)?;
        let name = input.name();
        let mut src = SourceState::new(si);
        // The patterns the prefilter says can match a line (reused from line to line).
        let mut reach = Vec::new();
        loop {
            let big = big || reader.bytes_read >= self.big_input;
            let raw = match reader.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => {
                    // Truncated gzip/zstd and the like: keep what was read, say so.
                    st.cut_short(si, &name, src.lines, &e);
                    break;
                }
            };
            src.lines += 1;
            self.raw_line(st, &mut src, raw, big, &mut reach);
        }
        self.end_records(st, &mut src);
        st.end_source(src, name, reader.stats(), budget);
        Ok(())
    }

    /// One line as the reader returns it, cleaned and matched (`big`: through the prefilter).
    pub(crate) fn raw_line(
        &self,
        st: &mut State,
        src: &mut SourceState,
        raw: &[u8],
        big: bool,
        reach: &mut Vec<usize>,
    ) {
        // Printable ASCII is its own cleaned form (no copy); the prefilter answers for ASCII.
        if log::is_clean(raw) {
            // SAFETY: `is_clean` holds only for ASCII bytes, which are valid UTF-8.
            let line = unsafe { std::str::from_utf8_unchecked(raw) };
            // An open record (a traceback) takes every line until it closes. The prefixes are
            // stripped once, for the prefilter and the matcher.
            if !line.is_empty() {
                let p = log::strip_prefixes(line);
                let ask = big && !src.records.is_open();
                self.asked_line(st, src, line, p, ask, reach);
            }
        } else {
            let line = log::clean_line(raw);
            if !line.is_empty() {
                let p = log::strip_prefixes(&line);
                let ask = big && line.is_ascii() && !src.records.is_open();
                self.asked_line(st, src, &line, p, ask, reach);
            }
        }
    }

    /// `prefixed_line`, after the prefilter when `ask`: a line no pattern can match is skipped,
    /// and one that only some can match is matched against those alone.
    pub(crate) fn asked_line(
        &self,
        st: &mut State,
        src: &mut SourceState,
        raw: &str,
        p: log::Prefixed<'_>,
        ask: bool,
        reach: &mut Vec<usize>,
    ) {
        if !ask {
            return self.prefixed_line(st, src, raw, p, Want::All);
        }
        // A logger head's warning matters whatever its message holds (the prefilter reads only
        // the message).
        let r =
            if head_warns(&p) { self.prefilter().warns(p.rest, reach) } else { self.prefilter().reach(p.rest, reach) };
        match r {
            log::Reach::Nothing => {}
            log::Reach::Some | log::Reach::Warns => self.prefixed_line(st, src, raw, p, Want::Among(reach)),
            log::Reach::Any => self.prefixed_line(st, src, raw, p, Want::All),
        }
    }

    /// One physical line: prefixes stripped, joined into records, every record matched.
    pub(crate) fn line(&self, st: &mut State, src: &mut SourceState, raw: &str) {
        if !raw.is_empty() {
            self.prefixed_line(st, src, raw, log::strip_prefixes(raw), Want::All);
        }
    }

    /// `line` once its prefixes are stripped (`p`); `raw` is not empty. `want`: what is known of
    /// the patterns that match its message.
    pub(crate) fn prefixed_line(
        &self,
        st: &mut State,
        src: &mut SourceState,
        raw: &str,
        mut p: log::Prefixed<'_>,
        want: Want<'_>,
    ) {
        self.split_version(st, src, p.rest);
        if p.level.is_some() && p.head_repeats {
            // The same head on the line before: a later line of one multi-line message, whose
            // level is its text's (a traceback's frames under an `ERROR` head are not errors).
            let head = &raw[..p.head_end.min(raw.len())];
            if src.last_head.0 + 1 == src.lines && src.last_head.1 == head {
                p.level = None;
            }
            src.last_head.0 = src.lines;
            src.last_head.1.clear();
            src.last_head.1.push_str(head);
        }
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
                level: p.level,
                flags: Flags::default(),
                symptom: false,
                detail: None,
            };
            let matches = match want {
                Want::All => self.matches(l.msg),
                Want::Among(c) => self.matches_among(l.msg, c),
                Want::Known(m) => m,
            };
            self.matched_line(st, src, &l, None, matches);
        }
    }

    /// Close the records still open at the end of a source.
    pub(crate) fn end_records(&self, st: &mut State, src: &mut SourceState) {
        src.records.finish();
        for rec in src.records.take_done() {
            self.record(st, src, rec);
        }
    }

    /// A record of several lines. When NCCL's `Last error:` payload is explained by a rule, the
    /// error lines it restates are symptoms of it (the payload names the failing call).
    pub(crate) fn record(&self, st: &mut State, src: &mut SourceState, parts: Vec<Part>) {
        let payload_text = |m: &str| format!(" NCCL WARN {m}");
        let is_rule = |ms: &[usize]| ms.iter().any(|&m| matches!(self.slots[m], Slot::Rule(_)));
        // Each part is matched once, for the record's decisions and for filing it: as written
        // (the parts filed, and `what():` lines), and a `Last error:` payload as a WARN too.
        let own: Vec<Option<Vec<usize>>> = parts
            .iter()
            .map(|p| (p.role != Role::Context || p.msg.starts_with("what():")).then(|| self.matches(&p.msg)))
            .collect();
        let warn: Vec<Option<Vec<usize>>> =
            parts.iter().map(|p| (p.role == Role::Payload).then(|| self.matches(&payload_text(&p.msg)))).collect();
        let restated = warn.iter().flatten().any(|w| is_rule(w));
        // `terminate called after throwing ...` says only that something was thrown; when a rule
        // reads its `what():` line, that reading is the record's.
        let what_explained =
            parts.iter().zip(&own).any(|(p, m)| p.msg.starts_with("what():") && m.as_deref().is_some_and(is_rule));
        for (i, part) in parts.iter().enumerate().filter(|(_, p)| p.role != Role::Context) {
            if i == 0 && what_explained && part.msg.starts_with("terminate called") {
                continue;
            }
            let payload = part.role == Role::Payload;
            let warn_text = payload.then(|| payload_text(&part.msg));
            let mut matches = own[i].clone().unwrap_or_default();
            if let Some(w) = &warn[i] {
                matches.extend(w);
                matches.sort_unstable();
                matches.dedup();
            }
            let l = LineRef {
                line: part.line,
                raw: &part.raw,
                msg: &part.msg,
                rank: part.origin.rank.or(part.origin.local_rank),
                host: part.origin.host.as_deref(),
                pid: part.origin.pid,
                ts: part.origin.ts,
                level: part.origin.level,
                flags: part.flags.clone(),
                symptom: part.flags.chained || (restated && !payload),
                detail: part.detail.as_deref(),
            };
            self.matched_line(st, src, &l, warn_text.as_deref(), matches);
        }
    }

    /// Joins an `NCCL version` line that a paste wrapped in the middle (`NCCL vers` / `ion 2.21.5`).
    pub(crate) fn split_version(&self, st: &mut State, src: &mut SourceState, msg: &str) {
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
    pub(crate) fn matched_line(
        &self,
        st: &mut State,
        src: &mut SourceState,
        l: &LineRef<'_>,
        warn_text: Option<&str>,
        matches: Vec<usize>,
    ) {
        let line = l.msg;
        let level = match (warn_text, l.level) {
            (Some(_), _) => Level::Warn,
            (None, Some(head)) => head,
            (None, None) => log::level_of(line),
        };
        // Fail safe: an unlevelled line that reads like a failure, or a record cut before its
        // exception, is listed if no rule explains it.
        let error_like = l.flags.incomplete
            || (level == Level::None
                && !l.flags.continuation
                && log::looks_like_error(line)
                && !metric_or_progress(line));
        if matches.is_empty() && level < Level::Attn && !error_like && !l.flags.uncaught {
            return;
        }
        let rec = log::parse(warn_text.unwrap_or(line), l.rank);
        if let Some(r) = rec.rank {
            if src.ranks.len() < 64 {
                src.ranks.insert(r);
            }
        }
        let (mut cands, mut outcome, resolves) = self.slot_hits(st, src, line, &rec, matches);
        // An exception no frame caught, or a FATAL log line, ended its process: a failure marker.
        if outcome.is_none() && (l.flags.uncaught || log::record::is_fatal_head(line)) {
            outcome = Some(Outcome::Failed);
        }
        for r in resolves {
            st.add_resolved(
                r,
                Hit { source: src.idx, line: l.line, ts: rec.ts.or(l.ts), text: clip(l.raw), ..Hit::default() },
            );
        }
        let phase = src.phase;
        cands.retain(|&r| self.rules[r].def.phase.allows(phase));
        // Harmless by origin: only a traceback raised where the rule says (its innermost frame).
        let innermost = l.detail.and_then(|d| d.strip_prefix(log::records::INNERMOST));
        cands.retain(|&r| self.rules[r].frames.as_ref().is_none_or(|f| innermost.is_some_and(|i| f.is_match(i))));
        // Highest priority first, then file order.
        cands.sort_by_key(|&r| (-self.rules[r].def.priority, r));
        let leveled = self.record_sites(st, &rec, level);
        if cands.is_empty() && outcome.is_none() && !(level >= Level::Attn || error_like) {
            // Matched only the engine's own patterns (a version, a rank map, a marker).
            return;
        }
        st.order += 1;
        let (warn, ts) = (level >= Level::Attn || error_like, rec.ts.or(l.ts));
        // A group whose sample is full keeps only the counts and origin of most hits (a return
        // trace repeated on every rank): no copy of their text then.
        let whole =
            outcome.is_some() || cands.is_empty() || st.groups.get(&cands).is_none_or(|g| g.keeps(&st.caps, warn, ts));
        let hit = Hit {
            source: src.idx,
            line: l.line,
            order: st.order,
            rank: rec.rank,
            host: rec.host.or(l.host).map(str::to_string),
            pid: rec.pid.or(l.pid),
            ts,
            text: if whole { clip(l.raw) } else { String::new() },
            warn,
            chatter: matches!(level, Level::Info | Level::Trace),
            symptom: l.symptom,
            ignored: l.flags.ignored,
            launcher: rec.kind == log::Kind::Launcher,
            detail: if whole { l.detail.map(clip) } else { None },
            leveled: leveled.map(|(id, _)| id),
            known: None,
        };
        if let Some(o) = outcome {
            st.add_outcome(o, &hit);
        }
        for &r in cands.iter().filter(|&&r| self.rules[r].def.last_attempt) {
            if self.is_last_attempt(r, line) {
                st.add_exhausted(r, hit.clone());
            }
        }
        if cands.is_empty() {
            if hit.warn && outcome != Some(Outcome::Succeeded) {
                // A message the catalogue knows: the finding of its class, not an unknown line.
                if let Some((id, r)) = self.known_site(line, level) {
                    st.groups.entry(vec![r]).or_default().add(&st.caps, Hit { known: Some(id), ..hit });
                    return;
                }
                if log::is_unrelated_warning(line) || log::strip_prefixes(l.raw).unrelated_warning() {
                    st.add_unrelated(hit);
                } else {
                    st.add_unexplained(hit);
                }
            }
            return;
        }
        st.groups.entry(cands).or_default().add(&st.caps, hit);
    }

    /// What the matched patterns of one line are: candidate rules (in match order), the outcome
    /// a marker gives; phase markers, versions and the rank map are taken here.
    fn slot_hits(
        &self,
        st: &mut State,
        src: &mut SourceState,
        line: &str,
        rec: &log::Record<'_>,
        matches: Vec<usize>,
    ) -> (Vec<usize>, Option<Outcome>, Vec<usize>) {
        let mut cands: Vec<usize> = Vec::new();
        let mut outcome = None;
        let mut resolves = Vec::new();
        for m in matches {
            match self.slots[m] {
                Slot::Rule(r) => {
                    if !cands.contains(&r) {
                        cands.push(r);
                    }
                }
                Slot::Marker(i) => {
                    let p = self.markers[i].phase;
                    // Teardown is sticky: a later communicator's init does not undo it.
                    if src.phase != Some(Phase::Teardown) || p == Phase::Teardown {
                        src.phase = Some(p);
                    }
                }
                Slot::Outcome(i) => outcome = Some(self.outcome_markers[i].outcome),
                Slot::Resolves(r) => resolves.push(r),
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
                        let key = proc_key(rec.host.unwrap_or(""), pid);
                        if let Some(e) = st.rank_map.get_mut(&key) {
                            if nranks > e.1 {
                                *e = (rank, nranks);
                            }
                        } else if st.rank_map.len() < st.caps.rank_map {
                            st.rank_map.insert(key, (rank, nranks));
                            st.rank_map_seq.push(key);
                        }
                    }
                }
            }
        }
        (cands, outcome, resolves)
    }

    /// Record the line's fingerprint site and, for a message NCCL prints at different levels by
    /// release, its level site; returns the latter (its id and key).
    fn record_sites(&self, st: &mut State, rec: &log::Record<'_>, level: Level) -> Option<(u32, String)> {
        // Fingerprint sites: NCCL's WARN and ATTN lines only (INFO unwinding lines name other
        // sites); torch's C++ lines, keyed apart (`torch File.cpp:LINE`).
        let known = match (rec.kind, level, rec.site) {
            (log::Kind::Nccl, Level::Warn | Level::Attn, Some((f, ln))) => {
                self.sites().lookup(f, ln, rec.msg).map(|id| (format!("{f}:{ln}"), id))
            }
            (log::Kind::Torch, _, Some((f, ln))) => {
                self.sites().lookup_torch(f, ln, rec.msg).map(|id| (format!("{TORCH_SITE}{f}:{ln}"), id))
            }
            _ => None,
        };
        // The level of a message NCCL prints at different levels by release (INFO lines too).
        let leveled = match (rec.kind, level) {
            (log::Kind::Nccl, Level::Info | Level::Attn | Level::Warn) if Sites::may_have_level(rec.msg) => self
                .sites()
                .lookup_level(level.nccl_name(), rec.msg)
                .map(|(id, text)| (id, format!("{LEVEL_SITE}{} `{text}`", level.nccl_name()))),
            _ => None,
        };
        for key in known.into_iter().chain(leveled.as_ref().map(|(id, k)| (k.clone(), *id))) {
            if st.sites.len() < st.caps.sites && st.sites.insert(key.clone()) {
                st.sites_seq.push(key);
            }
        }
        leveled
    }

    /// The catalogued message a warning line that no rule reads prints, and the rule of its class.
    /// A line printed at error level (vLLM's `ERROR` head, a c10 `[E...]`) never reads as a benign
    /// notice: a message the catalogue files as a notice (the same text logged at warning level
    /// elsewhere, or a line of the message that the error's own text holds) is `known-error`
    /// there; a teardown message keeps its class, which is demoted when the run failed.
    pub(crate) fn known_site(&self, line: &str, level: Level) -> Option<(u32, usize)> {
        use crate::rules::catalog::KnownClass;
        if self.known_rules.is_empty() {
            return None;
        }
        let k = crate::rules::catalog::Known::builtin().ok()?;
        let id = k.lookup(line)?;
        let mut class = k.get(id)?.class;
        if level == Level::Error && !matches!(class, KnownClass::Error | KnownClass::Teardown) {
            class = KnownClass::Error;
        }
        self.known_rules.iter().find(|(c, _)| *c == class).map(|&(_, r)| (id, r))
    }

    /// `matches`, where only the patterns `cands` (ascending) can match: each is run alone, which
    /// on a line that passes the prefilter costs less than the whole set.
    pub(crate) fn matches_among(&self, line: &str, cands: &[usize]) -> Vec<usize> {
        if let Some(plain) = plain_quotes(line) {
            return self.matches_among(&plain, cands);
        }
        if !self.ascii_ok || REFERENCE.with(std::cell::Cell::get) {
            return self.matches(line);
        }
        let mut out = Vec::new();
        for &c in cands {
            match self.single(c) {
                Some(re) if re.is_match(line.as_bytes()) => out.push(c),
                Some(_) => {}
                None => return self.matches(line),
            }
        }
        out
    }

    /// The rules whose patterns match `line` as it is (no prefix stripped), found the way a
    /// line of a log is: the prefilter's candidates, each run alone (the catalogue check links
    /// its rendered messages to rules through this).
    #[doc(hidden)]
    pub fn rules_matching(&self, line: &str) -> Vec<usize> {
        let mut reach = Vec::new();
        let pats = if line.is_ascii() {
            match self.prefilter().reach(line, &mut reach) {
                log::Reach::Nothing => Vec::new(),
                log::Reach::Some | log::Reach::Warns => self.matches_among(line, &reach),
                log::Reach::Any => self.matches(line),
            }
        } else {
            self.matches(line)
        };
        let mut rules: Vec<usize> = pats
            .into_iter()
            .filter_map(|p| match self.slots[p] {
                Slot::Rule(r) => Some(r),
                _ => None,
            })
            .collect();
        rules.dedup();
        rules
    }

    /// Pattern `c` alone, as in the byte set (`None`: it does not compile that way), compiled on
    /// first use.
    fn single(&self, c: usize) -> Option<&regex::bytes::Regex> {
        self.singles[c].get_or_init(|| regex::bytes::Regex::new(&format!("(?-u){}", self.pats[c])).ok()).as_ref()
    }

    /// The byte set (see `Engine::ascii_set`), compiled on first use.
    pub(crate) fn ascii_set(&self) -> Option<&regex::bytes::RegexSet> {
        if !self.ascii_ok {
            return None;
        }
        let set = || {
            regex::bytes::RegexSetBuilder::new(self.pats.iter().map(|p| format!("(?-u){p}")))
                .dfa_size_limit(DFA_CACHE)
                .build()
                .ok()
        };
        self.ascii_set.get_or_init(set).as_ref()
    }

    /// The indices of the patterns that match `line` (rank prefix stripped), in order. Non-ASCII
    /// lines (progress bars, other languages) too go through the byte set: the patterns name only
    /// ASCII, and a Unicode set of every rule is many times slower per line and costs seconds to
    /// compile. (`\w`, `\d`, `\s` then do not take non-ASCII letters, digits or spaces.)
    pub(crate) fn matches(&self, line: &str) -> Vec<usize> {
        if let Some(plain) = plain_quotes(line) {
            return self.matches(&plain);
        }
        if let (Some(set), false) = (self.ascii_set(), REFERENCE.with(std::cell::Cell::get)) {
            return set.matches(line.as_bytes()).into_iter().collect();
        }
        match self.unicode_set.get_or_init(|| unicode_set(&self.pats).ok()) {
            Some(set) => set.matches(line).into_iter().collect(),
            None => {
                (0..self.pats.len()).filter(|&i| Regex::new(&self.pats[i]).is_ok_and(|re| re.is_match(line))).collect()
            }
        }
    }
}

/// `line` with typographic quotes made plain, when it has any: a log pasted outside a code block
/// on GitHub reaches people with `‘invalid argument’`, and patterns are written with ASCII quotes
/// (the evidence keeps the line as it was).
fn plain_quotes(line: &str) -> Option<String> {
    const CURLY: [char; 4] = ['\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}'];
    // All four begin with the byte 0xE2: one `memchr` rules out nearly every line.
    let may = memchr::memchr(0xE2, line.as_bytes()).is_some();
    (may && line.contains(CURLY)).then(|| {
        line.chars()
            .map(|c| match c {
                '\u{2018}' | '\u{2019}' => '\'',
                '\u{201C}' | '\u{201D}' => '"',
                c => c,
            })
            .collect()
    })
}

/// What is known of the patterns that match a line's message.
pub(crate) enum Want<'a> {
    /// Nothing: run the whole set.
    All,
    /// Only these (ascending) can match: the prefilter's answer.
    Among(&'a [usize]),
    /// These match: found ahead, by a chunk's worker (`scan_chunked`).
    Known(Vec<usize>),
}

/// A logger head rates the line a warning or worse: the prefilter, which reads only the message's
/// literals, must not skip it (`Prefilter::warns`, not `reach`).
pub(crate) fn head_warns(p: &log::Prefixed<'_>) -> bool {
    p.level.is_some_and(|l| l >= Level::Attn)
}

/// A line (or a record's part) as the matcher takes it.
pub(crate) struct LineRef<'a> {
    pub(crate) line: u64,
    pub(crate) raw: &'a str,
    pub(crate) msg: &'a str,
    pub(crate) rank: Option<u32>,
    pub(crate) host: Option<&'a str>,
    pub(crate) pid: Option<u32>,
    pub(crate) ts: Option<f64>,
    /// The level a logger head gave the line, over the one its text implies.
    pub(crate) level: Option<Level>,
    pub(crate) flags: Flags,
    pub(crate) symptom: bool,
    pub(crate) detail: Option<&'a str>,
}

/// `rank N nRanks M` of a communicator line that `rank_map_re` matched, read without running the
/// regex a second time for its groups (logs of many split communicators have one in seven lines).
pub(crate) fn rank_nranks(line: &str) -> Option<(u32, u32)> {
    let c = log::record::find(line.as_bytes(), b"comm 0x")?;
    let i = c + log::record::find(&line.as_bytes()[c..], b" rank ")?;
    let mut it = line[i + 6..].split(' ');
    let rank = it.next()?.parse().ok()?;
    let kw = it.next()?;
    if !kw.eq_ignore_ascii_case("nranks") {
        return None;
    }
    Some((rank, it.next()?.parse().ok()?))
}

/// A line as kept for evidence: at most `HIT_TEXT_MAX` bytes, cut on a character boundary and
/// marked as cut.
pub(crate) fn clip(line: &str) -> String {
    if line.len() <= HIT_TEXT_MAX {
        return line.to_string();
    }
    let mut end = HIT_TEXT_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [... {} more bytes]", &line[..end], line.len() - end)
}

/// The patterns as one Unicode set; every rule's together outgrow the regex crate's default size
/// limit (10 MB), which only bounds what compiling may take.
pub(crate) fn unicode_set(pats: &[String]) -> Result<RegexSet, regex::Error> {
    regex::RegexSetBuilder::new(pats).size_limit(1 << 28).dfa_size_limit(DFA_CACHE).build()
}

/// The lazy DFA's cache for the sets of every pattern. With the default (2 MiB) a set of all the
/// rules' patterns thrashes it on a long line and the regex crate falls back to its NFA, 100 times
/// slower: 96 lines of 1 MiB took over 600 s.
const DFA_CACHE: usize = 16 << 20;

/// An unlevelled metric or progress line (`val error 0.41`, `epoch 3 loss=0.2 error=0.1`, a tqdm
/// bar): its failure words are metric names followed by their values, not failures. A crash
/// printed onto the same line (tqdm ends its lines with a carriage return) keeps it a failure: once
/// the metric values are cut out, what is left must not read like one.
pub(crate) fn metric_or_progress(line: &str) -> bool {
    use std::sync::OnceLock;
    static RES: OnceLock<[Regex; 4]> = OnceLock::new();
    let [context, bar, value, exception] = RES.get_or_init(|| {
        [
            Regex::new(
                r"(?i)(?:^|[^a-z])(?:loss|acc|accuracy|epoch|step|iter|iteration|lr|grad_norm|val|valid|validation|train|training|eval|ppl|perplexity|top[15]|mae|mse|rmse|wer|cer|bleu|f1|auc|throughput)(?:[^a-z]|$)",
            )
            .unwrap(),
            Regex::new(r"\d{1,3}%\||\|\s*\d+/\d+\s*\[").unwrap(),
            Regex::new(r"(?i)\b(?:errors?|err)\s*[:=]?\s*[-+]?(?:\d|\.\d|nan\b|inf\b)[\w.+-]*")
                .unwrap(),
            Regex::new(r"\b[A-Z]\w*(?:Error|Exception)\b|Traceback").unwrap(),
        ]
    });
    if !(context.is_match(line) || bar.is_match(line)) || exception.is_match(line) || !value.is_match(line) {
        return false;
    }
    !log::looks_like_error(&value.replace_all(line, " "))
}

impl Engine {
    /// Whether `line` (the message the rule's patterns matched) is the last attempt a
    /// `last_attempt` rule counts: its `try` reached `max`. Such lines are few (a retry loop's), so
    /// the rule's own patterns are asked, as `matches_among` runs them.
    fn is_last_attempt(&self, rule: usize, line: &str) -> bool {
        let at_max = |t: &[u8], m: &[u8]| {
            let n = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok());
            matches!((n(t), n(m)), (Some(t), Some(m)) if t >= m)
        };
        let mut mine = self.slots.iter().enumerate().filter(|(_, s)| matches!(s, Slot::Rule(r) if *r == rule));
        mine.any(|(c, _)| match self.single(c) {
            Some(re) => re.captures(line.as_bytes()).is_some_and(|m| match (m.name("try"), m.name("max")) {
                (Some(t), Some(x)) => at_max(t.as_bytes(), x.as_bytes()),
                _ => false,
            }),
            // A pattern the byte form refuses (it names non-ASCII text): its Unicode form.
            None => {
                Regex::new(&self.pats[c]).ok().and_then(|re| {
                    let m = re.captures(line)?;
                    Some(at_max(m.name("try")?.as_str().as_bytes(), m.name("max")?.as_str().as_bytes()))
                }) == Some(true)
            }
        })
    }
}
