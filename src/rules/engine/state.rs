//! What reading keeps: hits, their groups, each source's state, and the merge of inputs read apart.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use regex::Regex;

use super::versions::{add_version, offer_version};
use super::Caps;
use crate::log;
use crate::log::records::Assembler;
use crate::model::{Evidence, InputSummary, Unexplained};
use crate::rules::schema::{Outcome, Phase};

#[derive(Debug, Clone, Default)]
pub(crate) struct Hit {
    pub(crate) source: usize,
    pub(crate) line: u64,
    pub(crate) order: u64,
    pub(crate) rank: Option<u32>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) ts: Option<f64>,
    pub(crate) text: String,
    /// `level_of` rated the line a warning or an error (or it reads like a failure).
    pub(crate) warn: bool,
    /// The line's level is INFO or TRACE by its own word or head (not merely unlevelled).
    pub(crate) chatter: bool,
    /// The record makes this line a consequence: a chained exception, an error line whose
    /// `Last error:` payload names the failing call.
    pub(crate) symptom: bool,
    /// An exception Python printed as `Exception ignored in:` (it ended nothing).
    pub(crate) ignored: bool,
    /// A launcher's own line (torchrun's agent): never attributed to a rank by its file.
    pub(crate) launcher: bool,
    /// What the record adds (innermost frame, backtrace libraries, the restated error).
    pub(crate) detail: Option<String>,
    /// The catalogue entry of a message whose level differs by release (its level here).
    pub(crate) leveled: Option<u32>,
    /// The catalogued message (rules/catalog/known.toml) of a line no rule reads.
    pub(crate) known: Option<u32>,
}

/// Maps and sets asked on every filed line: a fast hash (the keys are no attacker's choice to flood).
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The low bits of a `proc_key`: Linux pids fit 22 bits (PID_MAX_LIMIT).
const PID_BITS: u32 = 22;

/// A process as the rank map keys it: a hash of its host above its pid, in one u64, so that the
/// map of a million-rank job holds 16 bytes an entry, not a host name each. FNV-1a: the same key
/// in every thread's state, so their maps merge. Two hosts share a key only when their 42-bit
/// hashes collide and the pids are equal.
pub(crate) fn proc_key(host: &str, pid: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h << PID_BITS) ^ u64::from(pid)
}

/// The pid bits of a `proc_key`.
pub(crate) fn pid_of_key(key: u64) -> u32 {
    (key & ((1 << PID_BITS) - 1)) as u32
}

/// (rank, host, pid, source, launcher) of the lines of a group, for its ranks list.
pub(crate) type Who = (Option<u32>, Option<String>, Option<u32>, usize, bool);

#[derive(Default)]
pub(crate) struct Group {
    pub(crate) count: u64,
    /// Hits the record does not mark as consequences (`Hit::symptom`) or as ignored.
    pub(crate) causes: u64,
    pub(crate) ignored: u64,
    /// Hits that are warnings or errors (those count as unexplained when every rule is gated out).
    pub(crate) warns: u64,
    /// Hits that are not INFO/TRACE chatter (`Hit::chatter`): with none, a harmless finding leaves
    /// the log `clean`.
    pub(crate) loud: u64,
    /// The first warnings past `sample`, so that they can be listed as unexplained too.
    pub(crate) warn_sample: Vec<Hit>,
    pub(crate) sample: Vec<Hit>,
    pub(crate) earliest_ts: Option<Hit>,
    /// Distinct (rank, host, pid, source) that produced hits, for the ranks list.
    pub(crate) who: FastSet<Who>,
    /// The same, in the order first seen (what `merge` needs to respect the cap as `add` does).
    pub(crate) who_seq: Vec<Who>,
    /// Like `earliest_ts` but over hits with a number for a time (`merge` needs it: a NaN time,
    /// once earliest, is never replaced).
    pub(crate) earliest_num: Option<Hit>,
}

impl Group {
    pub(crate) fn add(&mut self, c: &Caps, h: Hit) {
        self.count += 1;
        self.causes += u64::from(!h.symptom && !h.ignored);
        self.ignored += u64::from(h.ignored);
        self.warns += u64::from(h.warn);
        self.loud += u64::from(!h.chatter);
        if self.who.len() < c.who {
            let w = (h.rank, h.host.clone(), h.pid, h.source, h.launcher);
            if !self.who.contains(&w) {
                self.who.insert(w.clone());
                self.who_seq.push(w);
            }
        }
        if self.sample.len() >= c.sample {
            self.after_sample(c, &h);
        }
        if self.sample.len() < c.sample {
            self.sample.push(h);
        }
    }

    /// A hit that came once the sample was full.
    pub(crate) fn after_sample(&mut self, c: &Caps, h: &Hit) {
        if self.warn_kept(c, h.warn) {
            self.warn_sample.push(h.clone());
        }
        if self.earliest_kept(h.ts) {
            self.earliest_ts = Some(h.clone());
        }
        if self.earliest_num_kept(h.ts) {
            self.earliest_num = Some(h.clone());
        }
    }

    /// Whether `add` keeps more of a hit with this level and time than its counts and origin (in
    /// the sample or as an earliest one): if not, the caller need not copy its text.
    pub(crate) fn keeps(&self, c: &Caps, warn: bool, ts: Option<f64>) -> bool {
        self.sample.len() < c.sample || self.warn_kept(c, warn) || self.earliest_kept(ts) || self.earliest_num_kept(ts)
    }

    fn warn_kept(&self, c: &Caps, warn: bool) -> bool {
        warn && self.warn_sample.len() < c.sample
    }

    fn earliest_kept(&self, ts: Option<f64>) -> bool {
        ts.is_some() && self.earliest_ts.as_ref().is_none_or(|e| ts < e.ts)
    }

    fn earliest_num_kept(&self, ts: Option<f64>) -> bool {
        ts.is_some_and(|t| !t.is_nan()) && self.earliest_num.as_ref().is_none_or(|e| ts < e.ts)
    }

    /// Append `o`, the group of a later input (hit orders already shifted): the same group as
    /// `add` would have made from this group's hits followed by `o`'s.
    pub(crate) fn merge(&mut self, c: &Caps, o: Group) {
        self.count += o.count;
        self.causes += o.causes;
        self.ignored += o.ignored;
        self.warns += o.warns;
        self.loud += o.loud;
        for w in o.who_seq {
            if self.who.len() < c.who && self.who.insert(w.clone()) {
                self.who_seq.push(w);
            }
        }
        for h in o.sample {
            if self.sample.len() < c.sample {
                self.sample.push(h);
            } else {
                self.after_sample(c, &h);
            }
        }
        // `o`'s warnings past its own sample came after every hit of its sample.
        for h in o.warn_sample {
            if self.warn_sample.len() < c.sample {
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

pub(crate) struct SourceState {
    pub(crate) idx: usize,
    pub(crate) phase: Option<Phase>,
    pub(crate) ranks: BTreeSet<u32>,
    pub(crate) lines: u64,
    pub(crate) records: Assembler,
    /// The start of an `NCCL version` line cut at its end (see `version_tail`).
    pub(crate) version_tail: Option<String>,
    /// The logger head of the last line that had one, and that line's number (see `Prefixed::level`).
    pub(crate) last_head: (u64, String),
}

impl SourceState {
    pub(crate) fn new(idx: usize) -> SourceState {
        SourceState {
            idx,
            phase: None,
            ranks: BTreeSet::new(),
            lines: 0,
            records: Assembler::default(),
            version_tail: None,
            last_head: (0, String::new()),
        }
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) order: u64,
    pub(crate) groups: FastMap<Vec<usize>, Group>,
    pub(crate) unexplained: Vec<Hit>,
    pub(crate) unexplained_dropped: u64,
    pub(crate) templates: HashMap<String, (u64, Hit)>,
    pub(crate) nccl_versions: Vec<String>,
    pub(crate) torch_version: Option<String>,
    /// (host, pid) -> (rank, nranks) of the init lines, keyed by `proc_key`.
    pub(crate) rank_map: FastMap<u64, (u32, u32)>,
    /// `rank_map`'s keys in the order first seen (for `merge`: which keys the cap keeps must not
    /// depend on a hash map's order).
    pub(crate) rank_map_seq: Vec<u64>,
    pub(crate) sites: BTreeSet<(String, u32)>,
    /// `sites` in the order first seen (for `merge`).
    pub(crate) sites_seq: Vec<(String, u32)>,
    pub(crate) source_ranks: Vec<BTreeSet<u32>>,
    pub(crate) names: Vec<String>,
    pub(crate) inputs: Vec<InputSummary>,
    pub(crate) notes: Vec<String>,
    pub(crate) want_templates: bool,
    /// Outcome marker lines (at most `caps.outcome` per input).
    pub(crate) outcomes: Vec<(Outcome, Hit)>,
    /// Outcome markers seen in all: (succeeded, failed).
    pub(crate) outcome_counts: (u64, u64),
    /// Each input's last success marker: what a teardown message is read after.
    pub(crate) last_success: BTreeMap<usize, Hit>,
    pub(crate) unrelated: Vec<Hit>,
    pub(crate) unrelated_dropped: u64,
    /// Lines that resolve what a rule reports (`resolved_by`): (rule, the line), the first few per rule.
    pub(crate) resolved: Vec<(usize, Hit)>,
    /// A `last_attempt` rule's lines whose attempt count reached its maximum: (rule, the line).
    pub(crate) exhausted: Vec<(usize, Hit)>,
    /// Inputs cut short (the --max-bytes limit).
    pub(crate) unread: Vec<String>,
    pub(crate) caps: Caps,
}

impl State {
    /// An input that could not be read to its end (a truncated gzip or zstd stream): what was
    /// read stays, and the cut is listed as unexplained, so the verdict cannot be `clean`.
    pub(crate) fn cut_short(&mut self, source: usize, name: &str, after_line: u64, err: &dyn std::fmt::Display) {
        self.notes.push(format!("{name}: stopped reading after line {after_line}: {err}"));
        self.unexplained.push(Hit {
            source,
            line: after_line,
            text: format!("(the input ends here unread: {err}; what follows may hold the failure)"),
            warn: true,
            ..Hit::default()
        });
    }

    /// Record what reading one input left: its notes, its summary, the byte budget still open.
    pub(crate) fn end_source(
        &mut self,
        src: SourceState,
        name: String,
        reader: log::ReadStats,
        budget: &mut Option<u64>,
    ) {
        if reader.cut_lines > 0 {
            self.notes.push(format!("{name}: {} line(s) longer than 1 MiB were cut", reader.cut_lines));
        }
        if reader.hit_limit {
            self.notes.push(format!("{name}: stopped at the --max-bytes limit"));
            self.unread.push(format!("{name}: stopped at the --max-bytes limit; the rest was not read"));
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
    pub(crate) fn merge(&mut self, o: State) {
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
            self.groups.entry(cands).or_default().merge(&self.caps, g);
        }
        for h in o.unexplained {
            if self.unexplained.len() < self.caps.unexplained {
                self.unexplained.push(shift(h));
            } else {
                self.unexplained_dropped += 1;
            }
        }
        self.unexplained_dropped += o.unexplained_dropped;
        for (k, h) in o.outcomes {
            self.outcomes.push((k, shift(h)));
        }
        for (r, h) in o.exhausted {
            push_capped(&mut self.exhausted, self.caps.outcome, r, shift(h));
        }
        for (r, h) in o.resolved {
            push_capped(&mut self.resolved, self.caps.outcome, r, shift(h));
        }
        self.outcome_counts.0 += o.outcome_counts.0;
        self.outcome_counts.1 += o.outcome_counts.1;
        for (src, h) in o.last_success {
            self.last_success.insert(src, shift(h));
        }
        for h in o.unrelated {
            let h = shift(h);
            if self.unrelated.len() < self.caps.unrelated {
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
            } else if self.rank_map.len() < self.caps.rank_map {
                self.rank_map.insert(k, v);
                self.rank_map_seq.push(k);
            }
        }
        for s in o.sites_seq {
            if self.sites.len() < self.caps.sites && self.sites.insert(s.clone()) {
                self.sites_seq.push(s);
            }
        }
        self.source_ranks.extend(o.source_ranks);
        self.names.extend(o.names);
        self.inputs.extend(o.inputs);
        self.notes.extend(o.notes);
    }

    /// Where `h` sits in the inputs, as a key that does not depend on their order.
    pub(crate) fn canon<'s>(&'s self, h: &Hit) -> (&'s str, u64) {
        (self.names.get(h.source).map_or("", String::as_str), h.line)
    }

    pub(crate) fn evidence_of(&self, h: &Hit, rank: Option<u32>) -> Evidence {
        Evidence {
            source: self.names.get(h.source).cloned().unwrap_or_default(),
            line: h.line,
            rank,
            text: h.text.clone(),
            detail: h.detail.clone(),
            column: None,
        }
    }

    /// `file:line` of a hit, for the text of a finding's context.
    pub(crate) fn at(&self, h: &Hit) -> String {
        format!("{}:{}", self.names.get(h.source).map(String::as_str).unwrap_or("?"), h.line)
    }

    pub(crate) fn unexplained_of(&self, h: Hit) -> Unexplained {
        Unexplained { source: self.names.get(h.source).cloned().unwrap_or_default(), line: h.line, text: h.text }
    }

    pub(crate) fn add_exhausted(&mut self, rule: usize, h: Hit) {
        push_capped(&mut self.exhausted, self.caps.outcome, rule, h);
    }

    pub(crate) fn add_resolved(&mut self, rule: usize, h: Hit) {
        push_capped(&mut self.resolved, self.caps.outcome, rule, h);
    }

    pub(crate) fn add_outcome(&mut self, o: Outcome, h: &Hit) {
        match o {
            Outcome::Succeeded => {
                self.outcome_counts.0 += 1;
                self.last_success.insert(h.source, h.clone());
            }
            Outcome::Failed => self.outcome_counts.1 += 1,
        }
        if self.outcomes.iter().filter(|(_, x)| x.source == h.source).count() < self.caps.outcome {
            self.outcomes.push((o, h.clone()));
        }
    }

    pub(crate) fn add_unrelated(&mut self, h: Hit) {
        if self.unrelated.len() < self.caps.unrelated {
            self.unrelated.push(h);
        } else {
            self.unrelated_dropped += 1;
        }
    }

    pub(crate) fn add_unexplained(&mut self, h: Hit) {
        if self.want_templates {
            self.add_template(&h);
        }
        if self.unexplained.len() < self.caps.unexplained {
            self.unexplained.push(h);
        } else {
            self.unexplained_dropped += 1;
        }
    }

    pub(crate) fn add_template(&mut self, h: &Hit) {
        let t = template_of(&h.text);
        if let Some(e) = self.templates.get_mut(&t) {
            e.0 += 1;
        } else if self.templates.len() < self.caps.templates {
            self.templates.insert(t, (1, h.clone()));
        }
    }
}

/// A line with its variable parts masked: host:pid:tid prefixes, timestamps, addresses, numbers.
pub(crate) fn template_of(line: &str) -> String {
    use std::sync::OnceLock;
    static RES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        [
            (r"^\[\d{4}-\d\d-\d\d [\d:.]+\] ", ""),
            (r"^\S+:\d+:\d+ \[\d+\] ", "<host>:<pid>:<tid> [<dev>] "),
            // The severity letter stays: an `[F...]` line is no `[W...]` one.
            (r"^\[([IWEF])\d{4} [\d:.]+ ", "[$1<time> "),
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

/// Keeps the first `cap` lines of each rule in a (rule, line) list.
fn push_capped(v: &mut Vec<(usize, Hit)>, cap: usize, rule: usize, h: Hit) {
    if v.iter().filter(|(r, _)| *r == rule).count() < cap {
        v.push((rule, h));
    }
}
