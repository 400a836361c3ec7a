//! NCCL and torch versions: stated, assumed or inferred, the gates they open, the readings.

use std::collections::BTreeSet;

use super::findings::Cand;
use super::state::State;
use super::{Engine, Options, VERSIONS_CAP};
use crate::model::version::{Range, Version};
use crate::model::VersionNote;
use crate::rules::schema::Rule;

impl Engine {
    /// The NCCL and torch versions: assumed by the caller, stated by the log, or inferred.
    pub(crate) fn versions(&self, st: &mut State, opts: &Options) -> Versions {
        let mut notes = Vec::new();
        // With several, the lowest: the choice must not depend on the order of the rank files.
        // `2.22.3` and `2.22.3+cuda12.5` (the version line and a plugin's, say) are one release:
        // the fuller string is said, once.
        let release = |s: &String| Version::parse(s).map_or_else(|| s.clone(), |v| v.to_string());
        let mut distinct: Vec<&String> = Vec::new();
        for v in &st.nccl_versions {
            match distinct.last_mut() {
                Some(last) if release(last) == release(v) => {
                    if v.len() > last.len() {
                        *last = v;
                    }
                }
                _ => distinct.push(v),
            }
        }
        let stated_nccl = distinct.first().map(|s| s.to_string());
        if distinct.len() > 1 {
            st.notes.push(format!(
                "the log shows several NCCL versions: {}; the rules use the lowest",
                distinct.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        let note = |value: String, how: &str, detail: String| VersionNote {
            component: "nccl".into(),
            value,
            how: how.into(),
            detail,
        };
        // The releases the log allows: one when assumed or stated, the catalogue's set when inferred.
        let mut nccl: Vec<Version> = Vec::new();
        if let Some(v) = opts.assume_nccl {
            nccl.push(v);
            notes.push(note(v.to_string(), "assumed", "given by the caller".into()));
        } else if let Some(s) = &stated_nccl {
            nccl.extend(Version::parse(s));
            notes.push(note(s.clone(), "stated", "NCCL version line".into()));
        }
        // Neither assumed nor stated: what the log's lines allow, or torch's pin.
        let open = nccl.is_empty() && stated_nccl.is_none();
        let inferred = if open { self.infer_nccl(&st.sites) } else { None };
        // torch: stated, else inferred from the file:line of its C++ log lines.
        let inferred_torch = if st.torch_version.is_none() { self.infer_torch(&st.sites) } else { None };
        let torch_one = st.torch_version.clone().or_else(|| match &inferred_torch {
            Some((set, _)) if set.len() == 1 => Some(set[0].to_string()),
            _ => None,
        });
        if open {
            let pin = torch_one.as_deref().and_then(|t| self.sites().torch_pin_note(t));
            let pinned = pin.as_ref().and_then(|p| Version::parse(&p.value));
            match (inferred, pin, pinned) {
                // The pin, where the log's sites allow it (or say nothing): one release, not a span.
                (set, Some(pin), Some(p)) if set.as_ref().is_none_or(|(s, _)| s.contains(&p)) => {
                    nccl.push(p);
                    notes.push(pin);
                }
                (Some((set, sites)), pin, _) => {
                    let value = self.sites().releases_text(&set);
                    if let (Some(pin), Some(t)) = (pin, &torch_one) {
                        st.notes.push(format!(
                            "torch {t}'s PyPI wheel pins NCCL {}, which the log's NCCL lines rule out (they \
                             allow {value}): an NCCL installed over torch's own?",
                            pin.value
                        ));
                    }
                    notes.push(note(value, "inferred", inferred_from(&sites)));
                    nccl = set;
                }
                (None, None, _) => {
                    if let Some(detail) = self.nccl_conflict(&st.sites) {
                        notes.push(note("unknown".into(), "conflicting", detail));
                    }
                }
                _ => {}
            }
        }
        let nccl_out = (nccl.len() == 1).then(|| nccl[0].to_string());
        let mut torch: Vec<Version> = st.torch_version.as_deref().and_then(Version::parse).into_iter().collect();
        if let Some(t) = &st.torch_version {
            notes.push(VersionNote {
                component: "torch".into(),
                value: t.clone(),
                how: "stated".into(),
                detail: "a torch version in the log".into(),
            });
        } else if let Some((set, sites)) = inferred_torch {
            notes.push(VersionNote {
                component: "torch".into(),
                value: self.sites().torch_releases_text(&set),
                how: "inferred".into(),
                detail: format!("from the file:line of torch's C++ log lines {}", sites.join(", ")),
            });
            torch = set;
        }
        Versions { nccl, nccl_out, torch, notes }
    }

    /// Lines whose level no catalogued release of the stated NCCL prints them at: another libnccl
    /// printed them (torch's bundled one and a system one?), or the stated version is wrong.
    pub(crate) fn level_mismatches(&self, st: &mut State, vs: &Versions) {
        let (Some(&v), Some(stated)) =
            (vs.nccl.first(), vs.notes.iter().find(|n| n.component == "nccl" && n.how == "stated"))
        else {
            return;
        };
        for (key, id) in &st.sites {
            let Some(what) = key.strip_prefix(LEVEL_SITE) else { continue };
            if self.sites().entry_has(*id, v) == Some(false) {
                let levels = self.sites().levels_text(*id).unwrap_or_default();
                st.notes.push(format!(
                    "the log shows {what}, a level NCCL {} does not print it at (catalogue: {levels}): that \
                     line came from another NCCL library than the version line's (a system libnccl beside \
                     torch's own?), or the version line is another process's",
                    stated.value
                ));
            }
        }
    }

    /// Say which version a reading assumes when the log does not pin the version down.
    pub(crate) fn version_readings(&self, findings: &mut [Cand], vs: &Versions) {
        for c in findings.iter_mut() {
            let r = &self.rules[c.rule];
            let mut said = Vec::new();
            let mut narrowed = Vec::new();
            let gates = [("NCCL", &r.nccl, &r.def.nccl, &vs.nccl), ("torch", &r.torch, &r.def.torch, &vs.torch)];
            for (lib, range, text, cands) in gates {
                let (Some(range), Some(text)) = (range, text) else { continue };
                match span_gate(Some(range), cands) {
                    Gate::Unknown if cands.is_empty() => said.push(format!("{lib} {text}")),
                    Gate::Unknown => {
                        said.push(format!("{lib} {text}"));
                        let runs = if lib == "NCCL" {
                            self.sites().releases_text(cands)
                        } else {
                            self.sites().torch_releases_text(cands)
                        };
                        narrowed.push(format!("{lib} to {runs}"));
                    }
                    _ => {}
                }
            }
            if said.is_empty() {
                continue;
            }
            let head = if narrowed.is_empty() {
                "the log reveals no version".to_string()
            } else {
                format!("the log narrows {} only", narrowed.join(" and "))
            };
            let mut t = format!("{head}; this reading holds for {}", said.join(" and "));
            if let Some(o) = &r.def.other_reading {
                t.push_str(". Outside that range: ");
                t.push_str(o.trim());
            }
            c.finding.add_context(t);
        }
    }

    /// The NCCL releases whose WARN sites explain every site seen (intersection), if any.
    pub(crate) fn infer_nccl(&self, sites: &BTreeSet<(String, u32)>) -> Option<(Vec<Version>, Vec<String>)> {
        let nccl = sites.iter().filter(|(s, _)| !s.starts_with(TORCH_SITE));
        // No site, no release (and no catalogue to load).
        nccl.clone().next()?;
        let mut set = self.sites().infer_set(nccl.clone().map(|(_, id)| *id));
        // A level word alone tells nothing of releases the catalogue did not read (2.17.1 from a
        // `WARN Cuda failure` that every catalogued release prints at WARN).
        if nccl.clone().all(|(s, _)| s.starts_with(LEVEL_SITE)) {
            set.retain(|v| self.sites().is_catalogued(*v));
        }
        if set.is_empty() {
            return None;
        }
        let mut used: Vec<String> = nccl.map(|(s, _)| s.clone()).collect();
        used.dedup();
        Some((set, used))
    }

    /// Why the log's NCCL lines allow no release together: each with the releases that print it so
    /// (None: fewer than two such lines, nothing to contradict).
    fn nccl_conflict(&self, sites: &BTreeSet<(String, u32)>) -> Option<String> {
        let nccl: Vec<&(String, u32)> = sites.iter().filter(|(s, _)| !s.starts_with(TORCH_SITE)).collect();
        if nccl.len() < 2 || !self.sites().infer_set(nccl.iter().map(|(_, id)| *id)).is_empty() {
            return None;
        }
        let each: Vec<String> = nccl
            .iter()
            .map(|(s, id)| {
                let site = s.strip_prefix(LEVEL_SITE).unwrap_or(s);
                format!("{site} is {}", self.sites().entry_releases_text(*id))
            })
            .collect();
        Some(format!(
            "the log's NCCL lines fit no one release: {} (two libnccl in one job, or lines of a build the \
             catalogue did not read)",
            each.join("; ")
        ))
    }

    /// The torch releases whose C++ sites explain every torch site seen, if any.
    pub(crate) fn infer_torch(&self, sites: &BTreeSet<(String, u32)>) -> Option<(Vec<Version>, Vec<String>)> {
        let torch = sites.iter().filter_map(|(s, id)| Some((s.strip_prefix(TORCH_SITE)?, *id)));
        torch.clone().next()?;
        let set = self.sites().infer_torch_set(torch.clone().map(|(_, id)| id));
        if set.is_empty() {
            return None;
        }
        let mut used: Vec<String> = torch.map(|(s, _)| s.to_string()).collect();
        used.dedup();
        Some((set, used))
    }
}

/// The key prefix of a torch C++ site among the fingerprint sites seen.
pub(crate) const TORCH_SITE: &str = "torch ";
/// The key prefix of an NCCL message whose level tells the release (`level INFO `msg``).
pub(crate) const LEVEL_SITE: &str = "level ";

pub(crate) struct Versions {
    /// The NCCL releases the log allows (one when stated or assumed; empty: unknown).
    pub(crate) nccl: Vec<Version>,
    pub(crate) nccl_out: Option<String>,
    /// The torch releases the log allows.
    pub(crate) torch: Vec<Version>,
    pub(crate) notes: Vec<VersionNote>,
}

/// What a version range says of the releases a log allows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    Shut,
    /// No version known, or the range holds for some of the releases only.
    Unknown,
}

pub(crate) fn span_gate(range: Option<&Range>, cands: &[Version]) -> Gate {
    let Some(range) = range else { return Gate::Open };
    let inside = cands.iter().filter(|v| range.contains(**v)).count();
    match inside {
        _ if cands.is_empty() => Gate::Unknown,
        0 => Gate::Shut,
        n if n == cands.len() => Gate::Open,
        _ => Gate::Unknown,
    }
}

impl Versions {
    /// The version gates of rule `r`.
    pub(crate) fn allows(&self, r: &Rule) -> bool {
        let gate = |range: &Option<Range>, cands: &[Version]| match span_gate(range.as_ref(), cands) {
            Gate::Open => true,
            Gate::Shut => false,
            Gate::Unknown => r.def.if_version_unknown,
        };
        gate(&r.nccl, &self.nccl) && gate(&r.torch, &self.torch)
    }

    /// The one torch release the log allows, for the JSON.
    pub(crate) fn torch_out(&self) -> Option<String> {
        (self.torch.len() == 1).then(|| self.torch[0].to_string())
    }
}

/// The detail of an NCCL version inferred from fingerprint sites and message levels.
fn inferred_from(sites: &[String]) -> String {
    let (levels, warn): (Vec<&String>, Vec<&String>) = sites.iter().partition(|s| s.starts_with(LEVEL_SITE));
    let mut parts = Vec::new();
    if !warn.is_empty() {
        parts.push(format!(
            "the file:line of WARN sites {}",
            warn.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if !levels.is_empty() {
        let l: Vec<&str> = levels.iter().map(|s| &s[LEVEL_SITE.len()..]).collect();
        parts.push(format!("the level of {}", l.join(", ")));
    }
    format!("from {}", parts.join(" and "))
}

/// Version strings in ascending order: by version number, then as text (so that which versions a
/// log shows, and which one is used, does not depend on the order its lines were read in).
pub(crate) fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (Version::parse(a), Version::parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Add `v` to the sorted list of distinct versions, keeping the lowest `VERSIONS_CAP`.
pub(crate) fn add_version(list: &mut Vec<String>, v: String) {
    if let Err(i) = list.binary_search_by(|x| version_order(x, &v)) {
        list.insert(i, v);
        list.truncate(VERSIONS_CAP);
    }
}

/// Keep the lower of `cur` and `v`.
pub(crate) fn offer_version(cur: &mut Option<String>, v: String) {
    if cur.as_deref().is_none_or(|c| version_order(&v, c).is_lt()) {
        *cur = Some(v);
    }
}

/// If `msg` ends in the first part of an `NCCL version X.Y.Z` that a paste may have wrapped, that
/// part (from `NCCL` on).
pub(crate) fn version_tail(msg: &str) -> Option<&str> {
    const FULL: &str = "NCCL version ";
    // Asked of every line: the tail must end the line, so look at its end before searching.
    let b = msg.as_bytes();
    let digits = b.iter().rev().take_while(|c| c.is_ascii_digit() || **c == b'.').count();
    let maybe = b[..b.len() - digits].ends_with(FULL.as_bytes())
        || (digits == 0 && (4..FULL.len()).any(|n| b.ends_with(&FULL.as_bytes()[..n])));
    if !maybe {
        return None;
    }
    let i = msg.rfind("NCCL")?;
    let tail = &msg[i..];
    if tail.len() < FULL.len() {
        return FULL.starts_with(tail).then_some(tail);
    }
    let rest = tail.strip_prefix(FULL)?;
    // A version cut in its middle: digits and dots, ending in a dot or short of three numbers.
    let ok =
        rest.bytes().all(|c| c.is_ascii_digit() || c == b'.') && (rest.ends_with('.') || rest.matches('.').count() < 2);
    ok.then_some(tail)
}

#[cfg(test)]
mod tests {
    use super::version_tail;

    /// The search from the last `NCCL`, without the look at the line's end that spares most lines it.
    fn by_search(msg: &str) -> Option<&str> {
        const FULL: &str = "NCCL version ";
        let tail = &msg[msg.rfind("NCCL")?..];
        if tail.len() < FULL.len() {
            return FULL.starts_with(tail).then_some(tail);
        }
        let rest = tail.strip_prefix(FULL)?;
        let ok = rest.bytes().all(|c| c.is_ascii_digit() || c == b'.')
            && (rest.ends_with('.') || rest.matches('.').count() < 2);
        ok.then_some(tail)
    }

    #[test]
    fn the_look_at_the_end_changes_no_answer() {
        let full = "NCCL version 2.21.5";
        let mut msgs =
            vec![String::new(), "NCCL INFO comm 0x1 rank 0 nRanks 8".into(), "misc/socket.cc:826 -> 3".into()];
        for lead in ["", "x ", "NCCL INFO ", "NCCL version 2.1 then ", "cudaDev 0 NCCL"] {
            for n in 0..=full.len() {
                msgs.push(format!("{lead}{}", &full[..n]));
                msgs.push(format!("{lead}{} 7", &full[..n]));
                msgs.push(format!("{lead}{}+cuda12.4", &full[..n]));
            }
            msgs.push(format!("{lead}NCCL version 2."));
            msgs.push(format!("{lead}NCCL version 12"));
            msgs.push(format!("{lead}NCCL 2.21."));
        }
        for m in &msgs {
            assert_eq!(version_tail(m), by_search(m), "{m:?}");
        }
        assert_eq!(version_tail("x NCCL vers"), Some("NCCL vers"));
        assert_eq!(version_tail("NCCL version 2.21."), Some("NCCL version 2.21."));
        assert_eq!(version_tail("NCCL version 2.21.5"), None);
    }
}
