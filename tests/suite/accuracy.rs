//! The accuracy corpus (tests/accuracy/{holdout,dev}/NNN-*/) is well formed: every case.toml
//! parses, carries its source and label, names a primary line when it is actionable, and sits
//! next to at least one non-empty log file. Accuracy itself is measured by scripts/accuracy.py,
//! never asserted here (docs/accuracy.md).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const SETS: [&str; 2] = ["holdout", "dev"];
const KEYS: [&str; 8] = ["source", "summary", "conclusion", "verdict", "primary", "family", "nccl", "torch"];

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/accuracy")
}

fn case_dirs(set: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(corpus().join(set))
        .unwrap_or_else(|e| panic!("tests/accuracy/{set}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Every problem with one case folder, each naming the file.
fn problems(dir: &Path) -> Vec<String> {
    let toml_path = dir.join("case.toml");
    let shown = toml_path.display();
    let text = match fs::read_to_string(&toml_path) {
        Ok(t) => t,
        Err(e) => return vec![format!("{shown}: {e}")],
    };
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => return vec![format!("{shown}: not valid TOML: {e}")],
    };
    let mut out = Vec::new();
    let text_of = |key: &str| table.get(key).and_then(|v| v.as_str()).map(str::trim);
    for key in ["source", "summary", "conclusion", "verdict"] {
        if text_of(key).is_none_or(str::is_empty) {
            out.push(format!("{shown}: `{key}` missing or empty"));
        }
    }
    for key in table.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        out.push(format!("{shown}: unknown key `{key}`"));
    }
    if let Some(source) = text_of("source") {
        if !source.starts_with("https://") {
            out.push(format!("{shown}: source is not a public https URL"));
        }
    }
    let primary = text_of("primary").filter(|p| !p.is_empty());
    match text_of("verdict") {
        Some("actionable") if primary.is_none() => out.push(format!("{shown}: actionable without `primary`")),
        Some("clean" | "benign") if table.contains_key("primary") => {
            out.push(format!("{shown}: `primary` on a case that is not actionable"))
        }
        Some("actionable" | "clean" | "benign") | None => {}
        Some(other) => out.push(format!("{shown}: verdict `{other}` is not clean/benign/actionable")),
    }
    let logs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "case.toml"))
        .collect();
    if logs.is_empty() {
        out.push(format!("{}: no log file next to case.toml", dir.display()));
    }
    for log in &logs {
        match fs::read_to_string(log) {
            Ok(t) if t.trim().is_empty() => out.push(format!("{}: empty log", log.display())),
            Ok(_) => {}
            Err(e) => out.push(format!("{}: {e}", log.display())),
        }
    }
    // The expected primary text must be in the case's own logs, or it can never match.
    if let Some(p) = primary {
        let found = logs.iter().any(|l| fs::read_to_string(l).is_ok_and(|t| t.contains(p)));
        if !found {
            out.push(format!("{shown}: `primary` text is in none of the case's log files"));
        }
    }
    out
}

#[test]
fn every_case_is_well_formed() {
    let mut all = Vec::new();
    for set in SETS {
        let dirs = case_dirs(set);
        assert!(!dirs.is_empty(), "tests/accuracy/{set} has no cases");
        for dir in dirs {
            all.extend(problems(&dir));
        }
    }
    assert!(all.is_empty(), "malformed accuracy cases:\n{}", all.join("\n"));
}

#[test]
fn case_folders_are_numbered_uniquely_across_sets() {
    let mut seen = BTreeSet::new();
    for set in SETS {
        for dir in case_dirs(set) {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let number = name.split('-').next().unwrap_or_default().to_string();
            assert!(
                number.len() >= 3 && number.bytes().all(|b| b.is_ascii_digit()),
                "{set}/{name}: folder name must start with a number of three or more digits"
            );
            assert!(seen.insert(number.clone()), "{set}/{name}: number {number} used twice");
        }
    }
}

#[test]
fn no_thread_is_in_both_sets() {
    let source_of = |dir: &Path| -> String {
        let t: toml::Table = fs::read_to_string(dir.join("case.toml")).unwrap().parse().unwrap();
        t["source"].as_str().unwrap().trim_end_matches('/').to_string()
    };
    let holdout: BTreeSet<String> = case_dirs("holdout").iter().map(|d| source_of(d)).collect();
    for dir in case_dirs("dev") {
        let s = source_of(&dir);
        assert!(!holdout.contains(&s), "{}: thread {s} is also in the holdout set", dir.display());
    }
}
