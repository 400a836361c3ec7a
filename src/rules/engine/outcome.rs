//! How the run ended, and what that does to rules that are benign only on success.

use super::findings::Cand;
use super::ranks::Ranks;
use super::state::{Hit, State};
use super::Engine;
use crate::model::{OutcomeReport, RunOutcome, Severity};
use crate::rules::schema::Outcome;

impl Engine {
    /// How the run ended: failure markers or an actionable error finding make it `failed`;
    /// success markers without either, `succeeded`; neither, `unknown`.
    pub(crate) fn outcome(&self, st: &State, findings: &[Cand], ranks: &Ranks) -> OutcomeReport {
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

    /// `needs_success` and `success_seen` rules: benign only on a run seen to succeed.
    pub(crate) fn apply_outcome(&self, findings: &mut [Cand], outcome: RunOutcome) {
        for c in
            findings.iter_mut().filter(|c| self.rules[c.rule].def.needs_success || self.rules[c.rule].def.success_seen)
        {
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
