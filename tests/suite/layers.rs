//! The module graph of src/ follows the layer order docs/architecture.md documents: a top-level
//! module uses (`crate::x`) only modules of lower layers, so data flows one way and no two modules
//! import each other. The order is read from that page's table, so the page and this test agree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// module -> layer, from the rows `| N | a, b | ... |` of the "Layers" table.
fn layers() -> BTreeMap<String, u32> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut out = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Ok(n) = cells[1].parse::<u32>() else { continue };
        for m in cells[2].split(',') {
            let m = m.trim().trim_matches('`');
            assert!(out.insert(m.to_string(), n).is_none(), "{m} is in two layers of docs/architecture.md");
        }
    }
    assert!(out.len() > 5, "no layer table found in docs/architecture.md");
    out
}

/// Source without comments, string literals and char literals, so a `crate::x` inside them is no edge.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let (mut out, mut i) = (String::with_capacity(src.len()), 0);
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i = src[i..].find("*/").map_or(b.len(), |e| i + e + 2);
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) && !ident_before(b, i) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) == Some(&b'"') {
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                i = src[start..].find(&close).map_or(b.len(), |e| start + e + close.len());
                out.push_str("\"\"");
            } else {
                out.push('r');
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            i = src[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (from, to) -> the files that make the edge: every `crate::x` and `crate::{x, ...}` of src/.
fn edges() -> BTreeMap<(String, String), BTreeSet<String>> {
    let src = root().join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let path = regex::Regex::new(r"\bcrate::(?:([a-z_][a-z0-9_]*)|\{([^}]*)\})").unwrap();
    let first = regex::Regex::new(r"(?:^|,)\s*([a-z_][a-z0-9_]*)").unwrap();
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        if rel == "lib.rs" || rel == "main.rs" {
            continue;
        }
        let from = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        for c in path.captures_iter(&code) {
            let targets: Vec<String> = match (c.get(1), c.get(2)) {
                (Some(m), _) => vec![m.as_str().to_string()],
                (_, Some(g)) => first.captures_iter(g.as_str()).map(|t| t[1].to_string()).collect(),
                _ => continue,
            };
            for to in targets.into_iter().filter(|t| *t != from) {
                out.entry((from.clone(), to)).or_default().insert(rel.clone());
            }
        }
    }
    out
}

/// Edges that still go against the layers, each to be removed by moving its types down (the result
/// models of env and repro into model/, stack frames into model/, the marker protocol into sys/).
/// The test fails on any other such edge, and on one listed here that is gone (shrink the list).
const NOT_YET: &[(&str, &str)] = &[];

#[test]
fn every_edge_goes_down_the_documented_layers() {
    let layer = layers();
    let mut wrong = Vec::new();
    let all = edges();
    for (from, to) in NOT_YET {
        if !all.contains_key(&(from.to_string(), to.to_string())) {
            wrong.push(format!("{from} -> {to} no longer exists: remove it from NOT_YET"));
        }
    }
    for ((from, to), files) in all {
        if NOT_YET.contains(&(from.as_str(), to.as_str())) {
            continue;
        }
        let where_ = files.into_iter().collect::<Vec<_>>().join(", ");
        match (layer.get(&from), layer.get(&to)) {
            (None, _) => wrong.push(format!("src/{from} is in no layer of docs/architecture.md ({where_})")),
            // lib.rs holds only the module list and `run`: build facts live in `meta`.
            (_, None) if !root().join("src").join(&to).exists() && !root().join(format!("src/{to}.rs")).exists() => {
                wrong.push(format!("{from} uses `crate::{to}` from the crate root: take it from its module ({where_})"))
            }
            (_, None) => wrong.push(format!("src/{to} is in no layer of docs/architecture.md")),
            (Some(a), Some(b)) if b >= a => wrong.push(format!(
                "{from} (layer {a}) uses {to} (layer {b}): a module may use only lower layers ({where_})"
            )),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "the module graph goes against docs/architecture.md:\n  {}", wrong.join("\n  "));
}

#[test]
fn every_top_level_module_has_a_layer() {
    let layer = layers();
    for e in std::fs::read_dir(root().join("src")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
        if name == "lib" || name == "main" {
            continue;
        }
        assert!(layer.contains_key(&name), "src/{name} is in no layer of docs/architecture.md");
    }
}

#[test]
fn the_edge_reader_sees_what_it_must_and_nothing_else() {
    let code =
        code_only("use crate::a::X; // crate::b\nlet s = \"crate::c\"; let r = r#\"crate::d\"#; crate::{e, f::g};");
    assert!(code.contains("crate::a") && code.contains("crate::{e, f::g}"), "{code}");
    assert!(!code.contains("crate::b") && !code.contains("crate::c") && !code.contains("crate::d"), "{code}");
}
