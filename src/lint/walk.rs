//! The files to lint: files given as they are, and the `.py` files under folders given, walked with
//! ripgrep's rules (the `ignore` crate: hidden paths and what .gitignore, .ignore and
//! .git/info/exclude leave out are skipped). Links are followed, but a folder is entered once by
//! its real path (so link loops end), and a file reached twice (through links or overlapping
//! arguments) is linted once, under the first path it was reached by.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut keep = |p: PathBuf, out: &mut Vec<PathBuf>| {
        let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if seen.insert(real) {
            out.push(p);
        }
    };
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("{}: cannot read", p.display()))?;
        if !meta.is_dir() {
            keep(p.clone(), &mut out);
            continue;
        }
        // Each folder is entered once by its real path: a second link to it, or a link back to
        // an ancestor, is not followed.
        let dirs = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
        let walk = ignore::WalkBuilder::new(p)
            .follow_links(true)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| {
                if e.file_name() == "__pycache__" {
                    return false;
                }
                if !e.file_type().is_some_and(|t| t.is_dir()) {
                    return true;
                }
                let real = std::fs::canonicalize(e.path()).unwrap_or_else(|_| e.path().to_path_buf());
                dirs.lock().map_or(true, |mut d| d.insert(real))
            })
            .build();
        for entry in walk {
            // Loops (a link back to an ancestor) and unreadable entries: skipped, the walk goes on.
            let Ok(entry) = entry else { continue };
            let path = entry.path();
            if entry.file_type().is_some_and(|t| t.is_file()) && path.extension().is_some_and(|x| x == "py") {
                keep(strip_dot(path), &mut out);
            }
        }
    }
    if out.is_empty() {
        bail!("no Python files under {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(out)
}

/// `./train.py` as `train.py`: the path as the user would write it.
fn strip_dot(p: &Path) -> PathBuf {
    p.strip_prefix(".").map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[PathBuf], root: &Path) -> Vec<String> {
        v.iter().map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string()).collect()
    }

    #[test]
    fn hidden_ignored_and_cache_paths_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        for f in ["a.py", "sub/b.py", ".hidden/c.py", "build/d.py", "__pycache__/e.py", "notes.txt", "sub/gen_x.py"] {
            std::fs::create_dir_all(r.join(f).parent().unwrap()).unwrap();
            std::fs::write(r.join(f), "x = 1\n").unwrap();
        }
        std::fs::write(r.join(".gitignore"), "build/\ngen_*.py\n").unwrap();
        let got = expand(&[r.to_path_buf()]).unwrap();
        assert_eq!(names(&got, r), ["a.py", "sub/b.py"]);
    }

    #[cfg(unix)]
    #[test]
    fn link_loops_finish_and_each_file_is_linted_once() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("pkg/sub")).unwrap();
        std::fs::write(r.join("pkg/train.py"), "x = 1\n").unwrap();
        std::fs::write(r.join("pkg/sub/util.py"), "y = 1\n").unwrap();
        // Two links back up: without loop detection the walk is exponential.
        std::os::unix::fs::symlink("..", r.join("pkg/sub/up")).unwrap();
        std::os::unix::fs::symlink("../..", r.join("pkg/sub/top")).unwrap();
        std::os::unix::fs::symlink("train.py", r.join("pkg/alias.py")).unwrap();
        let got = expand(&[r.join("pkg"), r.join("pkg/train.py")]).unwrap();
        let got = names(&got, r);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.contains(&"pkg/sub/util.py".to_string()), "{got:?}");
        assert!(got.iter().any(|g| g == "pkg/alias.py" || g == "pkg/train.py"), "{got:?}");
    }
}
