//! The culprit: quiet precursors that lead, and the primary finding.

use super::findings::Cand;
use super::state::{Hit, State};
use super::Engine;
use crate::model::Severity;

impl Engine {
    /// Quiet precursors are silent alone; beside a downstream failure they name, they lead.
    pub(crate) fn precursors(&self, findings: &mut Vec<Cand>) {
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
}

impl Engine {
    /// A culprit that outranks the picked primary: the first finding whose rule leads over any
    /// primary (`"*"`), else the first that leads over the picked one (or over none).
    pub(crate) fn culprit(&self, findings: &[Cand], picked: Option<usize>) -> Option<usize> {
        let leads = |i: usize| &self.rules[findings[i].rule].def.leads_over;
        let over_any = (0..findings.len()).find(|&i| leads(i).iter().any(|r| r == "*"));
        over_any.or_else(|| {
            let victim = picked.map(|p| findings[p].finding.rule.as_str());
            (0..findings.len())
                .find(|&i| !leads(i).is_empty() && victim.is_none_or(|v| leads(i).iter().any(|r| r == v)))
        })
    }
}

/// Whether hit `a` happened before hit `b`, where that can be told: by timestamp when both lines
/// carry one (the clocks of ranks on one machine agree), else by line within one input; `None`
/// across inputs without times.
pub(crate) fn happened_before(a: &Hit, b: &Hit) -> Option<bool> {
    match (a.ts, b.ts) {
        (Some(x), Some(y)) if x != y => Some(x < y),
        _ if a.source == b.source && a.line != b.line => Some(a.line < b.line),
        _ => None,
    }
}

/// `happened_before`, with ties and the unknown broken by input position (the hits a finding
/// collects are sorted canonically first, so this never depends on the order of the inputs).
pub(crate) fn earlier_hit(a: &Hit, b: &Hit) -> bool {
    happened_before(a, b).unwrap_or(false)
}

/// The primary: the earliest causal failure; symptoms only when nothing else is actionable; a
/// precursor that names the cause of what fired leads; benign runs get the finding that explains
/// most. Without times across inputs, the causal class (rule priority) decides, then file name and
/// line, so the choice is the same for every order of the inputs.
pub(crate) fn primary(findings: &[Cand], st: &State) -> Option<usize> {
    let before = |x: usize, y: usize| -> bool {
        let (a, b) = (&findings[x], &findings[y]);
        happened_before(&a.first, &b.first)
            .unwrap_or_else(|| (-a.priority, st.canon(&a.first)) < (-b.priority, st.canon(&b.first)))
    };
    let pick = |c: &mut dyn Iterator<Item = usize>| c.reduce(|x, y| if before(y, x) { y } else { x });
    let mut actionable: Vec<usize> = (0..findings.len()).filter(|&i| findings[i].actionable()).collect();
    // A generic banner (wrapper level 2: std::terminate, a launcher's exception summary, a crash
    // banner) is the primary only when nothing else is actionable, its own wrapped cause included.
    let cause = |i: usize| findings[i].wrapper < 2 && findings[i].finding.severity >= Severity::Error;
    if actionable.iter().any(|&i| cause(i)) {
        actionable.retain(|&i| findings[i].wrapper < 2);
    }
    if let Some(i) = pick(&mut actionable.iter().copied().filter(|&i| findings[i].lead)) {
        return Some(i);
    }
    if !actionable.is_empty() {
        // Causes before effects before generic banners: a wrapper never outranks what it wraps.
        let level = actionable.iter().filter(|&&i| !findings[i].symptom).map(|&i| findings[i].wrapper).min();
        return pick(
            &mut actionable.iter().copied().filter(|&i| !findings[i].symptom && Some(findings[i].wrapper) == level),
        )
        .or_else(|| {
            // Only symptoms: the one closest to the cause (highest priority), then the earliest.
            let top = actionable.iter().map(|&i| findings[i].priority).max();
            pick(&mut actionable.iter().copied().filter(|&i| Some(findings[i].priority) == top))
        });
    }
    let top = findings.iter().map(|f| f.priority).max();
    pick(&mut (0..findings.len()).filter(|&i| Some(findings[i].priority) == top))
}

impl Engine {
    /// A reaction with no cause in sight: a generic banner as the primary (`wrapper = 2`: torchrun's
    /// SIGTERM of the other workers, a crash or exception summary), or, with nothing actionable at
    /// all, the run's first failure marker (a launcher's failure line, a fatal log line). An error
    /// line no rule reads is the likely cause: the message the reaction's record carries (C++
    /// terminate's `what():`), else the last one printed before it in the same input (or the marker
    /// itself). It becomes a finding of its own (`unexplained-cause`), the primary, and leaves the
    /// unexplained list. Returns its index.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn unexplained_cause(
        &self,
        findings: &mut Vec<Cand>,
        picked: Option<usize>,
        failed: Option<&Hit>,
        unexplained: &mut Vec<Hit>,
        st: &State,
        ranks: &super::ranks::Ranks,
        opts: &super::Options,
    ) -> Option<usize> {
        let rule = self.unexplained_cause?;
        let (reaction, why) = match picked.map(|i| &findings[i]) {
            Some(p) if p.actionable() && p.wrapper >= 2 => (
                &p.first,
                format!("`{}` (line {}), which reacts to a failure without naming it", p.finding.rule, p.first.line),
            ),
            _ if findings.iter().any(|c| c.actionable()) => return None,
            _ => {
                let m = failed?;
                (m, format!("the run's first failure marker (line {})", m.line))
            }
        };
        let errorish = |h: &Hit| {
            !h.chatter
                && (crate::log::record::level_of(&h.text) == crate::log::record::Level::Error
                    || crate::log::record::looks_like_error(&h.text))
        };
        // The message the reaction's own record carries (C++ terminate's `what():` line) names
        // the error best; else the last error line before the reaction.
        let payload = reaction.detail.as_deref().and_then(|d| d.strip_prefix("what(): ")).map(str::trim);
        let carried = |h: &Hit| {
            // A prefix: the hit's text may be clipped.
            payload.is_some_and(|w| {
                let w: String = w.chars().take(60).collect();
                !w.is_empty() && h.line > reaction.line && h.text.contains(&w)
            })
        };
        let at = unexplained.iter().position(|h| h.source == reaction.source && carried(h)).or_else(|| {
            unexplained.iter().rposition(|h| {
                h.source == reaction.source
                    && errorish(h)
                    && (happened_before(h, reaction) == Some(true) || h.line == reaction.line)
            })
        })?;
        let h = unexplained.remove(at);
        let acc = super::findings::Acc { count: 1, causes: 1, loud: 1, hits: vec![h], ..Default::default() };
        let mut c = self.findings(std::iter::once((rule, acc)).collect(), st, ranks, opts).pop()?;
        let place = if carried(&c.first) {
            format!("it is the message carried by {why}")
        } else if c.first.line == reaction.line {
            format!("it is {why} itself")
        } else {
            format!("it is the last error printed before {why}")
        };
        c.finding.add_context(format!("no rule reads this line; {place}, so it is the likely cause"));
        // Display order is where each finding first appears.
        let at = findings.iter().position(|f| st.canon(&f.first) > st.canon(&c.first)).unwrap_or(findings.len());
        findings.insert(at, c);
        Some(at)
    }
}
