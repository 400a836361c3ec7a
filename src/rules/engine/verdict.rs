//! Demotion of teardown noise when the run failed, and the verdict.

use super::findings::Cand;
use super::Engine;
use crate::model::{Analysis, RunOutcome, Severity, Verdict};

impl Engine {
    /// Any failure in the run (a cause, a symptom such as a non-zero exit, a failure marker)
    /// turns teardown noise into symptoms of it.
    pub(crate) fn demote(&self, findings: &mut [Cand], primary_idx: Option<usize>, outcome: RunOutcome) {
        let cause = primary_idx.filter(|&i| findings[i].actionable() && !self.rules[findings[i].rule].def.left_behind);
        let cause = cause.map(|i| {
            let p = &findings[i].finding;
            (p.rule.clone(), p.evidence.first().map(|e| format!("{}:{}", e.source, e.line)).unwrap_or_default())
        });
        let why = match (&cause, outcome) {
            (Some((id, at)), _) => format!("the run also shows `{id}` ({at})"),
            (None, RunOutcome::Failed) => "the run failed (see its outcome)".to_string(),
            _ => return,
        };
        for c in findings.iter_mut() {
            if (c.finding.benign || c.undecided) && c.demotable {
                c.undecided = false;
                c.finding.benign = false;
                c.finding.severity = Severity::Warning;
                c.symptom = true;
                c.finding.context =
                    Some(format!("not teardown noise here: {why}; these lines are a consequence of that failure"));
            }
        }
    }
}

/// Actionable beats unknown (an unexplained warning, teardown noise on a run not seen to end, or
/// input not read whole), unknown beats benign; clean is earned: readable input with no
/// warning-level line (known INFO chatter, such as `Destroy COMPLETE`, is no warning; a warning
/// of an unrelated package is one, so such a log is benign).
pub(crate) fn verdict(findings: &[Cand], total_unexplained: u64, unrelated: u64, unread: bool) -> Verdict {
    let any_actionable = findings.iter().any(|c| c.actionable());
    if any_actionable {
        Verdict::Actionable
    } else if total_unexplained > 0 || unread || findings.iter().any(|c| c.undecided) {
        Verdict::Unknown
    } else if unrelated > 0 || findings.iter().any(|c| !c.chatter) {
        Verdict::Benign
    } else {
        Verdict::Clean
    }
}

/// The verdict's reason in one line: what decided it, from the same facts the verdict step used
/// (`undecided`: the teardown-kind rules that made it `unknown`; `left_behind`: the primary is
/// something the run left behind, told beside how it ended).
pub(crate) fn reason(a: &Analysis, undecided: &[String], left_behind: bool) -> String {
    let o = &a.outcome;
    let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    let run = match o.status {
        RunOutcome::Succeeded => format!("the run succeeded ({})", plural(o.success_markers, "success marker")),
        RunOutcome::Failed => format!("the run failed ({})", plural(o.failure_markers, "failure marker")),
        RunOutcome::Unknown => "the log shows no success or failure marker".to_string(),
    };
    let lines: u64 = a.findings.iter().map(|f| f.count).sum();
    match a.verdict {
        Verdict::Clean => {
            let read: u64 = a.inputs.iter().map(|i| i.lines).sum();
            let known = match &a.primary {
                Some(p) if lines > 0 => format!("; {} of known INFO chatter: {}", plural(lines, "line"), p.title),
                _ => String::new(),
            };
            format!(
                "no warning or error in {} of {}{known}",
                plural(read, "line"),
                plural(a.inputs.len() as u64, "input")
            )
        }
        Verdict::Benign if a.findings.is_empty() => {
            let n = a.unrelated.count;
            format!(
                "{run}; the {} {} from modules unrelated to distributed work (listed), not failures",
                plural(n, "warning"),
                if n == 1 { "is" } else { "are" }
            )
        }
        Verdict::Benign => {
            let what = a.primary.as_ref().map(|p| p.title.as_str()).unwrap_or("known noise");
            let how = if o.status == RunOutcome::Succeeded { "" } else { " (harmless by nature)" };
            format!(
                "{run}; the {} {} known noise{how}: {what}",
                plural(lines, "line"),
                if lines == 1 { "is" } else { "are" }
            )
        }
        Verdict::Actionable => match &a.primary {
            Some(p) => {
                let at = p.evidence.first().map(|e| format!(" ({}:{})", e.source, e.line)).unwrap_or_default();
                if left_behind {
                    format!("{run}, but it left something behind: `{}`{at}", p.rule)
                } else {
                    format!("`{}`{at} is the cause; {run}", p.rule)
                }
            }
            None => run,
        },
        Verdict::Unknown => {
            if let Some(u) = a.unread.first() {
                format!("part of the input was not read ({u}), so nothing can be said of it")
            } else if !a.unexplained.is_empty() {
                let n = a.unexplained.len() as u64;
                format!("{} that no rule explains (listed); {run}", plural(n, "warning or error line"))
            } else if let Some(id) =
                a.primary.as_ref().map(|p| &p.rule).filter(|r| undecided.contains(r)).or(undecided.first())
            {
                format!(
                    "looks like teardown noise (`{id}`), but the log does not show the run finishing: check the \
                     job's exit status"
                )
            } else {
                run
            }
        }
    }
}
