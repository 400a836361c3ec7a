//! NCCL releases as the package index names them (`2.22.3`, `2.25.1.post1`), what `--nccl` takes
//! (a release, `system`, or a library's path) and `--bisect-nccl`'s `FROM..TO`.

use std::cmp::Ordering;
use std::fmt;
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::model::version::Version;

/// One release of the `nvidia-nccl-cu<major>` wheel. A `.postN` release repackages the same NCCL
/// (its library reports the base version), so it sorts right after its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Release {
    pub version: Version,
    pub post: Option<u32>,
}

impl Release {
    /// `2.22.3` or `2.25.1.post1`; None for anything else (pre-releases, dev placeholders, `2.22`).
    pub fn parse(s: &str) -> Option<Release> {
        let s = s.trim();
        let (core, post) = match s.split_once(".post") {
            Some((c, p)) => (c, Some(p.parse().ok()?)),
            None => (s, None),
        };
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
            return None;
        }
        let n = |i: usize| parts[i].parse::<u32>().ok();
        Some(Release { version: Version(n(0)?, n(1)?, n(2)?), post })
    }
}

impl Ord for Release {
    fn cmp(&self, o: &Self) -> Ordering {
        self.version.cmp(&o.version).then(self.post.unwrap_or(0).cmp(&o.post.unwrap_or(0)))
    }
}

impl PartialOrd for Release {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.version)?;
        if let Some(p) = self.post {
            write!(f, ".post{p}")?;
        }
        Ok(())
    }
}

/// One value of `--nccl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// The library the loader finds (the matrix's default value).
    System,
    Release(Release),
    /// A libnccl.so file given by path.
    Path(PathBuf),
}

impl Spec {
    pub fn parse(s: &str) -> Result<Spec> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("system") {
            return Ok(Spec::System);
        }
        if t.contains('/') || t.contains(".so") {
            return Ok(Spec::Path(PathBuf::from(t)));
        }
        if let Some(r) = Release::parse(t) {
            return Ok(Spec::Release(r));
        }
        if t.is_empty() {
            bail!("--nccl: an empty value; give a release such as 2.22.3, `system`, or a libnccl.so path");
        }
        let hint = if t.split('.').count() == 2 && t.split('.').all(|p| p.parse::<u32>().is_ok()) {
            format!(" (a whole release: {t}.N; `epdoctor nccl list --available` lists them)")
        } else {
            String::new()
        };
        bail!("--nccl {t:?}: not a release (e.g. 2.22.3 or 2.25.1.post1), `system`, or a path to a libnccl.so{hint}")
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::System => f.write_str("system"),
            Spec::Release(r) => write!(f, "{r}"),
            Spec::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One end of `--bisect-nccl FROM..TO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Release(Release),
    /// The loader's library, placed by the version it reports.
    System,
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Release(r) => write!(f, "{r}"),
            End::System => f.write_str("system"),
        }
    }
}

/// `FROM..TO`, inclusive, each end a release or `system`.
pub fn parse_range(s: &str) -> Result<(End, End)> {
    let Some((a, b)) = s.split_once("..") else {
        bail!("--bisect-nccl {s:?}: expected FROM..TO, e.g. 2.21.5..2.28.9 (either end may be `system`)");
    };
    let end = |x: &str| -> Result<End> {
        let x = x.trim();
        if x.eq_ignore_ascii_case("system") {
            Ok(End::System)
        } else {
            Release::parse(x)
                .map(End::Release)
                .ok_or_else(|| anyhow::anyhow!("--bisect-nccl {s:?}: {x:?} is not a release (e.g. 2.22.3) or `system`"))
        }
    };
    let (a, b) = (end(a)?, end(b)?);
    if let (End::Release(x), End::Release(y)) = (a, b) {
        if x >= y {
            bail!("--bisect-nccl {s:?}: FROM must be older than TO");
        }
    }
    if a == End::System && b == End::System {
        bail!("--bisect-nccl {s:?}: at most one end can be `system`");
    }
    Ok((a, b))
}

/// The releases that bisection probes: one per NCCL version (a `.postN` only where its base is
/// missing), sorted.
pub fn distinct(mut rs: Vec<Release>) -> Vec<Release> {
    rs.sort();
    let mut out: Vec<Release> = Vec::new();
    for r in rs {
        if out.last().is_some_and(|l| l.version == r.version) {
            continue;
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_print_and_sort() {
        let r = |s| Release::parse(s).unwrap();
        assert_eq!(r("2.22.3").to_string(), "2.22.3");
        assert_eq!(r("2.25.1.post1").to_string(), "2.25.1.post1");
        assert!(r("2.25.1") < r("2.25.1.post1") && r("2.25.1.post1") < r("2.26.2"));
        assert!(r("2.9.9") < r("2.10.0"));
        for bad in ["2.22", "0.0.1.dev5", "2.22.3rc1", "v2.22.3", "2.22.x", "", "2..3", "2.22.3.post"] {
            assert_eq!(Release::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn specs_are_releases_system_or_paths() {
        assert_eq!(Spec::parse("system").unwrap(), Spec::System);
        assert_eq!(Spec::parse("2.23.4").unwrap(), Spec::Release(Release::parse("2.23.4").unwrap()));
        assert_eq!(Spec::parse("./libnccl.so.2").unwrap(), Spec::Path("./libnccl.so.2".into()));
        assert_eq!(Spec::parse("libnccl.so.2").unwrap(), Spec::Path("libnccl.so.2".into()));
        let e = Spec::parse("2.22").unwrap_err().to_string();
        assert!(e.contains("2.22.N"), "{e}");
        assert!(Spec::parse("latest").unwrap_err().to_string().contains("\"latest\": not a release"));
    }

    #[test]
    fn ranges() {
        let (a, b) = parse_range("2.22.3..2.23.4").unwrap();
        assert_eq!((a.to_string(), b.to_string()), ("2.22.3".into(), "2.23.4".into()));
        assert_eq!(parse_range("2.22.3..system").unwrap().1, End::System);
        for (bad, want) in [
            ("2.22.3", "expected FROM..TO"),
            ("2.23.4..2.22.3", "older than TO"),
            ("2.22.3..2.22.3", "older than TO"),
            ("system..system", "at most one"),
            ("2.22..2.23.4", "\"2.22\" is not a release"),
        ] {
            let e = parse_range(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn distinct_keeps_one_release_per_version() {
        let v: Vec<Release> =
            ["2.26.2.post1", "2.25.1.post1", "2.26.2", "2.24.3"].iter().map(|s| Release::parse(s).unwrap()).collect();
        let d: Vec<String> = distinct(v).iter().map(|r| r.to_string()).collect();
        assert_eq!(d, ["2.24.3", "2.25.1.post1", "2.26.2"]);
    }
}
