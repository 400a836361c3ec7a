//! How the run ended, and what that does to rules that are benign only on success.

use super::findings::Cand;
use super::primary::happened_before;
use super::ranks::Ranks;
use super::state::{Hit, State};
use super::{Engine, OUTCOME_SHOWN};
use crate::model::{OutcomeReport, RunOutcome, Severity};
use crate::rules::schema::Outcome;

impl Engine {
    /// How the run ended, from the run's own markers only: a failure marker makes it `failed`,
    /// success markers without one `succeeded`, neither `unknown`. The warnings being judged never
    /// decide it (an error finding makes the verdict actionable, not the outcome failed).
    pub(crate) fn outcome(&self, st: &State, ranks: &Ranks) -> OutcomeReport {
        let of = |o: Outcome| {
            let mut v: Vec<&Hit> = st.outcomes.iter().filter(|(x, _)| *x == o).map(|(_, h)| h).collect();
            v.sort_by(|a, b| st.canon(a).cmp(&st.canon(b)));
            v.into_iter().take(OUTCOME_SHOWN).map(|h| st.evidence_of(h, ranks.of(h))).collect::<Vec<_>>()
        };
        let (success, failure) = (of(Outcome::Succeeded), of(Outcome::Failed));
        let (status, evidence) = match (failure.first(), success.first()) {
            (Some(f), _) => (RunOutcome::Failed, vec![f.clone()]),
            (None, Some(s)) => (RunOutcome::Succeeded, vec![s.clone()]),
            (None, None) => (RunOutcome::Unknown, Vec::new()),
        };
        OutcomeReport {
            status,
            evidence,
            success,
            failure,
            success_markers: st.outcome_counts.0,
            failure_markers: st.outcome_counts.1,
        }
    }

    /// On a run seen to succeed, a teardown-kind message (a rule with `after_success`) printed
    /// after its input's last success marker is read against that outcome: the work was done,
    /// what happened is a rank leaving while a peer still held a connection, and it is benign.
    pub(crate) fn after_success(&self, findings: &mut [Cand], st: &State, outcome: RunOutcome) {
        if outcome != RunOutcome::Succeeded {
            return;
        }
        for c in findings.iter_mut() {
            let Some(meaning) = &self.rules[c.rule].def.after_success else { continue };
            // Line order decides only within a log of one input; across inputs only timestamps do
            // (which hit is first must not depend on the order the inputs were given in).
            let single = st.names.len() == 1;
            let last = if single {
                st.last_success.get(&c.first.source)
            } else {
                st.last_success
                    .values()
                    .filter(|h| h.ts.is_some() && c.first.ts.is_some())
                    .max_by(|a, b| a.ts.partial_cmp(&b.ts).unwrap_or(std::cmp::Ordering::Equal))
            };
            let Some(last) = last.filter(|l| happened_before(l, &c.first) == Some(true)) else { continue };
            let at = st.at(last);
            c.finding.benign = true;
            c.demotable = true;
            c.finding.context = Some(format!("printed after the run's last success marker ({at}): {}", meaning.trim()));
        }
    }

    /// Teardown-kind noise (`teardown`) on a log that shows neither success nor failure: it may
    /// be the tail of a run that worked or of one that failed, so it decides nothing: `unknown`.
    pub(crate) fn teardown_undecided(&self, findings: &mut [Cand], outcome: RunOutcome) {
        if outcome != RunOutcome::Unknown {
            return;
        }
        for c in findings.iter_mut().filter(|c| c.finding.benign && self.rules[c.rule].def.teardown) {
            c.undecided = true;
            c.finding.benign = false;
            c.finding.context = Some(
                "looks like teardown noise, but the log does not show the run finishing (no success or failure \
                 marker): check the job's exit status and its last output"
                    .into(),
            );
        }
    }

    /// A retry or wait followed by the line that shows it succeeded (`resolved_by`, e.g. the store
    /// client that connected after retrying) is one harmless record, whatever else the run shows.
    pub(crate) fn resolved(&self, findings: &mut [Cand], st: &State) {
        for c in findings.iter_mut() {
            let done = st
                .resolved
                .iter()
                .filter(|(r, _)| *r == c.rule)
                .map(|(_, h)| h)
                .find(|h| happened_before(&c.first, h) == Some(true));
            let Some(h) = done else { continue };
            let at = st.at(h);
            c.finding.benign = true;
            c.finding.severity = c.finding.severity.min(Severity::Info);
            c.demotable = false;
            c.symptom = false;
            c.finding.context =
                Some(format!("it then succeeded ({at}: `{}`): a retry that worked, not a failure", h.text));
        }
    }

    /// The other side of `resolved`: a retry loop whose last attempt (`last_attempt`) no success
    /// follows ran out of retries; a wait (`unresolved`) that nothing ended on a run not seen to
    /// succeed is still waiting where the log stops. Either is a failure, however quiet its level.
    pub(crate) fn unresolved(&self, findings: &mut [Cand], st: &State, ranks: &Ranks, outcome: RunOutcome) {
        let ended = |rule: usize, after: &Hit| {
            st.resolved.iter().any(|(r, h)| *r == rule && happened_before(after, h) == Some(true))
        };
        for c in findings.iter_mut() {
            let d = &self.rules[c.rule].def;
            let last = st.exhausted.iter().filter(|(r, _)| *r == c.rule).map(|(_, h)| h).find(|h| !ended(c.rule, h));
            let why = match (last, &d.unresolved) {
                (Some(h), _) if d.last_attempt => {
                    // The last attempt leads the evidence: it is what makes this a failure.
                    let ev = &mut c.finding.evidence;
                    let n = ev.len();
                    ev.retain(|e| !(e.line == h.line && Some(&e.source) == st.names.get(h.source)));
                    ev.insert(0, st.evidence_of(h, ranks.of(h)));
                    ev.truncate(n.max(1));
                    let at = st.at(h);
                    format!("the last attempt ({at}) and no line after it shows success: the retries ran out")
                }
                (_, Some(meaning)) if outcome != RunOutcome::Succeeded && !ended(c.rule, &c.first) => {
                    meaning.trim().to_string()
                }
                _ => continue,
            };
            c.finding.benign = false;
            c.finding.severity =
                c.finding.severity.max(if d.last_attempt { Severity::Error } else { Severity::Warning });
            c.demotable = false;
            c.chatter = false;
            c.finding.context = Some(why);
        }
    }

    /// `needs_success` and `success_seen` rules: benign only on a run seen to succeed.
    /// An error finding of another rule reads as a failure here too (it is why the optional
    /// transport matters), though it does not decide the run's outcome.
    pub(crate) fn apply_outcome(&self, findings: &mut [Cand], outcome: RunOutcome) {
        let conditional = |c: &Cand| self.rules[c.rule].def.needs_success || self.rules[c.rule].def.success_seen;
        let error_elsewhere = findings
            .iter()
            .any(|c| !conditional(c) && !c.precursor && c.actionable() && c.finding.severity >= Severity::Error);
        let outcome = if error_elsewhere { RunOutcome::Failed } else { outcome };
        for c in findings.iter_mut().filter(|c| conditional(c)) {
            match outcome {
                RunOutcome::Succeeded => {}
                RunOutcome::Failed => {
                    c.finding.benign = false;
                    c.finding.severity = c.finding.severity.max(Severity::Warning);
                    c.symptom = true;
                    c.finding.context = Some("the run failed, so this is not the harmless case: it may be why".into());
                }
                RunOutcome::Unknown if self.rules[c.rule].def.success_seen => {
                    c.finding.benign = false;
                    c.finding.severity = c.finding.severity.max(Severity::Warning);
                    c.finding.context = Some(
                        "harmless only if the run completed, and the log shows neither a success nor a failure \
                         line: check the job's exit status and last output"
                            .into(),
                    );
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
}
