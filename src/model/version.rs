//! Versions (`2.22.3`, `2.22.3+cuda12.5`, `2.11.0+cu130`) and ranges (`>=2.12.7, <2.23.4`).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let core = s.trim().trim_start_matches('v');
        let core = core.split(['+', '-', ' ']).next()?;
        let mut it = core.split('.');
        let a = it.next()?.parse().ok()?;
        let b = it.next().map_or(Some(0), |x| x.parse().ok())?;
        let c = it.next().map_or(Some(0), |x| {
            // "2.11.0a0" style suffixes: keep the leading digits.
            let d: String = x.chars().take_while(char::is_ascii_digit).collect();
            d.parse().ok()
        })?;
        Some(Version(a, b, c))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The releases where NCCL's and torch's behaviour changes, one table: env's checks and the
/// worker compare against these, and a test holds the built-in rules' version ranges
/// (rules/teardown.toml) to them.
pub mod boundary {
    use super::Version;
    /// The oldest NCCL with ncclCommFinalize (the worker's clean teardown needs it).
    pub const NCCL_FINALIZE: Version = Version(2, 14, 0);
    /// NCCL lets several ranks of one communicator share a GPU (NCCL_MULTI_RANK_GPU_ENABLE).
    pub const NCCL_MULTI_RANK_GPU: Version = Version(2, 30, 3);
    /// NCCL stops printing the abort-path pair ("Could not receive type ...", "Failed to execute
    /// operation Close ...") while a communicator is aborted (src/proxy.cc at v2.23.4-1).
    pub const NCCL_ABORT_PAIR_SILENCED: Version = Version(2, 23, 4);
    /// NCCL prints "[Service thread] Accept failed" as INFO, no longer WARN (src/proxy.cc at v2.30.3-1).
    pub const NCCL_ACCEPT_FAILED_INFO: Version = Version(2, 30, 3);
    /// From here a rank that exits without destroying its communicator can hang the others'
    /// finalize (reproduced with 2.32.3, docs/results; pytorch/pytorch#194679 reports it from 2.31.2).
    pub const NCCL_DESTROY_HANG: Version = Version(2, 31, 0);
    /// torch warns "destroy_process_group() was not called" (pytorch/pytorch#119250).
    pub const TORCH_NOT_DESTROYED_WARNING: Version = Version(2, 4, 0);
    /// torch's destroy_process_group() finalizes and destroys instead of aborting (pytorch/pytorch#141510).
    pub const TORCH_DESTROY_FINALIZES: Version = Version(2, 6, 0);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    terms: Vec<(Op, Version)>,
    text: String,
}

impl Range {
    pub fn parse(s: &str) -> Result<Range, String> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (op, rest) = if let Some(r) = part.strip_prefix(">=") {
                (Op::Ge, r)
            } else if let Some(r) = part.strip_prefix("<=") {
                (Op::Le, r)
            } else if let Some(r) = part.strip_prefix("==") {
                (Op::Eq, r)
            } else if let Some(r) = part.strip_prefix('>') {
                (Op::Gt, r)
            } else if let Some(r) = part.strip_prefix('<') {
                (Op::Lt, r)
            } else if let Some(r) = part.strip_prefix('=') {
                (Op::Eq, r)
            } else {
                (Op::Eq, part)
            };
            let v = Version::parse(rest)
                .ok_or_else(|| format!("`{part}` is not a version comparison (e.g. `>=2.23.4`)"))?;
            terms.push((op, v));
        }
        if terms.is_empty() {
            return Err(format!("`{s}` is an empty version range"));
        }
        Ok(Range { terms, text: s.to_string() })
    }

    pub fn contains(&self, v: Version) -> bool {
        self.terms.iter().all(|&(op, b)| match op {
            Op::Lt => v < b,
            Op::Le => v <= b,
            Op::Gt => v > b,
            Op::Ge => v >= b,
            Op::Eq => v == b,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(Version::parse("2.22.3+cuda12.5"), Some(Version(2, 22, 3)));
        assert_eq!(Version::parse("2.11.0+cu130"), Some(Version(2, 11, 0)));
        assert_eq!(Version::parse("2.4"), Some(Version(2, 4, 0)));
        assert_eq!(Version::parse("x"), None);
    }

    #[test]
    fn ranges() {
        let r = Range::parse(">=2.12.7, <2.23.4").unwrap();
        assert!(r.contains(Version(2, 22, 3)));
        assert!(!r.contains(Version(2, 23, 4)));
        assert!(!r.contains(Version(2, 12, 6)));
        assert!(Range::parse("=2.22.3").unwrap().contains(Version(2, 22, 3)));
        assert!(Range::parse(">=x").is_err());
        assert!(Range::parse(" , ").is_err());
    }
}
