//! One writer per format of the result model (`crate::model`): text (colour, tables), Markdown (paste-ready,
//! redacted), JSON (the contract).
pub mod color;
pub mod env;
pub mod explain_ci;
pub mod explain_md;
pub mod explain_text;
pub mod lint;
pub mod markdown;
pub mod redact;
pub mod report;
pub mod repro;
pub mod rules;
pub mod workflow;

use std::io::Write as _;

use serde::Serialize;

use crate::model::env::EnvReport;
use crate::model::{Analysis, LintReport};
use markdown::Md;
use redact::Redactor;

/// The formats a document can be written in (each command's flags offer those it supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Md,
    Json,
    /// SARIF 2.1.0 (lint).
    Sarif,
    /// GitHub Actions workflow commands (explain, lint).
    Github,
    /// JUnit XML (explain).
    Junit,
}

/// What the command layer decided about the output, so no writer sees a flag.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub format: Format,
    /// Replace hostnames, addresses, home paths (Markdown; JSON and text keep them).
    pub redact: bool,
    /// Evidence lines of the primary finding.
    pub evidence: usize,
    /// Evidence lines of every other finding (`--evidence N` sets both; by default fewer).
    pub evidence_others: usize,
    /// Table width in columns (None: the terminal's, or unbounded off a terminal).
    pub width: Option<u16>,
    /// Text: everything in full (`-v`); otherwise a short report within 100 columns.
    pub verbose: bool,
}

impl Options {
    pub fn new(format: Format) -> Options {
        Options { format, redact: true, evidence: 5, evidence_others: 2, width: None, verbose: false }
    }
}

/// A result the program writes, one writer per format: the exporter shape, with JSON (serde,
/// the contract) written once for every model.
pub trait Document: Serialize {
    fn text(&self, o: &Options) -> String;
    /// Markdown through `md`, the document's one redactor (a section of `report` shares it).
    fn markdown(&self, o: &Options, md: &mut Md) -> String;
    /// The redactor this document starts with (one that already knows this machine's name, say).
    fn redactor(&self) -> Redactor {
        Redactor::new()
    }
    fn sarif(&self) -> Option<serde_json::Value> {
        None
    }
    fn github(&self) -> Option<String> {
        None
    }
    fn junit(&self) -> Option<String> {
        None
    }
}

/// `d` in the format `o` names.
pub fn render<D: Document + ?Sized>(d: &D, o: &Options) -> anyhow::Result<String> {
    Ok(match o.format {
        Format::Text => d.text(o),
        Format::Md => {
            let mut red = d.redactor();
            d.markdown(o, &mut Md::new(o.redact.then_some(&mut red)))
        }
        Format::Json => json(d),
        Format::Sarif => json(&d.sarif().ok_or_else(|| anyhow::anyhow!("this document has no SARIF form"))?),
        Format::Github => d.github().ok_or_else(|| anyhow::anyhow!("this document has no GitHub Actions form"))?,
        Format::Junit => d.junit().ok_or_else(|| anyhow::anyhow!("this document has no JUnit form"))?,
    })
}

/// Pretty JSON with a final newline: every JSON document the program prints.
pub fn json<T: Serialize + ?Sized>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("the result models always serialise");
    s.push('\n');
    s
}

/// `json(v)` written to stdout as it is made: a large report (lint of a thousand files: 40 MB of
/// JSON) is not held a second time as one string.
pub fn print_json<T: Serialize + ?Sized>(v: &T) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, v).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Write a finished document to stdout. Not print!: a closed pipe must be an error that maps to
/// exit 0, not a panic.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

impl Document for Analysis {
    fn text(&self, o: &Options) -> String {
        explain_text::render(self, o)
    }
    fn markdown(&self, o: &Options, md: &mut Md) -> String {
        explain_md::write(self, o, md)
    }
    fn github(&self) -> Option<String> {
        Some(explain_ci::github(self))
    }
    fn junit(&self) -> Option<String> {
        Some(explain_ci::junit(self))
    }
}

impl Document for EnvReport {
    fn text(&self, _: &Options) -> String {
        env::text(self)
    }
    fn markdown(&self, _: &Options, md: &mut Md) -> String {
        env::markdown(self, 2, md)
    }
    fn redactor(&self) -> Redactor {
        env::redactor_for(self)
    }
}

impl Document for LintReport {
    fn text(&self, _: &Options) -> String {
        lint::text(self)
    }
    fn markdown(&self, _: &Options, _: &mut Md) -> String {
        lint::markdown(self)
    }
    fn sarif(&self) -> Option<serde_json::Value> {
        Some(lint::sarif(self))
    }
    fn github(&self) -> Option<String> {
        Some(lint::github(self))
    }
}

impl Document for [rules::RuleRow<'_>] {
    fn text(&self, o: &Options) -> String {
        rules::text(self, o.width)
    }
    fn markdown(&self, _: &Options, _: &mut Md) -> String {
        rules::markdown(self)
    }
}

/// Whether a log line already starts with its rank (torch's `[rank2]:`, `[rank 2]`), so a writer
/// does not say it twice.
pub(crate) fn says_rank(text: &str, rank: u32) -> bool {
    let t = text.trim_start();
    let Some(rest) = t.strip_prefix("[rank").or_else(|| t.strip_prefix("[Rank")) else { return false };
    rest.trim_start().strip_prefix(&rank.to_string()).is_some_and(|r| r.starts_with(']'))
}
