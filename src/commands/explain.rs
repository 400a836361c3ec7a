//! `explain`: input -> records -> matches -> verdict -> report.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Result;

use crate::cli::ExplainArgs;
use crate::error::Typed;
use crate::log;
use crate::model::Analysis;
use crate::output::{self as report, RenderOpts};
use crate::rules::{self, Options};

/// Explain logs at `paths` (files, folders of per-rank logs, `-`) with the built-in and user rules.
pub fn analyze(paths: &[PathBuf], rule_source: &rules::RuleSource) -> Result<Analysis> {
    let engine = rules::engine(rule_source).rules()?;
    let (inputs, notes, dumps) = crate::flight::prepare(log::expand(paths).input()?).input()?;
    let a = engine.analyze(&inputs, &Options { evidence: 5, ..Default::default() }).input()?;
    Ok(crate::flight::join(with_notes(a, notes), Vec::new(), dumps))
}

pub fn run(args: &ExplainArgs) -> Result<u8> {
    // Without paths stdin is read; at a terminal that would just sit there waiting.
    if args.paths.is_empty() && std::io::stdin().is_terminal() {
        return Err(crate::error::usage_one(
            "no log to read: give files or folders (e.g. `epdoctor explain rank*.log`), `-` for stdin, or pipe a log in",
        ));
    }
    let engine = rules::engine(&args.rule_opts.source()).rules()?;
    let (inputs, notes, dumps) = crate::flight::prepare(log::expand(&args.paths).input()?).input()?;
    let opts = Options {
        max_bytes: args.max_bytes,
        evidence: args.evidence.unwrap_or(5),
        templates: args.unexplained,
        ..Default::default()
    };
    let analysis = crate::flight::join(with_notes(engine.analyze(&inputs, &opts).input()?, notes), Vec::new(), dumps);
    // The process ends right after: freeing the compiled rule set would only cost time.
    std::mem::forget(engine);
    // Without --evidence the other findings show fewer lines than the primary (2 in text, 3 in Markdown).
    let others = args.evidence.unwrap_or(if args.format == crate::cli::Format::Md { 3 } else { 2 });
    let ro = RenderOpts { redact: !args.no_redact, evidence: args.evidence.unwrap_or(5), evidence_others: others };
    let text = report::render(&analysis, args.format, &ro);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(analysis.verdict.exit_code())
}

/// `a` with the notes of `expand` (what it skipped) before the engine's own.
fn with_notes(mut a: Analysis, mut notes: Vec<String>) -> Analysis {
    notes.append(&mut a.notes);
    a.notes = notes;
    a
}

/// In-memory entry point for the fuzzer and the property tests: explain `files` (name, raw bytes:
/// any encoding, gzip or zstd, garbage) with `engine`, and render the result in every format.
/// Returns the analysis and the three renderings (text, Markdown redacted, JSON). Must never
/// panic or hang, whatever the bytes.
pub fn analyze_bytes(
    engine: &rules::Engine,
    files: &[(&str, &[u8])],
    opts: &Options,
) -> Result<(Analysis, [String; 3])> {
    let inputs: Vec<log::Input> = files
        .iter()
        .map(|(name, bytes)| log::Input::Bytes { name: name.to_string(), bytes: (*bytes).into() })
        .collect();
    let analysis = engine.analyze(&inputs, opts)?;
    let ro = RenderOpts { redact: true, evidence: opts.evidence.max(1), evidence_others: opts.evidence.clamp(1, 3) };
    let out = [crate::cli::Format::Text, crate::cli::Format::Md, crate::cli::Format::Json]
        .map(|f| report::render(&analysis, f, &ro));
    Ok((analysis, out))
}
