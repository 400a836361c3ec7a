//! NCCL releases by version: the `nvidia-nccl-cu<major>` wheel on the package index the user's
//! pip is configured for, checked against the index's sha256, its libnccl.so.2 kept in the user
//! cache (cache.rs) and reused. `repro --nccl` and `epdoctor nccl` go through `Fetcher`.
//!
//! Test hooks (environment, documented in docs/repro.md): `EPDOCTOR_PIP=off` downloads with
//! epdoctor's own client even where pip exists; `EPDOCTOR_PIP=COMMAND` names the pip to run.

pub mod cache;
pub mod http;
pub mod index;
pub mod release;
pub mod symbols;
pub mod torch;
pub mod wheel;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

pub use cache::{Cache, Entry};
pub use release::{Release, Spec};

pub const PIP_ENV: &str = "EPDOCTOR_PIP";
/// The oldest CUDA major with an `nvidia-nccl-cu<major>` package.
const OLDEST_MAJOR: u32 = 11;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--cuda`: the one CUDA major to use; None: the driver's, then older ones.
    pub cuda: Option<u32>,
    /// Use only the cache.
    pub offline: bool,
    /// No progress lines on stderr.
    pub quiet: bool,
}

/// Where a fetched library came from, for the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    Cached,
    Downloaded,
}

pub struct Fetcher {
    pub cache: Cache,
    opts: Options,
    index: RefCell<Option<String>>,
    pip: RefCell<Option<Option<Vec<String>>>>,
    /// Per CUDA major: the wheels on the index (None: the package does not exist there).
    pages: RefCell<HashMap<u32, Option<BTreeMap<Release, index::File>>>>,
}

/// The command a user can run where epdoctor cannot fetch.
pub fn by_hand(package: &str, r: &str) -> String {
    let glob = format!("{}-{r}-*.whl", package.replace('-', "_"));
    format!(
        "by hand, on a machine that reaches the index:\n  pip download --no-deps --only-binary=:all: {package}=={r} -d DIR\n  \
         unzip -p DIR/{glob} {lib} > libnccl.so.2\nthen give the file: `epdoctor repro --nccl ./libnccl.so.2` (or LD_PRELOAD it in your own run)",
        lib = wheel::LIB_PATH
    )
}

impl Fetcher {
    pub fn new(opts: Options) -> Result<Fetcher> {
        Ok(Fetcher::with_cache(Cache::from_env()?, opts))
    }

    pub fn with_cache(cache: Cache, opts: Options) -> Fetcher {
        Fetcher { cache, opts, index: RefCell::new(None), pip: RefCell::new(None), pages: RefCell::new(HashMap::new()) }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    fn say(&self, line: &str) {
        if !self.opts.quiet {
            eprintln!("epdoctor: {line}");
        }
    }

    /// The CUDA majors to try, best first: `--cuda`, else the driver's and the older ones (a
    /// driver runs code built for older CUDA).
    pub fn majors(&self) -> Result<Vec<u32>> {
        if let Some(m) = self.opts.cuda {
            return Ok(vec![m]);
        }
        match driver_major() {
            Some(d) => Ok((OLDEST_MAJOR..=d.max(OLDEST_MAJOR)).rev().collect()),
            None => Err(crate::error::usage_one(
                "no NVIDIA driver here to read the CUDA version from: give --cuda 12 or --cuda 13 (the CUDA major of the \
                 machine the library is for)",
            )),
        }
    }

    /// The index URL: PIP_INDEX_URL, else pip's configured index-url, else PyPI.
    pub fn index_url(&self) -> String {
        if let Some(u) = self.index.borrow().as_ref() {
            return u.clone();
        }
        let u = std::env::var("PIP_INDEX_URL")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
            .or_else(|| self.pip().and_then(|p| pip_config_index(&p)))
            .unwrap_or_else(|| index::DEFAULT_INDEX.to_string());
        *self.index.borrow_mut() = Some(u.clone());
        u
    }

    /// The pip command to download with, if any (`EPDOCTOR_PIP`, else `python3 -m pip` when it runs).
    fn pip(&self) -> Option<Vec<String>> {
        if let Some(p) = self.pip.borrow().as_ref() {
            return p.clone();
        }
        let p = match std::env::var(PIP_ENV).ok().as_deref().map(str::trim) {
            Some("off" | "0" | "no" | "none" | "false") => None,
            Some(c) if !c.is_empty() && c != "auto" => Some(c.split_whitespace().map(String::from).collect()),
            _ => {
                let ok = Command::new("python3")
                    .args(["-m", "pip", "--version"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                ok.then(|| vec!["python3".into(), "-m".into(), "pip".into()])
            }
        };
        *self.pip.borrow_mut() = Some(p.clone());
        p
    }

    /// The wheels of `nvidia-nccl-cu<major>` that fit this machine; None when the index has no
    /// such package. A network failure is an error.
    pub fn available(&self, major: u32) -> Result<Option<BTreeMap<Release, index::File>>> {
        if let Some(p) = self.pages.borrow().get(&major) {
            return Ok(p.clone());
        }
        let pkg = index::package(major);
        let url = index::project_url(&self.index_url(), &pkg);
        let page = match http::get_page(&url, index::ACCEPT) {
            Ok(p) => Some(p),
            Err(http::HttpError::Status(404)) => None,
            Err(e) => bail!(
                "cannot read the package index at {url}: {e}\n(the index is PIP_INDEX_URL or pip's index-url; proxies come from \
                 HTTPS_PROXY / ALL_PROXY / NO_PROXY; --offline uses only the cache at {})\n{}",
                self.cache.root().display(),
                by_hand(&pkg, "VERSION")
            ),
        };
        let wheels = match page {
            Some(p) => {
                let files = index::parse_page(&p.body, p.content_type.as_deref(), &p.url)
                    .with_context(|| format!("reading the index page {url}"))?;
                Some(index::wheels(&files, &pkg, index::host_arch()))
            }
            None => None,
        };
        self.pages.borrow_mut().insert(major, wheels.clone());
        Ok(wheels)
    }

    /// The library of release `r`: from the cache, else fetched (not with --offline).
    pub fn get(&self, r: Release) -> Result<(Entry, Got)> {
        let majors = self.majors_or_cached(r)?;
        for &m in &majors {
            if let Some(e) = self.cache.get(r, m) {
                return Ok((e, Got::Cached));
            }
        }
        if self.opts.offline {
            let cached: Vec<String> =
                self.cache.list().0.iter().map(|e| format!("{}-cu{}", e.meta.release, e.meta.cuda_major)).collect();
            bail!(
                "--offline: NCCL {r} for CUDA {} is not in the cache ({}; it holds {}); run `epdoctor nccl fetch {r}{}` on a \
                 machine that reaches the package index, or give a libnccl.so path instead\n{}",
                majors.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(" or "),
                self.cache.root().display(),
                if cached.is_empty() { "nothing".to_string() } else { cached.join(", ") },
                self.opts.cuda.map(|m| format!(" --cuda {m}")).unwrap_or_default(),
                by_hand(&index::package(majors[0]), &r.to_string())
            );
        }
        let mut first_page: Option<(u32, BTreeMap<Release, index::File>)> = None;
        for &m in &majors {
            let Some(w) = self.available(m)? else { continue };
            if let Some(f) = w.get(&r) {
                return Ok((self.download(r, m, f)?, Got::Downloaded));
            }
            first_page.get_or_insert((m, w));
        }
        let near = first_page
            .as_ref()
            .map(|(m, w)| {
                let n: Vec<String> = index::nearest(w, r).iter().map(|x| x.to_string()).collect();
                format!(
                    "; nearest releases of {}: {}",
                    index::package(*m),
                    if n.is_empty() { "none".into() } else { n.join(", ") }
                )
            })
            .unwrap_or_default();
        bail!(
            "NCCL {r} does not exist as {} on {} for this machine ({}){near}; `epdoctor nccl list --available` lists the releases",
            majors.iter().map(|m| index::package(*m)).collect::<Vec<_>>().join(" or "),
            self.index_url(),
            index::host_arch(),
        )
    }

    /// Without --cuda and without a driver, a release already cached (any major) still resolves.
    fn majors_or_cached(&self, r: Release) -> Result<Vec<u32>> {
        match self.majors() {
            Ok(m) => Ok(m),
            Err(e) => {
                let mut cached: Vec<u32> = self
                    .cache
                    .list()
                    .0
                    .iter()
                    .filter(|x| Release::parse(&x.meta.release) == Some(r))
                    .map(|x| x.meta.cuda_major)
                    .collect();
                cached.sort_unstable_by(|a, b| b.cmp(a));
                if cached.is_empty() {
                    Err(e)
                } else {
                    Ok(cached)
                }
            }
        }
    }

    fn download(&self, r: Release, major: u32, f: &index::File) -> Result<Entry> {
        let pkg = index::package(major);
        let name = cache::entry_name(r, major);
        let Some(want) = f.sha256.clone() else {
            bail!(
                "the index lists no sha256 for {}: epdoctor installs no wheel it cannot check\n{}",
                f.filename,
                by_hand(&pkg, &r.to_string())
            );
        };
        let stage = self.cache.stage(&name)?;
        let size = f.size.map(|s| format!(", {:.1} MB", s as f64 / 1e6)).unwrap_or_default();
        let t0 = Instant::now();
        let (wheel_path, got, bytes, via) = match self.pip() {
            Some(pip) => {
                self.say(&format!("fetching NCCL {r} ({}{size}) with `{} download`", f.filename, pip.join(" ")));
                let (p, sha, n) = self.pip_download(&pip, &pkg, r, f, stage.path())?;
                (p, sha, n, "pip")
            }
            None => {
                self.say(&format!("fetching NCCL {r} ({}{size}) from {}", f.filename, f.url));
                let dest = stage.path().join(&f.filename);
                let bar = self.bar(f.size);
                let (sha, n) = http::download(&f.url, &dest, &mut |d, t| {
                    if let Some(t) = t {
                        bar.set_length(t);
                    }
                    bar.set_position(d);
                })
                .map_err(|e| anyhow!("downloading {}: {e}\n{}", f.url, by_hand(&pkg, &r.to_string())))?;
                bar.finish_and_clear();
                (dest, sha, n, "http")
            }
        };
        let download_s = t0.elapsed().as_secs_f64();
        if got != want {
            bail!(
                "checksum mismatch: {} has sha256 {got} but the index ({}) lists {want}; nothing was kept. A proxy or mirror \
                 may have altered it: try again, or fetch and check it by hand (`sha256sum`)\n{}",
                f.filename,
                self.index_url(),
                by_hand(&pkg, &r.to_string())
            );
        }
        let lib = stage.path().join(cache::LIB_FILE);
        let x = wheel::extract(&wheel_path, &lib)?;
        let _ = std::fs::remove_file(&wheel_path);
        if index::normalize(&x.name) != pkg || Release::parse(&x.version) != Some(r) {
            bail!("{}: its METADATA says {} {}, not {pkg} {r}", f.filename, x.name, x.version);
        }
        let (nv, ncuda, _) = crate::env::libs::read_nccl_version(&lib)
            .with_context(|| format!("reading {}", lib.display()))?
            .ok_or_else(|| anyhow!("{}: the library in {} reports no NCCL version", lib.display(), f.filename))?;
        if crate::model::version::Version::parse(&nv) != Some(r.version) {
            bail!("{}: the library in it reports NCCL {nv}, not {r}", f.filename);
        }
        let meta = cache::Meta {
            release: r.to_string(),
            cuda_major: major,
            package: pkg,
            wheel: f.filename.clone(),
            url: f.url.clone(),
            index: self.index_url(),
            wheel_sha256: got,
            wheel_bytes: bytes,
            lib_sha256: x.lib_sha256,
            lib_bytes: x.lib_bytes,
            nccl_version: nv,
            nccl_cuda: ncuda,
            via: via.into(),
            fetched_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            download_s,
        };
        let e = self.cache.commit(stage, &name, &meta)?;
        self.say(&format!(
            "NCCL {r} for CUDA {major}: wheel {:.1} MB in {download_s:.1} s (sha256 matches the index), libnccl.so.2 {:.1} MB at {}",
            bytes as f64 / 1e6,
            e.meta.lib_bytes as f64 / 1e6,
            e.lib.display()
        ));
        Ok(e)
    }

    fn bar(&self, len: Option<u64>) -> indicatif::ProgressBar {
        if self.opts.quiet || !std::io::stderr().is_terminal() {
            return indicatif::ProgressBar::hidden();
        }
        let b = indicatif::ProgressBar::new(len.unwrap_or(0));
        if let Ok(s) = indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta}") {
            b.set_style(s);
        }
        b
    }

    /// `pip download --no-deps` into `dir`; the wheel it saved, its sha256 and size.
    fn pip_download(
        &self,
        pip: &[String],
        pkg: &str,
        r: Release,
        f: &index::File,
        dir: &Path,
    ) -> Result<(PathBuf, String, u64)> {
        let out = Command::new(&pip[0])
            .args(&pip[1..])
            .args(["download", "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--progress-bar", "off", "-d"])
            .arg(dir)
            .arg(format!("{pkg}=={r}"))
            .env("PIP_INDEX_URL", self.index_url())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", pip.join(" ")))?;
        let tail = |b: &[u8]| {
            let t = String::from_utf8_lossy(b);
            t.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n  ")
        };
        if !out.status.success() {
            bail!(
                "`{} download {pkg}=={r}` failed ({}):\n  {}\n  {}\n{}",
                pip.join(" "),
                out.status,
                tail(&out.stdout),
                tail(&out.stderr),
                by_hand(pkg, &r.to_string())
            );
        }
        let got = dir.join(&f.filename);
        if !got.is_file() {
            let names: Vec<String> = std::fs::read_dir(dir)
                .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            bail!("pip saved {:?}, not the index's {} for this machine", names, f.filename);
        }
        let (sha, n) = http::sha256_file(&got).with_context(|| format!("reading {}", got.display()))?;
        Ok((got, sha, n))
    }

    /// Resolve one `--nccl` value to an axis value: a library path, or "" for the loader's choice.
    pub fn resolve(&self, spec: &Spec) -> Result<String> {
        match spec {
            Spec::Release(r) => Ok(self.get(*r)?.0.lib.to_string_lossy().into_owned()),
            other => resolve_given(other),
        }
    }

    /// Releases known in `[from, to]`: the index's (online) or the cache's (offline), distinct.
    pub fn releases_between(&self, from: Release, to: Release) -> Result<Vec<Release>> {
        let mut all = Vec::new();
        if self.opts.offline {
            let majors = self.majors().unwrap_or_default();
            for e in self.cache.list().0 {
                if majors.is_empty() || majors.contains(&e.meta.cuda_major) {
                    all.extend(Release::parse(&e.meta.release));
                }
            }
        } else {
            for m in self.majors()? {
                if let Some(w) = self.available(m)? {
                    all.extend(w.keys().copied());
                }
            }
        }
        Ok(release::distinct(all.into_iter().filter(|r| *r >= from && *r <= to).collect()))
    }
}

/// A `--nccl` value that needs no index: `system` ("") or a library's path (absolute).
pub fn resolve_given(spec: &Spec) -> Result<String> {
    match spec {
        Spec::System => Ok(String::new()),
        Spec::Path(p) => {
            let m = std::fs::metadata(p).with_context(|| format!("--nccl {}", p.display()))?;
            if !m.is_file() {
                bail!("--nccl {} is not a file (give the path of a libnccl.so)", p.display());
            }
            Ok(std::path::absolute(p).unwrap_or_else(|_| p.clone()).to_string_lossy().into_owned())
        }
        Spec::Release(r) => bail!("NCCL {r} is resolved through the index or the cache"),
    }
}

/// The driver's CUDA major (cuDriverGetVersion), when a driver is there.
pub fn driver_major() -> Option<u32> {
    if !crate::sys::cuda::present() {
        return None;
    }
    crate::sys::cuda::driver_version().ok().filter(|v| *v > 0).map(|v| v as u32 / 1000)
}

/// pip's configured index (`download.index-url`, else `global.index-url`), if any.
fn pip_config_index(pip: &[String]) -> Option<String> {
    let out = Command::new(&pip[0]).args(&pip[1..]).args(["config", "list"]).stdin(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches(['\'', '"']).to_string())
        })
    };
    get("download.index-url").or_else(|| get("global.index-url")).filter(|v| !v.is_empty())
}

/// The version the loader's libnccl.so.2 reports, with its path.
pub fn system_nccl() -> Option<(PathBuf, crate::model::version::Version)> {
    let p = crate::worker::libs::find_runtime_nccl()?;
    let (v, _, _) = crate::env::libs::read_nccl_version(&p).ok()??;
    Some((p, crate::model::version::Version::parse(&v)?))
}
