//! `explain`: input -> records -> matches -> verdict -> report.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;

use crate::cli::ExplainArgs;
use crate::error::Typed;
use crate::model::Analysis;
use crate::output;
use crate::pipeline;
use crate::rules::{self, Options};

/// Explain logs at `paths` (files, folders of per-rank logs, `-`) with the built-in and user rules.
pub fn analyze(paths: &[PathBuf], rule_source: &rules::RuleSource) -> Result<Analysis> {
    let engine = rules::engine(rule_source).rules()?;
    pipeline::explain_paths(&engine, paths, &Options { evidence: 5, ..Default::default() }).input()
}

pub fn run(args: &ExplainArgs) -> Result<u8> {
    // Without paths stdin is read; at a terminal that would just sit there waiting.
    if args.paths.is_empty() && std::io::stdin().is_terminal() {
        return Err(crate::error::usage_one(
            "no log to read: give files or folders (e.g. `epdoctor explain rank*.log`), `-` for stdin, or pipe a log in",
        ));
    }
    let engine = rules::engine(&args.rule_opts.source()).rules()?;
    let opts = Options {
        max_bytes: args.max_bytes,
        evidence: args.evidence.unwrap_or(5),
        templates: args.unexplained,
        ..Default::default()
    };
    let (analysis, failed) = pipeline::explain_readable_paths(&engine, &args.paths, &opts).input()?;
    // The process ends right after: freeing the compiled rule set would only cost time.
    std::mem::forget(engine);
    // Without --evidence the other findings show fewer lines than the primary (2 in text, 3 in Markdown).
    let others = args.evidence.unwrap_or(if args.format == crate::cli::ExplainFormat::Md { 3 } else { 2 });
    let o = output::Options {
        redact: !args.no_redact,
        evidence: args.evidence.unwrap_or(5),
        evidence_others: others,
        verbose: args.verbose,
        ..output::Options::new(args.format.output())
    };
    output::print(&output::render(&analysis, &o)?)?;
    // The rest was explained; the paths that could not be read are errors, said last (as ripgrep).
    for f in &failed {
        eprintln!("epdoctor: {f}");
    }
    Ok(crate::exit::of_explain(analysis.verdict, failed.len()))
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
    let analysis = pipeline::explain_bytes(engine, files, opts)?;
    let o = |format| output::Options {
        evidence: opts.evidence.max(1),
        evidence_others: opts.evidence.clamp(1, 3),
        ..output::Options::new(format)
    };
    let [text, md, json] = [output::Format::Text, output::Format::Md, output::Format::Json]
        .map(|f| output::render(&analysis, &o(f)).expect("explain has text, Markdown and JSON"));
    Ok((analysis, [text, md, json]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sniff_knows_what_epdoctor_writes() {
        use crate::log::{sniff, Content, Input};
        use crate::output::{self, Format, Options};
        let engine = crate::rules::Engine::new(crate::rules::schema::load_rules(&[]).unwrap()).unwrap();
        let inputs = [Input::Memory { name: "r.log".into(), text: "vm:1:2 [0] misc/x.cc:1 NCCL WARN odd\n".into() }];
        let a = engine.analyze(&inputs, &Default::default()).unwrap();
        for (format, kind) in [
            (Format::Text, "epdoctor explain's text"),
            (Format::Md, "epdoctor explain's Markdown"),
            (Format::Json, "epdoctor explain's JSON"),
        ] {
            let o = Options { evidence: 3, evidence_others: 3, ..Options::new(format) };
            let out = output::render(&a, &o).unwrap();
            assert_eq!(sniff("out", out.as_bytes()), Content::Own(kind), "{out}");
        }
        let repro = format!("{}\n\n- cells: 4\n", crate::model::headings::REPRO_MD);
        assert_eq!(sniff("report.md", repro.as_bytes()), Content::Own("epdoctor repro's report.md"));
        let bundle = format!("{}\n\n- logs: verdict\n", crate::model::headings::REPORT_MD);
        assert_eq!(sniff("r.md", bundle.as_bytes()), Content::Own("an epdoctor report"));
        // cells.json as serde writes `model::run::Run`: its first two fields.
        let cells = "{\n  \"schema_version\": 1,\n  \"tool_version\": \"0.1.0\",\n  \"status\": \"complete\",\n";
        assert_eq!(sniff("cells.json", cells.as_bytes()), Content::Own("epdoctor repro's cells.json"));
        // Other JSON and Markdown are not ours.
        assert_eq!(sniff("x.json", b"{\"schema_version\": 1, \"name\": 2}"), Content::Text);
        assert_eq!(sniff("x.md", b"# epdoctor notes\n"), Content::Text);
    }
}
