// Embeds the git revision for `--version` (a warning, not a failure, without git) and the list of
// built-in rule files and fixtures, so that `rules test` works from the installed binary. And does
// at build time what every run would otherwise do first: checks the built-in patterns and takes
// their literals (the same code as at run time, included below), which was most of a small log's
// start-up.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "src/log/literals.rs"]
mod literals;
#[allow(dead_code)]
#[path = "src/rules/pattern.rs"]
mod pattern;

fn main() {
    // The revision: given by whoever builds (a wheel's build script, a packager), else git's, else
    // the REVISION file an sdist carries (scripts/build-wheel writes it).
    println!("cargo:rerun-if-env-changed=EPDOCTOR_GIT_REV");
    println!("cargo:rerun-if-changed=REVISION");
    let git = || {
        std::process::Command::new("git")
            .args(["rev-parse", "--short=10", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let file = || std::fs::read_to_string("REVISION").ok().map(|s| s.trim().to_string());
    let rev = std::env::var("EPDOCTOR_GIT_REV")
        .ok()
        .or_else(git)
        .or_else(file)
        .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
        .unwrap_or_else(|| {
            println!("cargo:warning=git revision unknown; --version will say 'unknown'");
            "unknown".into()
        });
    println!("cargo:rustc-env=EPDOCTOR_GIT_REV={rev}");
    // HEAD names the branch; the branch's ref file (or packed-refs) changes with every commit.
    println!("cargo:rerun-if-changed=.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            if std::path::Path::new(".git").join(r).exists() {
                println!("cargo:rerun-if-changed=.git/{r}");
            }
        }
    }
    // Only files that exist: cargo reruns the script on every build for a missing one.
    if std::path::Path::new(".git/packed-refs").exists() {
        println!("cargo:rerun-if-changed=.git/packed-refs");
    }

    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let mut files = Vec::new();
    collect(&root.join("rules"), &mut files);
    collect(&root.join("kernels"), &mut files);
    files.sort();
    let mut out = String::from("&[\n");
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let _ = writeln!(out, "    ({rel:?}, include_str!({:?})),", f.to_string_lossy());
    }
    out.push(']');
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded.rs");
    std::fs::write(dest, out).unwrap();
    println!("cargo:rerun-if-changed=rules");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=src/log/literals.rs");
    println!("cargo:rerun-if-changed=src/rules/pattern.rs");
    patterns(&root, &files);
    level_heads(&root);
}

/// `level_heads.rs`: the heads of the catalogue's messages whose level differs by release, so
/// that an INFO line whose head is none of them needs no catalogue (7 MB of TOML, parsed lazily).
/// The head is what `catalog::head` takes: the first 10 characters.
fn level_heads(root: &Path) {
    let text = std::fs::read_to_string(root.join("rules/catalog/fingerprints.toml")).unwrap_or_default();
    let t: toml::Table = text.parse().unwrap_or_default();
    let mut heads: Vec<String> = t
        .get("nccl_levels")
        .and_then(|v| v.as_table())
        .map(|l| l.keys().map(|k| k.chars().take(10).collect()).collect())
        .unwrap_or_default();
    heads.sort();
    heads.dedup();
    let mut out = String::from("pub static LEVEL_HEADS: &[&str] = &[\n");
    for h in &heads {
        let _ = writeln!(out, "    {h:?},");
    }
    out.push_str("];\n");
    std::fs::write(PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("level_heads.rs"), out).unwrap();
}

/// `checked.rs`: the built-in patterns `pattern::check` accepts; `factors.rs`: the literals of
/// every built-in pattern as the engine runs it (`ascii_word_boundaries` applied). A file that does
/// not parse is skipped: loading it at run time reports the error.
fn patterns(root: &Path, files: &[PathBuf]) {
    let mut all: Vec<String> = Vec::new();
    for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "toml")) {
        let rel = f.strip_prefix(root).unwrap();
        if rel.components().count() != 2 {
            continue; // rules/*.toml only: the catalogue and lint tables hold no patterns
        }
        let Ok(t) = std::fs::read_to_string(f).unwrap().parse::<toml::Table>() else { continue };
        for (table, keys) in [("rule", &["patterns", "resolved_by"][..]), ("marker", &["pattern"][..])] {
            let Some(items) = t.get(table).and_then(|v| v.as_array()) else { continue };
            for item in items {
                for k in keys {
                    match item.get(*k) {
                        Some(toml::Value::String(p)) => all.push(p.clone()),
                        Some(toml::Value::Array(ps)) => {
                            all.extend(ps.iter().filter_map(|p| p.as_str().map(String::from)))
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    all.sort();
    all.dedup();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let mut checked = String::from("pub static CHECKED: &[&str] = &[\n");
    for p in all.iter().filter(|p| pattern::check(p).is_ok()) {
        let _ = writeln!(checked, "    {p:?},");
    }
    checked.push_str("];\n");
    std::fs::write(out.join("checked.rs"), checked).unwrap();
    #[allow(clippy::type_complexity)]
    let run: BTreeMap<String, (Vec<literals::Factor>, Vec<usize>)> = all
        .iter()
        .map(|p| pattern::ascii_word_boundaries(p))
        .map(|p| {
            let fs = literals::required_factors(&p).unwrap_or_default();
            let starts = fs.first().map(|f| f.iter().map(literals::key_start).collect()).unwrap_or_default();
            (p, (fs, starts))
        })
        .collect();
    let mut factors = String::from(
        "#[allow(clippy::type_complexity)]\npub static FACTORS: &[(&str, &[&[(&[u8], bool)]], &[u8])] = &[\n",
    );
    for (p, (fs, starts)) in &run {
        let _ = write!(factors, "    ({p:?}, &[");
        for f in fs {
            factors.push_str("&[");
            for (l, ci) in f {
                let _ = write!(factors, "(&{l:?}, {ci}), ");
            }
            factors.push_str("], ");
        }
        let _ = writeln!(factors, "], &{starts:?}),");
    }
    factors.push_str("];\n");
    std::fs::write(out.join("factors.rs"), factors).unwrap();
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            println!("cargo:rerun-if-changed={}", p.display());
            collect(&p, out);
        } else if matches!(p.extension().and_then(|x| x.to_str()), Some("toml" | "log" | "cu" | "cuh")) {
            out.push(p);
        }
    }
}
