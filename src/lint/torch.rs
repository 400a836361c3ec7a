//! Which torch the linted code runs with, since several checks apply to some releases only:
//! `--torch`, else the torch installed in the Python lint would use (VIRTUAL_ENV, CONDA_PREFIX,
//! then python3 on PATH; `--python`), else the project's pins found from each file's folder up
//! (lock files, requirements*.txt, pyproject.toml, setup.py, setup.cfg, environment.yml, Pipfile).
//! The result is a set of versions; a check whose range covers it applies, one disjoint from it
//! is off, and one that overlaps it (or an unknown torch) is said at info level.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;

use crate::model::version::Version;

/// Half-open `[lo, hi)` over releases (`hi` None: no upper bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub lo: Version,
    pub hi: Option<Version>,
}

fn succ(v: Version) -> Version {
    Version(v.0, v.1, v.2 + 1)
}

impl Interval {
    pub const ALL: Interval = Interval { lo: Version(0, 0, 0), hi: None };

    pub fn exact(v: Version) -> Interval {
        Interval { lo: v, hi: Some(succ(v)) }
    }

    fn meet(self, o: Interval) -> Interval {
        let hi = match (self.hi, o.hi) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Interval { lo: self.lo.max(o.lo), hi }
    }

    fn is_empty(&self) -> bool {
        self.hi.is_some_and(|h| h <= self.lo)
    }

    fn within(&self, o: &Interval) -> bool {
        self.lo >= o.lo && o.hi.is_none_or(|oh| self.hi.is_some_and(|h| h <= oh))
    }

    /// PEP 440 specifiers (`>=2.1,<2.5`, `==2.7.*`, `~=2.4`), and Poetry's `^2.1`, `~2.1`, `2.1.0`.
    /// None: not a version specifier.
    pub fn parse(spec: &str) -> Option<Interval> {
        let mut out = Interval::ALL;
        let mut any = false;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (op, rest) = ["===", "==", "~=", ">=", "<=", "!=", ">", "<", "^", "~", "="]
                .iter()
                .find_map(|op| part.strip_prefix(op).map(|r| (*op, r.trim())))
                .unwrap_or(("==", part));
            if rest == "*" {
                any = true;
                continue;
            }
            let wild = rest.ends_with(".*");
            let rest = rest.trim_end_matches(".*");
            let v = Version::parse(rest)?;
            let dots = rest.split(['+', '-']).next().unwrap_or("").matches('.').count();
            // The release after the last given component (`2.7` -> 2.8, `2.7.1` -> 2.7.2).
            let next_at = |level: usize| match level {
                0 => Version(v.0 + 1, 0, 0),
                1 => Version(v.0, v.1 + 1, 0),
                _ => Version(v.0, v.1, v.2 + 1),
            };
            let i = match op {
                "==" | "===" | "=" if wild => Interval { lo: v, hi: Some(next_at(dots)) },
                "==" | "===" | "=" => Interval { lo: v, hi: Some(next_at(dots.max(2))) },
                ">=" => Interval { lo: v, hi: None },
                ">" => Interval { lo: succ(v), hi: None },
                "<=" => Interval { lo: Version(0, 0, 0), hi: Some(next_at(dots.max(2))) },
                "<" => Interval { lo: Version(0, 0, 0), hi: Some(v) },
                "~=" => Interval { lo: v, hi: Some(next_at(dots.saturating_sub(1))) },
                "^" => Interval { lo: v, hi: Some(if v.0 > 0 { next_at(0) } else { next_at(1) }) },
                "~" => Interval { lo: v, hi: Some(next_at(dots.min(1))) },
                "!=" => Interval::ALL,
                _ => return None,
            };
            out = out.meet(i);
            any = true;
        }
        any.then_some(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    Yes,
    No,
    /// The torch is unknown, or allows releases on both sides of the check's range.
    Maybe,
}

/// The torch a file runs with, and where that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchEnv {
    /// None: unknown.
    pub versions: Option<Interval>,
    /// An exact release (`--torch`, the interpreter, a lock file with one torch).
    pub exact: Option<Version>,
    /// Where it comes from, as said to the user (`torch>=2.7 in ddp/requirements.txt`).
    pub source: String,
}

impl TorchEnv {
    pub fn unknown(why: &str) -> TorchEnv {
        TorchEnv { versions: None, exact: None, source: why.to_string() }
    }

    pub fn exact(v: Version, source: String) -> TorchEnv {
        TorchEnv { versions: Some(Interval::exact(v)), exact: Some(v), source }
    }

    /// Whether a check for `range` (its `torch` field) applies.
    pub fn applies(&self, range: &str) -> Applies {
        let Some(c) = Interval::parse(range) else { return Applies::Maybe };
        match self.versions {
            None => Applies::Maybe,
            Some(p) if p.within(&c) => Applies::Yes,
            Some(p) if p.meet(c).is_empty() => Applies::No,
            Some(_) => Applies::Maybe,
        }
    }
}

/// Which Python's torch to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Python {
    /// VIRTUAL_ENV, CONDA_PREFIX, then python3 on PATH.
    #[default]
    Auto,
    /// Only the project's pins.
    Off,
    Path(PathBuf),
}

impl Python {
    pub fn from_arg(s: Option<&str>) -> Python {
        match s.map(str::trim) {
            None | Some("") | Some("auto") => Python::Auto,
            Some("none") | Some("off") => Python::Off,
            Some(p) => Python::Path(PathBuf::from(p)),
        }
    }
}

/// The torch installed for `python`, read from its package metadata (what `import torch` would
/// load, without the seconds that importing torch takes).
pub fn from_interpreter(python: &Python) -> Option<TorchEnv> {
    let candidates: Vec<PathBuf> = match python {
        Python::Off => return None,
        Python::Path(p) => vec![p.clone()],
        Python::Auto => {
            let mut v = Vec::new();
            for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
                if let Some(d) = std::env::var_os(var).filter(|d| !d.is_empty()) {
                    v.push(Path::new(&d).join("bin/python"));
                }
            }
            v.push(PathBuf::from("python3"));
            v
        }
    };
    for py in candidates {
        if let Some(v) = interpreter_torch(&py) {
            return Some(TorchEnv::exact(v, format!("torch {v} installed for {}", py.display())));
        }
    }
    None
}

fn interpreter_torch(py: &Path) -> Option<Version> {
    let mut child = Command::new(py)
        .args(["-I", "-c", "import importlib.metadata as m; print(m.version('torch'))"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    Version::parse(String::from_utf8_lossy(&out.stdout).trim())
}

/// What one project file says about torch.
enum Pin {
    Versions(Vec<Version>),
    Spec(String),
    Unversioned,
}

fn requirement_re() -> Regex {
    // `torch>=2.1`, `pytorch=1.6.0=py3.8_0` (conda), `torch[opt] ==2.7; sys_platform == "linux"`.
    Regex::new(r"(?i)^\s*(?:[\w-]+::)?(?:py)?torch\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;#]*)").expect("valid")
}

/// A requirement string naming torch itself (not torchvision, torch_checkpointing, torch-foo).
fn requirement(s: &str, re: &Regex) -> Option<Pin> {
    let caps = re.captures(s)?;
    let spec = caps.name("spec").map_or("", |m| m.as_str()).trim();
    if spec.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.') {
        return None; // torchvision, torch_x, torch-x
    }
    if let Some(url) = spec.strip_prefix('@') {
        // `torch @ https://.../torch-2.5.1%2Bcu121-cp311-...whl`
        let re = Regex::new(r"torch-(\d+\.\d+(?:\.\d+)?)").expect("valid");
        return Some(match re.captures(url).and_then(|c| Version::parse(&c[1])) {
            Some(v) => Pin::Versions(vec![v]),
            None => Pin::Unversioned,
        });
    }
    if spec.is_empty() {
        return Some(Pin::Unversioned);
    }
    // Conda's `=1.6.0=build`: the version is between the first two `=`.
    let spec = match spec.strip_prefix('=') {
        Some(r) if !r.starts_with('=') => format!("=={}", r.split('=').next().unwrap_or("").trim()),
        _ => spec.split_whitespace().collect::<String>(),
    };
    Interval::parse(&spec)?;
    Some(Pin::Spec(spec))
}

fn from_requirements(path: &Path, text: &str, re: &Regex, depth: usize) -> Option<Pin> {
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or("").trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(inc) = line.strip_prefix("-r").or_else(|| line.strip_prefix("--requirement")) {
            let inc = path.parent().unwrap_or(Path::new(".")).join(inc.trim_start_matches('=').trim());
            if depth < 3 {
                if let Ok(t) = std::fs::read_to_string(&inc) {
                    if let Some(p) = from_requirements(&inc, &t, re, depth + 1) {
                        return Some(p);
                    }
                }
            }
            continue;
        }
        if let Some(p) = requirement(line, re) {
            return Some(p);
        }
    }
    None
}

fn from_pyproject(text: &str, re: &Regex) -> Option<Pin> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let strings = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let project = doc.get("project");
    let mut reqs = strings(project.and_then(|p| p.get("dependencies")));
    for table in
        [project.and_then(|p| p.get("optional-dependencies")), doc.get("dependency-groups")].into_iter().flatten()
    {
        if let Some(t) = table.as_table() {
            for v in t.values() {
                reqs.extend(strings(Some(v)));
            }
        }
    }
    if let Some(p) = reqs.iter().find_map(|r| requirement(r, re)) {
        return Some(p);
    }
    // Poetry (and Pipfile): `torch = "^2.1"` or `torch = { version = ">=2.0" }`.
    let poetry = doc.get("tool").and_then(|t| t.get("poetry"));
    for deps in [
        poetry.and_then(|p| p.get("dependencies")),
        poetry.and_then(|p| p.get("group")).and_then(|g| g.get("main")).and_then(|m| m.get("dependencies")),
        doc.get("packages"),
    ]
    .into_iter()
    .flatten()
    {
        for name in ["torch", "pytorch"] {
            match deps.get(name) {
                Some(toml::Value::String(s)) => return Some(spec_or_unversioned(s)),
                Some(toml::Value::Table(t)) => {
                    return Some(
                        t.get("version").and_then(|v| v.as_str()).map_or(Pin::Unversioned, spec_or_unversioned),
                    )
                }
                _ => {}
            }
        }
    }
    None
}

fn spec_or_unversioned(s: &str) -> Pin {
    let s = s.trim();
    if s.is_empty() || s == "*" || Interval::parse(s).is_none() {
        Pin::Unversioned
    } else {
        Pin::Spec(s.to_string())
    }
}

/// uv.lock, poetry.lock, pdm.lock: `[[package]] name = "torch" version = "2.13.0"`.
fn from_toml_lock(text: &str) -> Option<Pin> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let versions: Vec<Version> = doc
        .get("package")?
        .as_array()?
        .iter()
        .filter(|p| p.get("name").and_then(|n| n.as_str()) == Some("torch"))
        .filter_map(|p| p.get("version").and_then(|v| v.as_str()).and_then(Version::parse))
        .collect();
    (!versions.is_empty()).then_some(Pin::Versions(versions))
}

fn from_pipfile_lock(text: &str) -> Option<Pin> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let versions: Vec<Version> = ["default", "develop"]
        .iter()
        .filter_map(|k| v.get(k)?.get("torch")?.get("version")?.as_str())
        .filter_map(|s| Version::parse(s.trim_start_matches("==")))
        .collect();
    (!versions.is_empty()).then_some(Pin::Versions(versions))
}

fn from_setup(text: &str, re: &Regex) -> Option<Pin> {
    let q = Regex::new(r#"["']((?:py)?torch\b[^"']*)["']"#).expect("valid");
    let found = q.captures_iter(text).find_map(|c| requirement(&c[1], re));
    found
}

fn from_environment_yml(text: &str, re: &Regex) -> Option<Pin> {
    text.lines().filter_map(|l| l.trim().strip_prefix('-')).find_map(|l| requirement(l.trim(), re))
}

/// The pin files of one folder that name torch, in the order they are believed: lock files first
/// (exact), then requirements, pyproject, setup, conda environments.
fn pins_in(dir: &Path, re: &Regex) -> Option<(PathBuf, Pin)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let rank = |n: &str| -> Option<u8> {
        Some(match n {
            "uv.lock" | "poetry.lock" | "pdm.lock" | "Pipfile.lock" => 0,
            _ if n.starts_with("requirements") && n.ends_with(".txt") => 1,
            "pyproject.toml" | "Pipfile" => 2,
            "setup.py" | "setup.cfg" => 3,
            "environment.yml" | "environment.yaml" => 4,
            _ => return None,
        })
    };
    let mut cands: Vec<(u8, String)> = names.into_iter().filter_map(|n| rank(&n).map(|r| (r, n))).collect();
    cands.sort();
    for (_, name) in cands {
        let path = dir.join(&name);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let pin = match name.as_str() {
            "uv.lock" | "poetry.lock" | "pdm.lock" => from_toml_lock(&text),
            "Pipfile.lock" => from_pipfile_lock(&text),
            "pyproject.toml" | "Pipfile" => from_pyproject(&text, re),
            "setup.py" | "setup.cfg" => from_setup(&text, re).or_else(|| from_requirements(&path, &text, re, 0)),
            "environment.yml" | "environment.yaml" => from_environment_yml(&text, re),
            _ => from_requirements(&path, &text, re, 0),
        };
        if let Some(p) = pin {
            return Some((path, p));
        }
    }
    None
}

/// The project pins nearest to each folder, found once per folder.
#[derive(Default)]
pub struct Pins {
    cache: HashMap<PathBuf, TorchEnv>,
}

impl Pins {
    pub fn for_file(&mut self, file: &Path) -> TorchEnv {
        let abs = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
        let dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        if let Some(e) = self.cache.get(&dir) {
            return e.clone();
        }
        let re = requirement_re();
        let cwd = std::env::current_dir().unwrap_or_default();
        let shown = |p: &Path| p.strip_prefix(&cwd).unwrap_or(p).display().to_string();
        let mut found = TorchEnv::unknown("no --torch, no torch in the Python found, no torch pin in the project");
        let mut d = Some(dir.as_path());
        let mut levels = 0;
        while let Some(here) = d {
            if let Some((path, pin)) = pins_in(here, &re) {
                found = match pin {
                    Pin::Versions(mut vs) => {
                        vs.sort();
                        let (lo, hi) = (vs[0], *vs.last().expect("non-empty"));
                        if lo == hi {
                            TorchEnv::exact(lo, format!("torch {lo} in {}", shown(&path)))
                        } else {
                            TorchEnv {
                                versions: Some(Interval { lo, hi: Some(succ(hi)) }),
                                exact: None,
                                source: format!("torch {lo} to {hi} in {}", shown(&path)),
                            }
                        }
                    }
                    Pin::Spec(s) => {
                        let versions = Interval::parse(&s);
                        // `==1.3.0`: one release.
                        let exact = versions.filter(|i| i.hi == Some(succ(i.lo))).map(|i| i.lo);
                        TorchEnv { versions, exact, source: format!("torch{s} in {}", shown(&path)) }
                    }
                    Pin::Unversioned => TorchEnv::unknown(&format!("torch without a version in {}", shown(&path))),
                };
                break;
            }
            levels += 1;
            if here.join(".git").exists() || levels > 32 {
                break;
            }
            d = here.parent();
        }
        self.cache.insert(dir, found.clone());
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(s: &str) -> Interval {
        Interval::parse(s).unwrap()
    }

    #[test]
    fn specifiers_become_intervals() {
        assert_eq!(iv(">=2.7"), Interval { lo: Version(2, 7, 0), hi: None });
        assert_eq!(iv("==1.3.0"), Interval::exact(Version(1, 3, 0)));
        assert_eq!(iv("==2.7.*"), Interval { lo: Version(2, 7, 0), hi: Some(Version(2, 8, 0)) });
        assert_eq!(iv("~=2.4"), Interval { lo: Version(2, 4, 0), hi: Some(Version(3, 0, 0)) });
        assert_eq!(iv("^2.1"), Interval { lo: Version(2, 1, 0), hi: Some(Version(3, 0, 0)) });
        assert_eq!(iv(">=2.1,<2.5"), Interval { lo: Version(2, 1, 0), hi: Some(Version(2, 5, 0)) });
        assert_eq!(iv("<=2.5.1").hi, Some(Version(2, 5, 2)));
    }

    #[test]
    fn a_check_applies_covered_is_off_disjoint_and_maybe_across() {
        let env = |s: &str| TorchEnv { versions: Interval::parse(s), exact: None, source: String::new() };
        assert_eq!(env(">=2.7").applies("<2.6"), Applies::No);
        assert_eq!(env(">=2.7").applies(">=2.6"), Applies::Yes);
        assert_eq!(env("==1.3.0").applies("<2.6"), Applies::Yes);
        assert_eq!(env(">=1.11").applies("<2.6"), Applies::Maybe);
        assert_eq!(env(">=2.1,<2.6").applies("<2.6"), Applies::Yes);
        assert_eq!(TorchEnv::unknown("").applies("<2.6"), Applies::Maybe);
    }

    #[test]
    fn requirement_lines_name_torch_itself() {
        let re = requirement_re();
        let spec = |s: &str| match requirement(s, &re) {
            Some(Pin::Spec(s)) => s,
            Some(Pin::Versions(v)) => format!("={}", v[0]),
            Some(Pin::Unversioned) => "unversioned".into(),
            None => "none".into(),
        };
        assert_eq!(spec("torch>=2.7"), ">=2.7");
        assert_eq!(spec("torch >= 2.7.1; sys_platform == \"linux\""), ">=2.7.1");
        assert_eq!(spec("pytorch=1.6.0=py3.8_cuda10.1.243_cudnn7.6.3_0"), "==1.6.0");
        assert_eq!(spec("torch"), "unversioned");
        assert_eq!(spec("torchvision>=0.9"), "none");
        assert_eq!(spec("torch_checkpointing>=0.1.0"), "none");
        assert_eq!(spec("torch-memory-saver"), "none");
        assert_eq!(
            spec("torch @ https://download.pytorch.org/whl/cu121/torch-2.5.1%2Bcu121-cp311-linux_x86_64.whl"),
            "=2.5.1"
        );
    }
}
