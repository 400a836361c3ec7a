//! Grouping hits under the rule that wins them, and one finding per rule.

use std::collections::{BTreeSet, HashMap};

use super::primary::earlier_hit;
use super::ranks::Ranks;
use super::state::{Hit, State, Who};
use super::{Engine, Options};
use crate::model::{Finding, Severity};
use crate::rules::catalog::{KnownClass, KnownMsg};

impl Engine {
    /// Whether a rule that fired excludes rule `r`.
    fn excluded(&self, r: usize, fired: &BTreeSet<usize>) -> bool {
        self.rules[r].def.excludes.iter().any(|id| fired.iter().any(|&x| self.rules[x].def.id == *id))
    }

    /// Every group's hits filed under the rule that wins it (version gates first, then
    /// requires/excludes against the rules that can fire); the rest are unexplained.
    pub(crate) fn group(&self, st: &mut State, allowed: &[bool], opts: &Options) -> Grouped {
        let winner = |cands: &[usize], fired: Option<&BTreeSet<usize>>| -> Option<usize> {
            cands.iter().copied().find(|&r| {
                allowed[r]
                    && fired.is_none_or(|f| {
                        let d = &self.rules[r].def;
                        d.requires.iter().all(|id| f.iter().any(|&x| self.rules[x].def.id == *id))
                            && !self.excluded(r, f)
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
                    a.loud += g.loud;
                    a.who.extend(g.who);
                    a.hits.extend(g.sample);
                    a.hits.extend(g.earliest_ts);
                }
                None if cands.iter().any(|&r| allowed[r] && self.excluded(r, &fired0)) => {
                    // A rule that fired explains these lines better (an interrupt explains the cleanup).
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
    pub(crate) fn findings(&self, accs: HashMap<usize, Acc>, st: &State, ranks: &Ranks, opts: &Options) -> Vec<Cand> {
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
            let leads = |h: &&Hit| d.lead_text.iter().any(|t| h.text.contains(t.as_str()));
            let lead = if d.lead_last { a.hits.iter().rfind(leads) } else { a.hits.iter().find(leads) };
            let head = lead.unwrap_or(&first);
            let mut ev: Vec<&Hit> =
                a.hits.iter().filter(|h| h.source == head.source && h.line == head.line).take(1).collect();
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
            rank_set.extend(named_ranks(&d.patterns, &a.hits));
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
            if let Some(n) = laggards(&a.hits, ranks) {
                finding.add_context(n);
            }
            if let Some(n) = a.hits.iter().find_map(|h| h.leveled).and_then(|id| self.sites().level_note(id)) {
                finding.add_context(n);
            }
            known_finding(&mut finding, &a.hits);
            out.push(Cand {
                finding,
                first,
                rule: r,
                priority: d.priority,
                wrapper: d.wrapper,
                // A rule's own symptoms, and findings whose every line the record marks as a
                // consequence (a chained exception, an error restated by its `Last error:`).
                symptom: d.symptom || (a.causes == 0 && !ignored_only),
                demotable: d.demote_on_failure || ignored_only,
                precursor: !d.precursor_of.is_empty(),
                lead: false,
                undecided: false,
                chatter: a.loud == 0,
            });
        }
        // Display order: where each finding first appears.
        out.sort_by(|a, b| {
            st.canon(&a.first).cmp(&st.canon(&b.first)).then_with(|| a.finding.rule.cmp(&b.finding.rule))
        });
        out
    }
}

/// The ranks that fell behind in a hang: torch's watchdog prints each rank's `last enqueued
/// [NCCL] work: N`; a rank whose number is below the others' never issued the collective they wait
/// in (it is stuck elsewhere, or took another path), so it is the one to look at.
fn laggards(hits: &[Hit], ranks: &Ranks) -> Option<String> {
    // Work numbers count per process group: `[PG ID 2 PG GUID 9 Rank 4]` (2.4+), `[PG 1 Rank 0]`.
    let pg_of = |t: &str| -> String {
        let Some(i) = t.find("[PG ") else { return String::new() };
        let rest = t[i + 4..].strip_prefix("ID ").unwrap_or(&t[i + 4..]);
        rest.split([' ', ']']).next().unwrap_or("").to_string()
    };
    let mut last: std::collections::BTreeMap<(String, u32), u64> = std::collections::BTreeMap::new();
    for h in hits {
        let Some(i) = h.text.find("last enqueued ") else { continue };
        let rest = &h.text[i..];
        let Some(j) = rest.find("work: ") else { continue };
        let n: String = rest[j + 6..].chars().take_while(char::is_ascii_digit).collect();
        let (Ok(n), Some(r)) = (n.parse::<u64>(), ranks.of(h)) else { continue };
        let e = last.entry((pg_of(&h.text), r)).or_insert(n);
        *e = (*e).max(n);
    }
    // The first process group whose ranks disagree.
    let pg = last.keys().map(|(pg, _)| pg.clone()).find(|pg| {
        let mut ns = last.iter().filter(|((p, _), _)| p == pg).map(|(_, &n)| n);
        let first = ns.next();
        ns.any(|n| Some(n) != first)
    })?;
    let last: std::collections::BTreeMap<u32, u64> =
        last.into_iter().filter(|((p, _), _)| *p == pg).map(|((_, r), n)| (r, n)).collect();
    let (lo, hi) = (*last.values().min()?, *last.values().max()?);
    let behind: Vec<String> = last.iter().filter(|(_, &n)| n == lo).map(|(r, _)| r.to_string()).collect();
    let ahead = last.values().filter(|&&n| n > lo).count();
    let group = if pg.is_empty() { String::new() } else { format!("in process group {pg}, ") };
    Some(format!(
        "{group}rank{} {} last enqueued work {lo} while {ahead} other rank(s) reached {hi}: {} behind (never issued \
         the collective the others wait in), so look at {} first",
        if behind.len() == 1 { "" } else { "s" },
        behind.join(", "),
        if behind.len() == 1 { "it fell" } else { "they fell" },
        if behind.len() == 1 { "its stack and last output" } else { "their stacks and last output" },
    ))
}

/// Ranks a rule's lines name in their text (`(?P<rank>..)`, `(?P<ranks>3, 5)` groups: Flight
/// Recorder's "rank 3 never joined", a stack's `rank=0`): the ranks the finding is about.
fn named_ranks(patterns: &[String], hits: &[Hit]) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for p in patterns.iter().filter(|p| p.contains("(?P<rank>") || p.contains("(?P<ranks>")) {
        let Ok(re) = regex::Regex::new(p) else { continue };
        for h in hits {
            // The text is the line as read: a pattern anchored at `^` may need its prefix gone.
            let text = crate::log::strip_prefixes(&h.text).rest;
            let Some(c) = re.captures(text).or_else(|| re.captures(&h.text)) else { continue };
            for name in ["rank", "ranks"] {
                let Some(m) = c.name(name) else { continue };
                out.extend(
                    m.as_str().split(|c: char| c == ',' || c.is_whitespace()).filter_map(|t| t.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// A finding of a catalogued message's class (rules/known-sites.toml): its title names the libraries
/// of the messages seen, its context what the catalogue says of them.
fn known_finding(finding: &mut Finding, hits: &[Hit]) {
    let Some(k) = crate::rules::catalog::Known::builtin().ok() else { return };
    let mut ids: Vec<u32> = hits.iter().filter_map(|h| h.known).collect();
    ids.dedup();
    let msgs: Vec<&KnownMsg> = ids.iter().filter_map(|&i| k.get(i)).collect();
    let Some(first) = msgs.first() else { return };
    let mut libs: Vec<&str> = Vec::new();
    for m in &msgs {
        if !libs.contains(&m.lib_name()) {
            libs.push(m.lib_name());
        }
    }
    // The rule's class: a notice printed at error level is read as an error (Engine::known_site).
    let class = KnownClass::ALL.into_iter().find(|c| c.rule_id() == finding.rule).unwrap_or(first.class);
    let tail = match class {
        KnownClass::Error => ", with no rule of its own",
        KnownClass::Teardown => ", harmless on a run that completed",
        _ => ", not a failure",
    };
    let plural = if ids.iter().collect::<BTreeSet<_>>().len() > 1 { "s" } else { "" };
    finding.title = format!("A known {} {}{plural}{tail}", libs.join(" and "), class.words());
    finding.add_context(first.where_text());
    if class != first.class {
        finding.add_context(format!(
            "printed at error level: read as an error, though the catalogue files the message as a {}",
            first.class.words()
        ));
    }
}

/// A finding while it is arbitrated.
pub(crate) struct Cand {
    pub(crate) finding: Finding,
    /// Its earliest (causal) hit.
    pub(crate) first: Hit,
    pub(crate) rule: usize,
    pub(crate) priority: i32,
    /// The rule's wrapper level (`wrapper`): 0 a cause, 1 an effect, 2 a generic banner.
    pub(crate) wrapper: u8,
    pub(crate) symptom: bool,
    /// Benign noise that a failure in the run turns into a symptom.
    pub(crate) demotable: bool,
    pub(crate) precursor: bool,
    /// A precursor whose downstream failure fired: it is the cause.
    pub(crate) lead: bool,
    /// Harmless only if the run finished, and the log does not say whether it did: `unknown`.
    pub(crate) undecided: bool,
    /// Every line of it is INFO or TRACE chatter (`Hit::chatter`).
    pub(crate) chatter: bool,
}

impl Cand {
    pub(crate) fn actionable(&self) -> bool {
        !self.finding.benign && self.finding.severity >= Severity::Warning
    }
}

#[derive(Default)]
pub(crate) struct Acc {
    pub(crate) count: u64,
    pub(crate) causes: u64,
    pub(crate) ignored: u64,
    pub(crate) loud: u64,
    pub(crate) hits: Vec<Hit>,
    pub(crate) who: BTreeSet<Who>,
}

pub(crate) struct Grouped {
    pub(crate) accs: HashMap<usize, Acc>,
    pub(crate) unexplained: Vec<Hit>,
    pub(crate) extra_unexplained: u64,
}
