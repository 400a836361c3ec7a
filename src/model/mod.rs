//! The one result model of `explain`. Every writer (text, md, json) and every other command
//! (repro, report) reads this; its JSON form is the public contract in docs/json-contract.md.

use serde::{Deserialize, Serialize};

pub mod env;
pub mod markers;
pub mod run;
pub mod version;

/// The first lines of epdoctor's own documents: the writers start them so, and `explain` skips a
/// file that starts so (it would read its own findings as a log).
pub mod headings {
    pub const REPRO_MD: &str = "# epdoctor repro";
    pub const REPORT_MD: &str = "# epdoctor report";
    pub const EXPLAIN_MD: &str = "### epdoctor explain: ";
}

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Clean,
    Benign,
    Actionable,
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Benign => "benign",
            Verdict::Actionable => "actionable",
            Verdict::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Benign,
    Info,
    Warning,
    Error,
    Fatal,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Benign => "benign",
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
            Severity::Fatal => "fatal",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub source: String,
    pub line: u64,
    pub rank: Option<u32>,
    pub text: String,
    /// 1-based column (lint: where in the source line; absent for log lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    /// What the line's record adds: the innermost frame of a traceback, the libraries of a crash
    /// backtrace, the error a `Last error:` payload restates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: String,
    pub title: String,
    pub category: String,
    pub severity: Severity,
    pub benign: bool,
    pub ranks: Vec<u32>,
    pub count: u64,
    pub evidence: Vec<Evidence>,
    pub root_cause: String,
    pub fix: String,
    pub refs: Vec<String>,
    /// Why it applies here. explain: why a benign-by-default rule was reported as a symptom (absent
    /// when it was not); lint: what was found at this site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// lint: the torch versions the check applies to (absent: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
}

impl Finding {
    /// Adds one more reason to `context` (several readings can apply to one finding).
    pub fn add_context(&mut self, t: String) {
        self.context = Some(match self.context.take() {
            Some(old) => format!("{old}; {t}"),
            None => t,
        });
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unexplained {
    pub source: String,
    pub line: u64,
    pub text: String,
}

/// A group of unexplained lines that share a template (numbers, hex, hosts masked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    pub template: String,
    pub count: u64,
    pub example: Unexplained,
}

/// How a version was learnt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionNote {
    pub component: String,
    pub value: String,
    /// "stated" (a version line in the log), "assumed" (given by the caller), "inferred"
    /// (fingerprint of file:line or wording; `value` the releases as runs, `2.26.2-2.29.3, 2.30.7`)
    /// or "conflicting" (`value` "unknown": no one release prints every line seen; `detail` says
    /// which releases print each).
    pub how: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub schema_version: u32,
    pub tool_version: String,
    pub verdict: Verdict,
    pub nccl_version: Option<String>,
    pub torch_version: Option<String>,
    pub primary: Option<Finding>,
    pub findings: Vec<Finding>,
    pub unexplained: Vec<Unexplained>,
    /// Everything below is additive to the contract.
    #[serde(default)]
    pub versions: Vec<VersionNote>,
    #[serde(default)]
    pub inputs: Vec<InputSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexplained_templates: Option<Vec<Template>>,
    /// Notes about the input itself (cut lines, truncated compressed data, byte limit reached).
    #[serde(default)]
    pub notes: Vec<String>,
    /// How the run ended, from its success and failure markers and its findings.
    #[serde(default)]
    pub outcome: OutcomeReport,
    /// Python warnings from modules outside torch.distributed, NCCL, NVSHMEM and DeepEP.
    #[serde(default)]
    pub unrelated: Unrelated,
    /// Why part of the input was not read (empty, cut at --max-bytes, a truncated archive, a
    /// binary file): with any, the verdict is never `clean` or `benign`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
    /// Why the verdict is what it is, in one line (the verdict step's own words).
    #[serde(default)]
    pub reason: String,
    /// Inputs that are not one run (nothing ties them: `log::jobs`) are explained job by job, each
    /// here in input order; the fields above then sum them up (the worst job decides the verdict,
    /// the primary and the outcome; findings, unexplained lines and inputs are all the jobs').
    /// Empty when the input is one job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<Analysis>,
}

impl Analysis {
    /// The whole of several jobs' analyses (`jobs`, in input order; at least two). `unread`: what
    /// could not be read and belongs to no job: with any, no job's `clean` or `benign` stands for
    /// the whole.
    pub fn of_jobs(jobs: Vec<Analysis>, unread: Vec<String>) -> Analysis {
        // Actionable, then unknown, then benign, then clean; the earliest of equals.
        let rank = |v: Verdict| match v {
            Verdict::Actionable => 3,
            Verdict::Unknown => 2,
            Verdict::Benign => 1,
            Verdict::Clean => 0,
        };
        let worst = (0..jobs.len()).rev().max_by_key(|&i| rank(jobs[i].verdict)).unwrap_or(0);
        let mut a = jobs[worst].clone();
        let sources = |j: &Analysis| j.inputs.iter().map(|i| i.source.as_str()).collect::<Vec<_>>().join(", ");
        a.reason = format!(
            "{} jobs (nothing ties the files into one run); job {} ({}) decides: {}",
            jobs.len(),
            worst + 1,
            sources(&jobs[worst]),
            a.reason
        );
        if !unread.is_empty() && rank(a.verdict) < rank(Verdict::Unknown) {
            a.verdict = Verdict::Unknown;
            a.reason = format!("part of the input was not read; {}", a.reason);
        }
        a.findings.clear();
        a.unexplained.clear();
        a.inputs.clear();
        a.notes.clear();
        a.unread = unread;
        a.unrelated = Unrelated::default();
        let mut templates: Option<Vec<Template>> = None;
        for j in &jobs {
            a.findings.extend(j.findings.iter().cloned());
            a.unexplained.extend(j.unexplained.iter().cloned());
            a.inputs.extend(j.inputs.iter().cloned());
            a.notes.extend(j.notes.iter().cloned());
            a.unread.extend(j.unread.iter().cloned());
            a.unrelated.count += j.unrelated.count;
            a.unrelated.examples.extend(j.unrelated.examples.iter().cloned());
            if let Some(t) = &j.unexplained_templates {
                templates.get_or_insert_with(Vec::new).extend(t.iter().cloned());
            }
        }
        a.unexplained_templates = templates;
        a.jobs = jobs;
        a
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    Succeeded,
    Failed,
    #[default]
    Unknown,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
            RunOutcome::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OutcomeReport {
    pub status: RunOutcome,
    /// The line that decided it: the first failure marker, else the first success marker. Only
    /// markers of how the run ended decide, never the warnings being judged.
    pub evidence: Vec<Evidence>,
    /// Success markers (test summaries, DeepEP's passed lines, nccl-tests' footer, a finished
    /// training, every rank exiting 0, torchrun's SUCCEEDED), the first few in log order.
    #[serde(default)]
    pub success: Vec<Evidence>,
    /// Failure markers (a non-zero exit, a signal, a launcher's failure banner), the first few.
    #[serde(default)]
    pub failure: Vec<Evidence>,
    /// How many success and failure markers the log holds in all.
    #[serde(default)]
    pub success_markers: u64,
    #[serde(default)]
    pub failure_markers: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Unrelated {
    pub count: u64,
    pub examples: Vec<Unexplained>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSummary {
    pub source: String,
    pub lines: u64,
    pub bytes: u64,
    pub ranks: Vec<u32>,
}

/// The result of `lint`: findings over Python sources (one per site), in the same finding shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LintReport {
    pub schema_version: u32,
    pub tool_version: String,
    /// The torch release the checks were chosen for (`--torch`, the Python's torch, a lock file);
    /// absent when only a range (or nothing) is known.
    pub torch_version: Option<String>,
    pub files: Vec<String>,
    pub checks: Vec<String>,
    pub findings: Vec<Finding>,
    /// Files that do not parse, with where (they get no findings; the exit status is 2).
    pub errors: Vec<Evidence>,
    /// Where the torch version came from (`--torch`, the Python's torch, a project pin), or why
    /// it is unknown; absent when the files disagree (each finding then says its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_source: Option<String>,
    /// Mechanical fixes of findings (SARIF `fixes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixes: Vec<LintFix>,
}

/// An edit that fixes `findings[finding]` of a `LintReport`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LintFix {
    pub finding: usize,
    pub description: String,
    /// In the finding's file; positions are 1-based, columns in characters, end exclusive.
    pub replacements: Vec<LintEdit>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LintEdit {
    pub start_line: u64,
    pub start_column: u64,
    pub end_line: u64,
    pub end_column: u64,
    pub text: String,
}

/// Sorted, distinct numbers as runs: `[0, 1, 2, 3, 5]` -> `["0-3", "5"]` (ranks in every writer).
pub fn runs(sorted: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", sorted[i], sorted[j]) } else { sorted[i].to_string() });
        i = j + 1;
    }
    out
}
