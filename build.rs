// Embeds the git revision for `--version` (a warning, not a failure, without git) and the list of
// built-in rule files and fixtures, so that `rules test` works from the installed binary.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
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
