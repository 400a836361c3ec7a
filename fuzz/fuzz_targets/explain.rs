//! The log parser and the rule engine on arbitrary bytes, with the built-in rules, rendered in
//! every format. The first byte picks options; the rest is split into up to 8 rank files at
//! `\n#=FILE=#\n` (so cross-rank arbitration, rank resolution and version inference are reached).
//! Besides "no panic, no hang": the JSON must parse back, and the Markdown must not carry raw HTML
//! or a mention out of the log.
#![no_main]

use std::sync::OnceLock;

use epdoctor::rules::{schema, Engine, Options};
use libfuzzer_sys::fuzz_target;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| Engine::new(schema::load_rules(&[]).expect("built-in rules")).expect("engine"))
}

const SEP: &[u8] = b"\n#=FILE=#\n";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let mut files: Vec<(String, &[u8])> = Vec::new();
    let mut cur = rest;
    while files.len() < 7 {
        match cur.windows(SEP.len()).position(|w| w == SEP) {
            Some(i) => {
                files.push((format!("rank{}.log", files.len()), &cur[..i]));
                cur = &cur[i + SEP.len()..];
            }
            None => break,
        }
    }
    files.push((format!("rank{}.log", files.len()), cur));
    let opts = Options {
        max_bytes: (flags & 1 != 0).then_some(u64::from(flags >> 4) * 97),
        assume_nccl: (flags & 2 != 0).then(|| epdoctor::model::version::Version::parse("2.22.3").unwrap()),
        evidence: usize::from(flags >> 5) + 1,
        templates: flags & 4 != 0,
        ..Default::default()
    };
    let named: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let (analysis, [_text, md, json]) =
        epdoctor::commands::explain::analyze_bytes(engine(), &named, &opts).expect("in-memory input never fails to open");
    let back: serde_json::Value = serde_json::from_str(&json).expect("JSON output parses");
    assert_eq!(back["verdict"], analysis.verdict.as_str());
    // Log text never leaves a code block as HTML or a mention.
    let outside_code = strip_code_blocks(&md);
    for bad in ["<img", "<script", "<a ", "<iframe", "<svg"] {
        assert!(!outside_code.to_ascii_lowercase().contains(bad), "raw HTML {bad} in Markdown:\n{md}");
    }
});

/// The Markdown with fenced code blocks removed (their content is inert).
fn strip_code_blocks(md: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<String> = None;
    for l in md.lines() {
        match &fence {
            Some(f) if l == f => fence = None,
            Some(_) => {}
            None if l.starts_with("```") => fence = Some(l.trim_end_matches("text").to_string()),
            None => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}
