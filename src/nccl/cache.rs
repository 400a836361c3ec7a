//! The user cache of fetched libraries: `$XDG_CACHE_HOME/epdoctor/nccl/<release>-cu<major>/`
//! (default `~/.cache`), each holding `libnccl.so.2` and `entry.json` (where it came from, its
//! checksums). An entry is built in a `.tmp-...` folder beside it and renamed into place whole,
//! so a folder with an entry's name is always complete; a staging folder left by a killed
//! process is removed by the next fetch (once its process is gone) or by `nccl clean`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::release::Release;

pub const LIB_FILE: &str = "libnccl.so.2";
pub const ENTRY_FILE: &str = "entry.json";
const TMP_PREFIX: &str = ".tmp-";

/// What `entry.json` records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    pub release: String,
    pub cuda_major: u32,
    pub package: String,
    pub wheel: String,
    pub url: String,
    pub index: String,
    pub wheel_sha256: String,
    pub wheel_bytes: u64,
    pub lib_sha256: String,
    pub lib_bytes: u64,
    /// What the library reports (`NCCL version 2.22.3+cuda12.6`).
    pub nccl_version: String,
    #[serde(default)]
    pub nccl_cuda: Option<String>,
    /// `pip` or `http`.
    pub via: String,
    pub fetched_unix: u64,
    pub download_s: f64,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub dir: PathBuf,
    pub lib: PathBuf,
    pub meta: Meta,
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

pub fn entry_name(r: Release, cuda_major: u32) -> String {
    format!("{r}-cu{cuda_major}")
}

/// `2.22.3-cu12` -> (2.22.3, 12).
pub fn parse_entry_name(name: &str) -> Option<(Release, u32)> {
    let (r, m) = name.rsplit_once("-cu")?;
    Some((Release::parse(r)?, m.parse().ok()?))
}

/// `.../2.22.3-cu12/libnccl.so.2` -> `2.22.3` (a library of this cache, by its path).
pub fn release_of_lib(path: &str) -> Option<String> {
    let p = Path::new(path);
    if p.file_name()? != LIB_FILE || !p.parent()?.join(ENTRY_FILE).is_file() {
        return None;
    }
    let (r, _) = parse_entry_name(&p.parent()?.file_name()?.to_string_lossy())?;
    Some(r.to_string())
}

impl Cache {
    pub fn at(root: PathBuf) -> Cache {
        Cache { root }
    }

    /// `$XDG_CACHE_HOME/epdoctor/nccl` (an absolute XDG_CACHE_HOME only, as the XDG spec says),
    /// else `$HOME/.cache/epdoctor/nccl`.
    pub fn from_env() -> Result<Cache> {
        let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        let base = match xdg {
            Some(x) => x,
            None => match std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
                Some(h) => h.join(".cache"),
                None => {
                    bail!("neither XDG_CACHE_HOME nor HOME is set to an absolute path: no place for the NCCL cache")
                }
            },
        };
        Ok(Cache { root: base.join("epdoctor").join("nccl") })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The complete entry of `r` for CUDA `major`, if there is one.
    pub fn get(&self, r: Release, major: u32) -> Option<Entry> {
        self.read_entry(&self.root.join(entry_name(r, major))).ok()
    }

    fn read_entry(&self, dir: &Path) -> Result<Entry> {
        let p = dir.join(ENTRY_FILE);
        let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let meta: Meta = serde_json::from_str(&text).with_context(|| format!("{} does not parse", p.display()))?;
        let lib = dir.join(LIB_FILE);
        let len = std::fs::metadata(&lib).with_context(|| format!("{}", lib.display()))?.len();
        if len != meta.lib_bytes {
            bail!("{} is {len} bytes, {} says {}", lib.display(), ENTRY_FILE, meta.lib_bytes);
        }
        Ok(Entry { dir: dir.to_path_buf(), lib, meta })
    }

    /// Every entry, sorted by CUDA major then release; folders that are not entries (or broken
    /// ones) come back as problems.
    pub fn list(&self) -> (Vec<Entry>, Vec<String>) {
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        let Ok(rd) = std::fs::read_dir(&self.root) else { return (ok, bad) };
        for d in rd.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if name.starts_with(TMP_PREFIX) {
                continue;
            }
            if parse_entry_name(&name).is_none() {
                bad.push(format!("{}: not an entry of this cache", d.path().display()));
                continue;
            }
            match self.read_entry(&d.path()) {
                Ok(e) => ok.push(e),
                Err(e) => bad.push(format!("{e:#}")),
            }
        }
        ok.sort_by_key(|e| {
            parse_entry_name(&e.dir.file_name().unwrap_or_default().to_string_lossy()).map(|(r, m)| (m, r))
        });
        (ok, bad)
    }

    /// A new staging folder for entry `name`, removed when dropped unless committed.
    pub fn stage(&self, name: &str) -> Result<Staging> {
        std::fs::create_dir_all(&self.root).with_context(|| format!("creating {}", self.root.display()))?;
        self.sweep();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = self.root.join(format!("{TMP_PREFIX}{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Staging { dir: Some(dir) })
    }

    /// Put a staged entry in place. When another process put the same entry there first, that
    /// one is kept and this one removed.
    pub fn commit(&self, mut s: Staging, name: &str, meta: &Meta) -> Result<Entry> {
        let dir = s.dir.clone().expect("a staging folder is committed once");
        let json = serde_json::to_string_pretty(meta)? + "\n";
        std::fs::write(dir.join(ENTRY_FILE), json).with_context(|| format!("writing {}", dir.display()))?;
        let target = self.root.join(name);
        match std::fs::rename(&dir, &target) {
            Ok(()) => {
                s.dir = None;
            }
            Err(_) if self.read_entry(&target).is_ok() => {}
            Err(e) => return Err(e).with_context(|| format!("renaming {} to {}", dir.display(), target.display())),
        }
        self.read_entry(&target)
    }

    /// Staging folders whose process is gone.
    fn stale(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.root) else { return Vec::new() };
        let mut out = Vec::new();
        for d in rd.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(TMP_PREFIX) else { continue };
            let pid = rest.rsplit('-').nth(1).and_then(|p| p.parse::<i32>().ok());
            if !pid.is_some_and(|p| p > 0 && std::path::Path::new(&format!("/proc/{p}")).exists()) {
                out.push(d.path());
            }
        }
        out
    }

    /// Remove staging folders whose process is gone; returns them.
    pub fn sweep(&self) -> Vec<PathBuf> {
        self.stale().into_iter().filter(|p| std::fs::remove_dir_all(p).is_ok()).collect()
    }

    /// What `clean(only)` removes: the entries (all, or those of the releases named) and, when
    /// all go, the staging folders of processes that are gone; sorted.
    pub fn cleanable(&self, only: &[Release]) -> Vec<PathBuf> {
        let mut out = if only.is_empty() { self.stale() } else { Vec::new() };
        if let Ok(rd) = std::fs::read_dir(&self.root) {
            for d in rd.flatten() {
                let name = d.file_name().to_string_lossy().into_owned();
                if parse_entry_name(&name).is_some_and(|(r, _)| only.is_empty() || only.contains(&r)) {
                    out.push(d.path());
                }
            }
        }
        out.sort();
        out
    }

    /// Remove what `cleanable(only)` names; returns (path, bytes) of what went (a staging folder
    /// counts 0 bytes and is skipped if it cannot be removed).
    pub fn clean(&self, only: &[Release]) -> Result<Vec<(PathBuf, u64)>> {
        let mut out = Vec::new();
        for p in self.cleanable(only) {
            let staging = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(TMP_PREFIX));
            if staging {
                if std::fs::remove_dir_all(&p).is_ok() {
                    out.push((p, 0));
                }
                continue;
            }
            let bytes = dir_bytes(&p);
            std::fs::remove_dir_all(&p).with_context(|| format!("removing {}", p.display()))?;
            out.push((p, bytes));
        }
        Ok(out)
    }
}

fn dir_bytes(p: &Path) -> u64 {
    std::fs::read_dir(p).map_or(0, |rd| rd.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
}

/// A staging folder; removed (with whatever is in it) unless committed.
pub struct Staging {
    dir: Option<PathBuf>,
}

impl Staging {
    pub fn path(&self) -> &Path {
        self.dir.as_deref().expect("not committed yet")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(lib_bytes: u64) -> Meta {
        Meta {
            release: "2.22.3".into(),
            cuda_major: 12,
            package: "nvidia-nccl-cu12".into(),
            wheel: "w.whl".into(),
            url: "http://x/w.whl".into(),
            index: "http://x/simple/".into(),
            wheel_sha256: "00".into(),
            wheel_bytes: 1,
            lib_sha256: "11".into(),
            lib_bytes,
            nccl_version: "2.22.3".into(),
            nccl_cuda: None,
            via: "http".into(),
            fetched_unix: 0,
            download_s: 0.0,
        }
    }

    #[test]
    fn staged_entries_appear_whole_or_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path().join("nccl"));
        let r = Release::parse("2.22.3").unwrap();
        {
            let s = c.stage("2.22.3-cu12").unwrap();
            std::fs::write(s.path().join(LIB_FILE), b"half").unwrap();
            // Dropped without commit: an error on the way.
        }
        assert!(c.get(r, 12).is_none());
        assert_eq!(std::fs::read_dir(c.root()).unwrap().count(), 0, "nothing partial is left");

        let s = c.stage("2.22.3-cu12").unwrap();
        std::fs::write(s.path().join(LIB_FILE), b"0123").unwrap();
        let e = c.commit(s, "2.22.3-cu12", &meta(4)).unwrap();
        assert_eq!(e.lib, c.root().join("2.22.3-cu12").join(LIB_FILE));
        assert_eq!(c.get(r, 12).unwrap().meta, meta(4));
        assert!(c.get(r, 13).is_none());

        // A second process committing the same entry keeps the first.
        let s = c.stage("2.22.3-cu12").unwrap();
        std::fs::write(s.path().join(LIB_FILE), b"4567").unwrap();
        let staged = s.path().to_path_buf();
        c.commit(s, "2.22.3-cu12", &meta(4)).unwrap();
        assert!(!staged.exists());
        assert_eq!(std::fs::read(c.root().join("2.22.3-cu12").join(LIB_FILE)).unwrap(), b"0123");
        assert_eq!(c.list().0.len(), 1);
    }

    #[test]
    fn a_truncated_library_is_not_an_entry_and_stale_staging_is_swept() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path().to_path_buf());
        let s = c.stage("2.23.4-cu12").unwrap();
        std::fs::write(s.path().join(LIB_FILE), b"0123").unwrap();
        c.commit(s, "2.23.4-cu12", &meta(4)).unwrap();
        std::fs::write(c.root().join("2.23.4-cu12").join(LIB_FILE), b"01").unwrap();
        assert!(c.get(Release::parse("2.23.4").unwrap(), 12).is_none());
        let (ok, bad) = c.list();
        assert!(ok.is_empty() && bad[0].contains("2 bytes"), "{bad:?}");

        // A staging folder of a process that is gone (pid 0 never names one).
        let stale = c.root().join(".tmp-2.22.3-cu12-0-123");
        std::fs::create_dir(&stale).unwrap();
        let mine = c.stage("x").unwrap();
        assert!(!stale.exists());
        assert!(mine.path().exists(), "a live process's staging folder stays");
        let gone = c.clean(&[]).unwrap();
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert!(mine.path().exists());
    }

    #[test]
    fn entry_names() {
        assert_eq!(
            parse_entry_name("2.25.1.post1-cu12").map(|(r, m)| (r.to_string(), m)),
            Some(("2.25.1.post1".into(), 12))
        );
        assert_eq!(parse_entry_name("junk"), None);
    }
}
