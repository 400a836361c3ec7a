//! Before a `-- CMD` run with NCCL releases preloaded: does the command's torch call NCCL
//! functions a release lacks? Python loads extension modules with RTLD_NOW, so such a torch
//! fails at `import torch` with an undefined symbol; say so up front, naming the functions.
//! The torch -> NCCL pins of the catalogue (rules/catalog) give the release to use instead.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::model::version::Version;

/// The torch a command would import.
#[derive(Debug, Clone, PartialEq)]
pub struct Torch {
    pub version: Option<String>,
    /// `torch/lib/libtorch_cuda.so` (None: a CPU build, which does not link NCCL).
    pub cuda_lib: Option<PathBuf>,
}

/// The Python interpreter `cmd` runs: `python*` itself, or the one a script's `#!` line names.
pub fn python_of(cmd: &[String]) -> Option<String> {
    let first = cmd.first()?;
    let is_python = |p: &str| {
        let b = Path::new(p).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        b.strip_prefix("python").is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    if is_python(first) {
        return Some(first.clone());
    }
    let path = if first.contains('/') { Some(PathBuf::from(first)) } else { which(first) }?;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(&path).ok()?.read(&mut head).ok()?;
    let line = String::from_utf8_lossy(&head[..n]).lines().next()?.to_string();
    let rest = line.strip_prefix("#!")?.trim();
    let mut words = rest.split_whitespace();
    let prog = words.next()?;
    let prog = if Path::new(prog).file_name().is_some_and(|n| n == "env") {
        words.find(|w| !w.starts_with('-'))?
    } else {
        prog
    };
    is_python(prog).then(|| prog.to_string())
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

const FIND: &str = "import importlib.util as u, os\ns = u.find_spec('torch')\nprint(os.path.dirname(s.origin) if s and s.origin else '')";

/// Where `python` finds torch, without importing it (an import with the wrong NCCL is what fails).
pub fn find(python: &str, timeout: Duration) -> Option<Torch> {
    let mut child = Command::new(python)
        .args(["-c", FIND])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => return None,
        }
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    let dir = PathBuf::from(out.trim());
    if out.trim().is_empty() || !dir.is_dir() {
        return None;
    }
    Some(at(&dir))
}

/// The torch installed in `dir` (its package folder).
pub fn at(dir: &Path) -> Torch {
    let version = std::fs::read_to_string(dir.join("version.py")).ok().and_then(|t| {
        t.lines().find_map(|l| {
            let v = l.strip_prefix("__version__")?.trim_start().strip_prefix('=')?.trim();
            Some(v.trim_matches(['\'', '"']).to_string())
        })
    });
    let lib = dir.join("lib").join("libtorch_cuda.so");
    Torch { version, cuda_lib: lib.is_file().then_some(lib) }
}

/// Problems (the run would fail: stop before it) and notes (worth saying) for running `torch`
/// with each library, given as (what the user wrote, path, the NCCL version it reports).
pub fn check(torch: &Torch, libs: &[(String, PathBuf, Option<Version>)]) -> (Vec<String>, Vec<String>) {
    let (mut problems, mut notes) = (Vec::new(), Vec::new());
    let Some(cuda_lib) = &torch.cuda_lib else { return (problems, notes) };
    let tv = torch.version.clone().unwrap_or_else(|| "(version unknown)".into());
    let pin = torch
        .version
        .as_deref()
        .and_then(Version::parse)
        .and_then(|t| crate::rules::catalog::Sites::builtin().ok()?.torch_pin(t));
    let pin_text = |nv: Option<Version>| match pin {
        Some((from, p)) if nv.is_none_or(|v| (v.0, v.1) != (p.0, p.1)) => {
            let same = if Version::parse(&tv) == Some(from) { String::new() } else { format!(" (as torch {from})") };
            format!("; torch {tv}'s PyPI wheel pins NCCL {p}{same}: use that release or a later one, or a torch built against this NCCL")
        }
        _ => String::new(),
    };
    for (what, lib, nv) in libs {
        let ncc = nv.map(|v| v.to_string()).unwrap_or_else(|| what.clone());
        match super::symbols::missing(cuda_lib, lib) {
            Ok(m) if m.is_empty() => {}
            Ok(m) => {
                let shown: Vec<&str> = m.iter().take(4).map(String::as_str).collect();
                let more = if m.len() > shown.len() { format!(" ({} in all)", m.len()) } else { String::new() };
                problems.push(format!(
                    "--nccl {what}: torch {tv} ({}) calls {}{more}, which NCCL {ncc} ({}) does not define: preloaded, it \
                     would stop `import torch` with an undefined symbol{}",
                    cuda_lib.display(),
                    shown.join(", "),
                    lib.display(),
                    pin_text(*nv)
                ));
            }
            Err(e) => {
                if let (Some((_, p)), Some(v)) = (pin, nv) {
                    if (v.0, v.1) < (p.0, p.1) {
                        notes.push(format!(
                            "--nccl {what}: could not compare symbols ({e:#}); NCCL {v} is older than the {p} torch {tv}'s \
                             wheel pins, so torch may call functions it lacks"
                        ));
                    }
                }
            }
        }
    }
    (problems, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_of_a_command() {
        let v = |a: &[&str]| python_of(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["python3", "x.py"]).as_deref(), Some("python3"));
        assert_eq!(v(&["/opt/venv/bin/python3.12", "x.py"]).as_deref(), Some("/opt/venv/bin/python3.12"));
        assert_eq!(v(&["pythonista"]), None);
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("torchrun");
        std::fs::write(&s, "#!/usr/bin/env -S python3\nimport sys\n").unwrap();
        assert_eq!(v(&[s.to_str().unwrap()]).as_deref(), Some("python3"));
        std::fs::write(&s, "#!/venv/bin/python3.11\n").unwrap();
        assert_eq!(v(&[s.to_str().unwrap()]).as_deref(), Some("/venv/bin/python3.11"));
        std::fs::write(&s, "#!/bin/sh\n").unwrap();
        assert_eq!(v(&[s.to_str().unwrap()]), None);
        assert_eq!(v(&["/nonexistent/prog"]), None);
    }

    #[test]
    fn a_torch_folder_is_read_without_importing_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("version.py"), "from typing import Optional\n__version__ = '2.8.0+cu128'\n")
            .unwrap();
        assert_eq!(at(d.path()), Torch { version: Some("2.8.0+cu128".into()), cuda_lib: None });
        // A CPU build links no NCCL: nothing to check.
        let (p, n) = check(&at(d.path()), &[("2.22.3".into(), d.path().join("x"), None)]);
        assert!(p.is_empty() && n.is_empty());
    }
}
