//! Every libnccl and NVSHMEM host library we can find, with versions read from the file's bytes
//! (never by loading it: loading runs its constructors and may pick another copy's dependencies).
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use super::elf;
pub use crate::model::env::{LibFile, Libraries, NcclSupport, Searched};
use regex::bytes::Regex;

static NCCL_VERSION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?").unwrap());
static NVSHMEM_VERSION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"NVSHMEM v(\d+\.\d+\.\d+)|NVSHMEM_ARTIFACT_VERSION=(\d+\.\d+\.\d+)").unwrap());
static NVSHMEM_USE_NCCL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"NVSHMEM_USE_NCCL=(ON|OFF|1|0)\b").unwrap());
static NAME_VERSION: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(r"\.so\.(\d+\.\d+\.\d+)$").unwrap());

/// The version NCCL prints in its "NCCL version 2.28.3+cuda12.9" line, read from raw bytes.
/// A library holds several "NCCL version" strings (format strings with %s, help text); only the
/// one with digits counts, and the one with "+cuda" wins.
pub fn nccl_version_in(bytes: &[u8]) -> Option<(String, Option<String>)> {
    let mut first: Option<(String, Option<String>)> = None;
    for c in NCCL_VERSION.captures_iter(bytes) {
        let v = String::from_utf8_lossy(&c[1]).into_owned();
        let cuda = c.get(2).map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned());
        if cuda.is_some() {
            return Some((v, cuda));
        }
        first.get_or_insert((v, None));
    }
    first
}

/// What the NVSHMEM host library says about itself: version and NVSHMEM_USE_NCCL.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NvshmemFacts {
    pub version: Option<String>,
    /// From the embedded build-options string ("NVSHMEM_USE_NCCL=ON").
    pub use_nccl: Option<bool>,
    pub names_libnccl: bool,
    pub names_nccl_symbols: bool,
}

impl NvshmemFacts {
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.version.is_none() {
            if let Some(c) = NVSHMEM_VERSION.captures(bytes) {
                let m = c.get(1).or_else(|| c.get(2)).unwrap();
                self.version = Some(String::from_utf8_lossy(m.as_bytes()).into_owned());
            }
        }
        if self.use_nccl.is_none() {
            if let Some(c) = NVSHMEM_USE_NCCL.captures(bytes) {
                self.use_nccl = Some(matches!(&c[1], b"ON" | b"1"));
            }
        }
        self.names_libnccl |= memchr_find(bytes, b"libnccl.so");
        self.names_nccl_symbols |= memchr_find(bytes, b"ncclCommInitRank");
    }

    fn complete(&self) -> bool {
        self.version.is_some() && self.use_nccl.is_some() && self.names_libnccl && self.names_nccl_symbols
    }

    /// The answer, with the reason. DT_NEEDED is checked separately by the caller.
    pub fn support(&self, needed_nccl: bool) -> NcclSupport {
        match (self.use_nccl, needed_nccl, self.names_libnccl && self.names_nccl_symbols) {
            (Some(true), ..) => NcclSupport {
                built_with_nccl: Some(true),
                evidence: "its build options string says NVSHMEM_USE_NCCL=ON".into(),
            },
            (Some(false), true, _) => NcclSupport {
                built_with_nccl: Some(true),
                evidence: "build options say NVSHMEM_USE_NCCL=OFF, yet it links libnccl (DT_NEEDED)".into(),
            },
            (Some(false), false, _) => NcclSupport {
                built_with_nccl: Some(false),
                evidence: "its build options string says NVSHMEM_USE_NCCL=OFF".into(),
            },
            (None, true, _) => {
                NcclSupport { built_with_nccl: Some(true), evidence: "it links libnccl (DT_NEEDED)".into() }
            }
            (None, false, true) => NcclSupport {
                built_with_nccl: Some(true),
                evidence: "no build options string, but it names libnccl.so and ncclCommInitRank (loaded by dlopen)"
                    .into(),
            },
            (None, false, false) => NcclSupport {
                built_with_nccl: Some(false),
                evidence: "no build options string, and it names neither libnccl.so nor NCCL functions".into(),
            },
        }
    }
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Feed a library's interesting bytes to `f`: its `.rodata` when the file is ELF with a section
/// table, else the whole file in chunks. `f` returns true when it has all it needs.
/// Returns which of the two was read.
pub fn scan_bytes(path: &Path, mut f: impl FnMut(&[u8]) -> bool) -> std::io::Result<&'static str> {
    if let Some(secs) = elf::sections(path)? {
        if let Some(ro) = elf::section_bytes(path, &secs, ".rodata")? {
            if f(&ro) {
                return Ok("rodata string");
            }
        }
    }
    // Chunks overlap so that a string across a boundary is still seen whole.
    const CHUNK: usize = 8 << 20;
    const OVERLAP: usize = 4096;
    let mut file = File::open(path)?;
    let mut buf = vec![0u8; CHUNK + OVERLAP];
    let mut kept = 0usize;
    loop {
        let n = read_full(&mut file, &mut buf[kept..])?;
        if n == 0 {
            break;
        }
        let end = kept + n;
        if f(&buf[..end]) {
            return Ok("file scan");
        }
        if end < OVERLAP {
            kept = end;
            continue;
        }
        buf.copy_within(end - OVERLAP..end, 0);
        kept = OVERLAP;
    }
    Ok("file scan")
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The NCCL version of one file, with where it came from.
pub fn read_nccl_version(path: &Path) -> std::io::Result<Option<(String, Option<String>, String)>> {
    let mut found = None;
    let how = scan_bytes(path, |b| {
        if let Some(v) = nccl_version_in(b) {
            // Keep looking for a "+cuda" form only within this buffer; one hit is enough.
            found = Some(v);
            true
        } else {
            false
        }
    })?;
    if let Some((v, cuda)) = found {
        return Ok(Some((v, cuda, how.to_string())));
    }
    Ok(version_from_name(path).map(|v| (v, None, "file name".to_string())))
}

fn version_from_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    NAME_VERSION.captures(name).map(|c| c[1].to_string())
}

pub fn read_nvshmem(path: &Path) -> std::io::Result<(NvshmemFacts, &'static str)> {
    let mut facts = NvshmemFacts::default();
    let how = scan_bytes(path, |b| {
        facts.feed(b);
        facts.complete()
    })?;
    Ok((facts, how))
}

/// `ldconfig -p` output: (soname, path) pairs.
pub fn parse_ldconfig(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (left, path) = l.split_once("=>")?;
            let name = left.split_whitespace().next()?;
            Some((name.to_string(), path.trim().to_string()))
        })
        .collect()
}

/// Folders named by /etc/ld.so.conf and the files it includes (glob `*.conf` only).
pub fn ld_so_conf_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    read_ld_conf(&root.join("etc/ld.so.conf"), root, &mut out, 0);
    out
}

fn read_ld_conf(file: &Path, root: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 4 {
        return;
    }
    let Ok(text) = std::fs::read_to_string(file) else { return };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pat) = line.strip_prefix("include") {
            let pat = pat.trim();
            // Only the usual "dir/*.conf" form is expanded.
            let (dir, suffix) = match pat.rsplit_once('/') {
                Some((d, f)) => (d, f.trim_start_matches('*')),
                None => continue,
            };
            let dir = root.join(dir.trim_start_matches('/'));
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            let mut files: Vec<PathBuf> =
                rd.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(suffix)).collect();
            files.sort();
            for f in files {
                read_ld_conf(&f, root, out, depth + 1);
            }
        } else if line.starts_with('/') {
            out.push(PathBuf::from(line));
        }
    }
}

/// Names that count as the library itself (not plugins like libnccl-net.so or static archives).
pub fn is_nccl_name(name: &str) -> bool {
    lib_name_matches(name, "libnccl.so")
}
pub fn is_nvshmem_name(name: &str) -> bool {
    lib_name_matches(name, "libnvshmem_host.so")
}
fn lib_name_matches(name: &str, stem: &str) -> bool {
    let Some(rest) = name.strip_prefix(stem) else { return false };
    rest.is_empty()
        || (rest.starts_with('.')
            && rest[1..].split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
}

/// A folder to search and why.
#[derive(Debug, Clone)]
pub struct SearchDir {
    pub dir: PathBuf,
    pub via: String,
}

/// The folders, in the loader's order where it has one: LD_LIBRARY_PATH, then the ld.so.conf
/// folders, then the default ones; then Python's and the *_HOME folders.
pub fn search_dirs(
    ld_library_path: Option<&str>,
    site_packages: &[String],
    homes: &[(String, String)],
) -> Vec<SearchDir> {
    let mut dirs = Vec::new();
    for d in ld_library_path.unwrap_or("").split(':').filter(|d| !d.is_empty()) {
        dirs.push(SearchDir { dir: d.into(), via: "LD_LIBRARY_PATH".into() });
    }
    for d in ld_so_conf_dirs(Path::new("/")) {
        dirs.push(SearchDir { dir: d, via: "ld.so.conf".into() });
    }
    let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
    for d in [
        format!("/lib/{multiarch}"),
        format!("/usr/lib/{multiarch}"),
        "/lib64".into(),
        "/usr/lib64".into(),
        "/lib".into(),
        "/usr/lib".into(),
        "/usr/local/lib".into(),
        "/usr/local/cuda/lib64".into(),
        format!("/usr/lib/{multiarch}/nvshmem/12"),
        format!("/usr/lib/{multiarch}/nvshmem/13"),
    ] {
        dirs.push(SearchDir { dir: d.into(), via: "system dir".into() });
    }
    for sp in site_packages {
        for (sub, via) in [
            ("nvidia/nccl/lib", "python: nvidia/nccl"),
            ("torch/lib", "python: torch/lib"),
            ("nvidia/nvshmem/lib", "python: nvidia/nvshmem"),
        ] {
            dirs.push(SearchDir { dir: Path::new(sp).join(sub), via: via.into() });
        }
    }
    for (var, value) in homes {
        for sub in ["lib", "lib64"] {
            dirs.push(SearchDir { dir: Path::new(value).join(sub), via: var.clone() });
        }
    }
    dirs
}

/// Find the libraries in `dirs` and the loader cache, fold symlinks, read versions.
pub fn find(dirs: &[SearchDir], cache: &[(String, String)]) -> Libraries {
    let mut libs = Libraries::default();
    // real path -> LibFile, in first-seen order
    let mut nccl: BTreeMap<PathBuf, (usize, LibFile)> = BTreeMap::new();
    let mut nvshmem: BTreeMap<PathBuf, (usize, LibFile)> = BTreeMap::new();
    let mut order = 0usize;
    let mut seen_dirs = std::collections::HashSet::new();

    let mut add = |path: PathBuf, via: &str, libs_map: &mut BTreeMap<PathBuf, (usize, LibFile)>| {
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if !real.is_file() {
            return;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        order += 1;
        let e = libs_map.entry(real.clone()).or_insert_with(|| {
            (
                order,
                LibFile {
                    path: path.display().to_string(),
                    real_path: real.display().to_string(),
                    names: Vec::new(),
                    also_at: Vec::new(),
                    found_via: Vec::new(),
                    size: std::fs::metadata(&real).map(|m| m.len()).unwrap_or(0),
                    version: None,
                    cuda: None,
                    version_from: None,
                    nccl_support: None,
                    loader_default: false,
                    error: None,
                },
            )
        });
        if !e.1.names.contains(&name) {
            e.1.names.push(name);
        }
        let shown = path.display().to_string();
        if path.parent() != Path::new(&e.1.path).parent() && !e.1.also_at.contains(&shown) {
            e.1.also_at.push(shown);
        }
        if !e.1.found_via.iter().any(|v| v == via) {
            e.1.found_via.push(via.to_string());
        }
    };

    for d in dirs {
        let key = std::fs::canonicalize(&d.dir).unwrap_or_else(|_| d.dir.clone());
        let first_time = seen_dirs.insert((key.clone(), d.via.clone()));
        let Ok(rd) = std::fs::read_dir(&d.dir) else { continue };
        if !first_time {
            continue;
        }
        libs.searched.push(Searched { dir: d.dir.display().to_string(), via: d.via.clone() });
        let mut names: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if is_nccl_name(&n) {
                add(p, &d.via, &mut nccl);
            } else if is_nvshmem_name(&n) {
                add(p, &d.via, &mut nvshmem);
            }
        }
    }
    for (name, path) in cache {
        if is_nccl_name(name) {
            add(path.into(), "loader cache", &mut nccl);
        } else if is_nvshmem_name(name) {
            add(path.into(), "loader cache", &mut nvshmem);
        }
    }

    let mut nccl: Vec<_> = nccl.into_values().collect();
    nccl.sort_by_key(|(o, _)| *o);
    let mut nvshmem: Vec<_> = nvshmem.into_values().collect();
    nvshmem.sort_by_key(|(o, _)| *o);
    libs.nccl = nccl.into_iter().map(|(_, l)| l).collect();
    libs.nvshmem = nvshmem.into_iter().map(|(_, l)| l).collect();

    mark_loader_default(&mut libs.nccl, dirs, cache, "libnccl.so.2");
    mark_loader_default(&mut libs.nvshmem, dirs, cache, "libnvshmem_host.so.3");

    for l in &mut libs.nccl {
        match read_nccl_version(Path::new(&l.real_path)) {
            Ok(Some((v, cuda, how))) => {
                l.version = Some(v);
                l.cuda = cuda;
                l.version_from = Some(how);
            }
            Ok(None) => l.error = Some("no NCCL version string in the file".into()),
            Err(e) => l.error = Some(format!("cannot read: {e}")),
        }
    }
    for l in &mut libs.nvshmem {
        let p = Path::new(&l.real_path);
        match read_nvshmem(p) {
            Ok((facts, how)) => {
                let needed = elf::needed(p).unwrap_or_default();
                let needs_nccl = needed.iter().any(|n| is_nccl_name(n));
                l.version = facts.version.clone().or_else(|| version_from_name(p));
                l.version_from = Some(if facts.version.is_some() { how.to_string() } else { "file name".into() });
                if l.version.is_none() {
                    l.version_from = None;
                }
                l.nccl_support = Some(facts.support(needs_nccl));
            }
            Err(e) => l.error = Some(format!("cannot read: {e}")),
        }
    }
    libs
}

/// The loader searches LD_LIBRARY_PATH, then its cache, then the default folders.
fn mark_loader_default(list: &mut [LibFile], dirs: &[SearchDir], cache: &[(String, String)], soname: &str) {
    let from_llp = dirs.iter().filter(|d| d.via == "LD_LIBRARY_PATH").map(|d| d.dir.join(soname)).find(|p| p.is_file());
    let from_cache = || cache.iter().find(|(n, _)| n == soname).map(|(_, p)| PathBuf::from(p));
    let from_default =
        || dirs.iter().filter(|d| d.via == "system dir").map(|d| d.dir.join(soname)).find(|p| p.is_file());
    let Some(choice) = from_llp.or_else(from_cache).or_else(from_default) else { return };
    let real = std::fs::canonicalize(&choice).unwrap_or(choice);
    for l in list {
        l.loader_default = Path::new(&l.real_path) == real;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_version_prefers_the_cuda_form() {
        let b = b"NCCL version %s\0Prints NCCL version information only.\0NCCL version 2.32.3 compiled with CUDA 13.4\0NCCL version 2.32.3+cuda13.4\0";
        assert_eq!(nccl_version_in(b), Some(("2.32.3".into(), Some("13.4".into()))));
    }

    #[test]
    fn nccl_version_without_cuda_suffix() {
        assert_eq!(nccl_version_in(b"xx\0NCCL version 2.18.1\0"), Some(("2.18.1".into(), None)));
        assert_eq!(nccl_version_in(b"NCCL version %s\0NCCL version information\0"), None);
    }

    #[test]
    fn names() {
        assert!(is_nccl_name("libnccl.so"));
        assert!(is_nccl_name("libnccl.so.2"));
        assert!(is_nccl_name("libnccl.so.2.28.3"));
        assert!(!is_nccl_name("libnccl-net.so"));
        assert!(!is_nccl_name("libnccl_static.a"));
        assert!(!is_nccl_name("libnccl.so.2.bak"));
        assert!(!is_nccl_name("libnccl.so."));
        assert!(is_nvshmem_name("libnvshmem_host.so.3"));
        assert!(!is_nvshmem_name("nvshmem_bootstrap_uid.so.3"));
    }

    #[test]
    fn ldconfig_lines() {
        let t = "3 libs found in cache `/etc/ld.so.cache'\n\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n";
        let v = parse_ldconfig(t);
        assert_eq!(v[0], ("libnccl.so.2".into(), "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into()));
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn nvshmem_support_reasoning() {
        let mut f = NvshmemFacts::default();
        f.feed(b"NVSHMEM_ARTIFACT_VERSION=3.8.0 NVSHMEM_USE_NCCL=OFF NVSHMEM_USE_GDRCOPY=ON\0");
        assert_eq!(f.version.as_deref(), Some("3.8.0"));
        assert_eq!(f.use_nccl, Some(false));
        assert_eq!(f.support(false).built_with_nccl, Some(false));
        let mut g = NvshmemFacts::default();
        g.feed(b"libnccl.so.2\0ncclCommInitRank\0");
        assert_eq!(g.support(false).built_with_nccl, Some(true));
        assert!(g.support(false).evidence.contains("dlopen"));
        assert_eq!(NvshmemFacts::default().support(false).built_with_nccl, Some(false));
    }

    #[test]
    fn chunked_scan_finds_a_string_across_a_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("libnccl.so.2");
        // The first read takes 8 MiB + 4 KiB; the string straddles its end.
        let mut data = vec![b'x'; (8 << 20) + 4096 - 5];
        data.extend_from_slice(b"NCCL version 2.21.5+cuda12.4\0");
        data.extend_from_slice(&[b'y'; 100]);
        std::fs::write(&p, &data).unwrap();
        let (v, cuda, how) = read_nccl_version(&p).unwrap().unwrap();
        assert_eq!((v.as_str(), cuda.as_deref(), how.as_str()), ("2.21.5", Some("12.4"), "file scan"));
    }

    #[test]
    fn file_name_is_the_last_resort() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("libnccl.so.2.19.3");
        std::fs::write(&p, b"no version here").unwrap();
        let (v, _, how) = read_nccl_version(&p).unwrap().unwrap();
        assert_eq!((v.as_str(), how.as_str()), ("2.19.3", "file name"));
    }
}
