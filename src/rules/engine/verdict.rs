//! Demotion of teardown noise when the run failed, and the verdict.

use super::findings::Cand;
use super::Engine;
use crate::model::{RunOutcome, Severity, Verdict};

impl Engine {
    /// Any failure in the run (a cause, a symptom such as a non-zero exit, a failure marker)
    /// turns teardown noise into symptoms of it.
    pub(crate) fn demote(&self, findings: &mut [Cand], primary_idx: Option<usize>, outcome: RunOutcome) {
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
}

/// Actionable beats unknown (an unexplained warning, or input not read whole), unknown beats
/// benign; clean is earned: readable input with no warning at all.
pub(crate) fn verdict(findings: &[Cand], total_unexplained: u64, unread: bool) -> Verdict {
    let any_actionable = findings.iter().any(|c| c.actionable());
    if any_actionable {
        Verdict::Actionable
    } else if total_unexplained > 0 || unread {
        Verdict::Unknown
    } else if !findings.is_empty() {
        Verdict::Benign
    } else {
        Verdict::Clean
    }
}
