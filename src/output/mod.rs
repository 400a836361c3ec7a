//! One writer per format of the result model (`crate::model`): text (colour, tables), Markdown (paste-ready,
//! redacted), JSON (the contract).
pub mod color;
pub mod env;
pub mod explain_md;
pub mod explain_text;
pub mod json;
pub mod lint;
pub mod markdown;
pub mod redact;
pub mod report;
pub mod repro;
pub mod rules;

use crate::cli::Format;
use crate::model::Analysis;

#[derive(Debug, Clone, Copy)]
pub struct RenderOpts {
    /// Replace hostnames, addresses, home paths (Markdown; JSON and text keep them unless set).
    pub redact: bool,
    /// Evidence lines of the primary finding.
    pub evidence: usize,
    /// Evidence lines of every other finding (`--evidence N` sets both; by default fewer).
    pub evidence_others: usize,
}

pub fn render(a: &Analysis, format: Format, opts: &RenderOpts) -> String {
    match format {
        Format::Text => explain_text::render(a, opts),
        Format::Md => explain_md::render(a, opts, &mut redact::Redactor::new()),
        Format::Json => json::render(a),
    }
}

/// Whether a log line already starts with its rank (torch's `[rank2]:`, `[rank 2]`), so a writer
/// does not say it twice.
pub(crate) fn says_rank(text: &str, rank: u32) -> bool {
    let t = text.trim_start();
    let Some(rest) = t.strip_prefix("[rank").or_else(|| t.strip_prefix("[Rank")) else { return false };
    rest.trim_start().strip_prefix(&rank.to_string()).is_some_and(|r| r.starts_with(']'))
}
