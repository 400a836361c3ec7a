//! `epdoctor nccl` and `repro --nccl / --bisect-nccl` against a package index served on 127.0.0.1
//! by the test itself (std::net), serving small wheels the test builds: a fake libnccl.so.2 (its
//! first line the version, for the stand-in ranks, then the `NCCL version` line epdoctor reads) and
//! a dist-info. Nothing here reaches the network or needs a GPU.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common;

const PKG: &str = "nvidia-nccl-cu12";

fn b64url(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..=c.len() {
            s.push(T[(n >> (18 - 6 * k) & 63) as usize] as char);
        }
    }
    s
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The fake library of a release.
fn fake_lib(version: &str) -> Vec<u8> {
    let mut v = format!("{version}\n\0NCCL version {version}+cuda12.6\0").into_bytes();
    v.extend(std::iter::repeat_n(b'x', 5000));
    v
}

fn wheel_name(version: &str) -> String {
    format!("nvidia_nccl_cu12-{version}-py3-none-manylinux2014_{}.whl", std::env::consts::ARCH)
}

/// A wheel as NVIDIA lays them out; `record_lie` writes a wrong hash for the library in RECORD.
fn wheel(version: &str, record_lie: bool) -> Vec<u8> {
    let lib = fake_lib(version);
    let di = format!("nvidia_nccl_cu12-{version}.dist-info");
    let meta = format!("Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\nSummary: test wheel\n\nbody\n");
    let whl = format!(
        "Wheel-Version: 1.0\nGenerator: tests/suite/nccl.rs\nRoot-Is-Purelib: true\nTag: py3-none-manylinux2014_{}\n",
        std::env::consts::ARCH
    );
    let lib_hash = if record_lie { b64url(&Sha256::digest(b"other")) } else { b64url(&Sha256::digest(&lib)) };
    let mut record = format!("nvidia/nccl/lib/libnccl.so.2,sha256={lib_hash},{}\n", lib.len());
    for (n, b) in [("METADATA", &meta), ("WHEEL", &whl)] {
        record.push_str(&format!("{di}/{n},sha256={},{}\n", b64url(&Sha256::digest(b.as_bytes())), b.len()));
    }
    record.push_str(&format!("{di}/RECORD,,\n"));
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let o = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in [
        ("nvidia/__init__.py".to_string(), Vec::new()),
        ("nvidia/nccl/lib/libnccl.so.2".to_string(), lib),
        (format!("{di}/METADATA"), meta.into_bytes()),
        (format!("{di}/WHEEL"), whl.into_bytes()),
        (format!("{di}/RECORD"), record.into_bytes()),
    ] {
        w.start_file(name, o).unwrap();
        w.write_all(&data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[derive(Clone, Copy, PartialEq)]
enum Page {
    Json,
    Html,
}

/// A small package index on 127.0.0.1: `/simple/nvidia-nccl-cu12/` and `/files/<wheel>`.
struct Index {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Every request path, in order.
    log: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Serve {
    page: Page,
    /// filename -> (bytes, the sha256 the page lists)
    files: BTreeMap<String, (Vec<u8>, String)>,
}

impl Index {
    fn start(versions: &[&str], page: Page) -> Index {
        Index::start_with(versions, page, |_, _| {})
    }

    /// `tweak(version, entry)` may change a file's bytes or its listed hash.
    fn start_with(versions: &[&str], page: Page, tweak: impl Fn(&str, &mut (Vec<u8>, String))) -> Index {
        let mut files = BTreeMap::new();
        for v in versions {
            let w = wheel(v, false);
            let mut e = (w.clone(), hex(&Sha256::digest(&w)));
            tweak(v, &mut e);
            files.insert(wheel_name(v), e);
        }
        let serve = Arc::new(Serve { page, files });
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (s2, l2) = (stop.clone(), log.clone());
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if s2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(c) = conn else { continue };
                let (serve, log) = (serve.clone(), l2.clone());
                std::thread::spawn(move || handle(c, &serve, &log));
            }
        });
        Index { port, stop, log, thread: Some(thread) }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/simple/", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn downloads(&self) -> Vec<String> {
        self.requests().into_iter().filter(|r| r.starts_with("/files/")).collect()
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn handle(mut c: TcpStream, s: &Serve, log: &Mutex<Vec<String>>) {
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut accept = String::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h.strip_prefix("Accept:").or_else(|| h.strip_prefix("accept:")) {
            accept = v.trim().to_string();
        }
    }
    log.lock().unwrap().push(path.clone());
    let (status, ctype, body): (&str, &str, Vec<u8>) = if path == format!("/simple/{PKG}/") {
        if s.page == Page::Json && accept.contains("json") {
            let files: Vec<Value> = s
                .files
                .iter()
                .map(|(n, (b, h))| {
                    serde_json::json!({"filename": n, "url": format!("../../files/{n}"), "hashes": {"sha256": h}, "size": b.len()})
                })
                .collect();
            let j = serde_json::json!({"meta": {"api-version": "1.1"}, "name": PKG, "files": files});
            ("200 OK", "application/vnd.pypi.simple.v1+json", j.to_string().into_bytes())
        } else {
            let mut h = String::from("<!DOCTYPE html><html><body><h1>Links</h1>\n");
            for (n, (_, sha)) in &s.files {
                h.push_str(&format!("<a href=\"/files/{n}#sha256={sha}\">{n}</a><br/>\n"));
            }
            h.push_str("</body></html>\n");
            ("200 OK", "text/html", h.into_bytes())
        }
    } else if let Some((b, _)) = path.strip_prefix("/files/").and_then(|n| s.files.get(n)) {
        ("200 OK", "application/octet-stream", b.clone())
    } else {
        ("404 Not Found", "text/plain", b"not found\n".to_vec())
    };
    let _ = write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = c.write_all(&body);
}

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let e = Env { dir: tempfile::tempdir().unwrap() };
        std::fs::create_dir(e.shm()).unwrap();
        e
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("xdg").join("epdoctor").join("nccl")
    }
    fn shm(&self) -> PathBuf {
        self.dir.path().join("shm")
    }
    /// epdoctor with this test's cache and index, its own HTTP client, no proxy.
    fn cmd(&self, index: &str) -> std::process::Command {
        let mut c = common::std_epdoctor();
        c.env("XDG_CACHE_HOME", self.dir.path().join("xdg"))
            .env("PIP_INDEX_URL", index)
            .env("EPDOCTOR_PIP", "off")
            .env("EPDOCTOR_SHM_DIR", self.shm())
            .env_remove("PIP_FIND_LINKS")
            .env_remove("PIP_EXTRA_INDEX_URL");
        for v in ["ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            c.env_remove(v);
        }
        c
    }
    /// What the cache folder holds (names), hidden staging folders included.
    fn cache_names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.cache())
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn out(c: &mut std::process::Command) -> Output {
    c.stdin(std::process::Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn stand_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro/standin-rank.sh")
}

#[test]
fn fetch_checks_the_sha256_keeps_the_library_and_reuses_it() {
    for page in [Page::Json, Page::Html] {
        let idx = Index::start(&["2.21.5", "2.22.3", "2.23.4"], page);
        let e = Env::new();
        let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.3", "--cuda", "12"]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let lib = e.cache().join("2.22.3-cu12").join("libnccl.so.2");
        assert_eq!(text(&o.stdout), format!("2.22.3-cu12 {} (fetched)\n", lib.display()));
        assert_eq!(std::fs::read(&lib).unwrap(), fake_lib("2.22.3"));
        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(e.cache().join("2.22.3-cu12/entry.json")).unwrap()).unwrap();
        assert_eq!(meta["wheel_sha256"], hex(&Sha256::digest(wheel("2.22.3", false))));
        assert_eq!(meta["lib_sha256"], hex(&Sha256::digest(fake_lib("2.22.3"))));
        assert_eq!((meta["nccl_version"].as_str(), meta["nccl_cuda"].as_str()), (Some("2.22.3"), Some("12.6")));
        assert_eq!(meta["via"], "http");
        assert_eq!(meta["package"], PKG);
        assert!(text(&o.stderr).contains("sha256 matches the index"), "{}", text(&o.stderr));
        assert_eq!(idx.downloads(), [format!("/files/{}", wheel_name("2.22.3"))]);
        // Only the entry is left: the wheel and the staging folder are gone.
        assert_eq!(e.cache_names(), ["2.22.3-cu12"]);
        assert_eq!(std::fs::read_dir(e.cache().join("2.22.3-cu12")).unwrap().count(), 2);

        // Again: from the cache, nothing downloaded.
        let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.3", "--cuda", "12"]));
        assert_eq!(text(&o.stdout), format!("2.22.3-cu12 {} (already cached)\n", lib.display()));
        assert_eq!(idx.downloads().len(), 1);
        // `path` prints the library alone (for LD_PRELOAD=$(...)), offline too.
        let o = out(e.cmd(&idx.url()).args(["nccl", "path", "2.22.3", "--cuda", "12", "--offline"]));
        assert_eq!((o.status.code(), text(&o.stdout)), (Some(0), format!("{}\n", lib.display())));
        let o = out(e.cmd(&idx.url()).args(["nccl", "list", "--available", "--cuda", "12"]));
        let l = text(&o.stdout);
        assert!(l.contains("2.22.3         cu12  NCCL 2.22.3+cuda12.6"), "{l}");
        assert!(l.contains(&format!("{PKG} on {} (3 releases for", idx.url())), "{l}");
        assert!(l.lines().any(|x| x.contains("2.22.3") && x.contains("cached")), "{l}");
        assert!(l.lines().any(|x| x.contains("2.23.4") && !x.contains("cached")), "{l}");
    }
}

#[test]
fn a_release_the_index_lacks_is_exit_2_with_the_nearest_ones() {
    let idx = Index::start(&["2.21.5", "2.22.3", "2.23.4"], Page::Json);
    let e = Env::new();
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.9", "--cuda", "12"]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("NCCL 2.22.9 does not exist as nvidia-nccl-cu12 on"), "{err}");
    assert!(err.contains("nearest releases of nvidia-nccl-cu12: 2.21.5, 2.22.3, 2.23.4"), "{err}");
    // A CUDA major with no package at all (HTTP 404 for its page).
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.3", "--cuda", "13"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("does not exist as nvidia-nccl-cu13"), "{}", text(&o.stderr));
    // Not a release at all: a usage error, before any request.
    let before = idx.requests().len();
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22", "--cuda", "12"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("\"2.22\" is not an NCCL release"));
    assert_eq!(idx.requests().len(), before);
    assert!(e.cache_names().is_empty(), "{:?}", e.cache_names());
}

#[test]
fn a_checksum_mismatch_keeps_nothing_and_says_what_to_run() {
    let idx = Index::start_with(&["2.22.3"], Page::Json, |_, f| f.1 = hex(&Sha256::digest(b"another wheel")));
    let e = Env::new();
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.3", "--cuda", "12"]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(err.contains(&format!("lists {}", hex(&Sha256::digest(b"another wheel")))), "{err}");
    assert!(err.contains("pip download --no-deps --only-binary=:all: nvidia-nccl-cu12==2.22.3 -d DIR"), "{err}");
    assert!(e.cache_names().is_empty(), "nothing partial: {:?}", e.cache_names());

    // A wheel whose library does not match its own RECORD (the index's hash is right).
    let idx = Index::start_with(&["2.23.4"], Page::Html, |v, f| {
        f.0 = wheel(v, true);
        f.1 = hex(&Sha256::digest(&f.0));
    });
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.23.4", "--cuda", "12"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("does not match the wheel's RECORD"), "{}", text(&o.stderr));
    assert!(e.cache_names().is_empty(), "{:?}", e.cache_names());
}

#[test]
fn no_network_and_offline_are_exit_2_with_what_to_run_by_hand() {
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = Env::new();
    let url = format!("http://127.0.0.1:{closed}/simple/");
    let o = out(e.cmd(&url).args(["nccl", "fetch", "2.22.3", "--cuda", "12"]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("cannot read the package index at {url}nvidia-nccl-cu12/")), "{err}");
    assert!(err.contains("pip download --no-deps"), "{err}");

    let idx = Index::start(&["2.22.3"], Page::Json);
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.3", "--cuda", "12", "--offline"]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--offline: NCCL 2.22.3 for CUDA 12 is not in the cache"), "{err}");
    assert!(err.contains("run `epdoctor nccl fetch 2.22.3 --cuda 12`"), "{err}");
    let o =
        out(e.cmd(&idx.url()).args(["repro", "--nccl", "2.22.3", "--cuda", "12", "--offline", "--teardown", "abort"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("is not in the cache"), "{}", text(&o.stderr));
    assert!(idx.requests().is_empty(), "--offline asked the index: {:?}", idx.requests());
}

#[test]
fn clean_removes_entries_and_stale_staging_folders() {
    let idx = Index::start(&["2.22.3", "2.23.4"], Page::Json);
    let e = Env::new();
    let o = out(e.cmd(&idx.url()).args(["nccl", "fetch", "2.22.3", "2.23.4", "--cuda", "12", "-q"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "-q: {}", text(&o.stderr));
    // What a killed fetch leaves: a staging folder of a process that is gone.
    std::fs::create_dir(e.cache().join(".tmp-2.24.3-cu12-999999999-1")).unwrap();
    // Without --yes nothing is deleted: it says what would go (issue 43, point 7).
    for args in [vec!["nccl", "clean"], vec!["nccl", "clean", "2.23.4"]] {
        let o = out(e.cmd(&idx.url()).args(&args));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.contains("2.23.4-cu12") && err.contains("--yes"), "{err}");
        assert_eq!(e.cache_names().len(), 3, "{args:?} deleted something");
    }
    let o = out(e.cmd(&idx.url()).args(["nccl", "clean", "2.23.4", "--yes"]));
    assert!(text(&o.stdout).contains("2.23.4-cu12"), "{}", text(&o.stdout));
    assert_eq!(e.cache_names(), [".tmp-2.24.3-cu12-999999999-1", "2.22.3-cu12"]);
    let o = out(e.cmd(&idx.url()).args(["nccl", "clean", "--yes"]));
    assert_eq!(o.status.code(), Some(0));
    assert!(e.cache_names().is_empty(), "{:?}", e.cache_names());
    let o = out(e.cmd(&idx.url()).args(["nccl", "clean", "--yes"]));
    assert!(text(&o.stdout).starts_with("nothing to remove"));
}

/// `nccl path` of a release not in the cache says how to fetch it and downloads nothing (issue 43,
/// point 7: `LD_PRELOAD=$(epdoctor nccl path X)` once fetched 191 MB unasked).
#[test]
fn path_of_an_uncached_release_never_downloads() {
    let idx = Index::start(&["2.22.3", "2.23.4"], Page::Json);
    let e = Env::new();
    let o = out(e.cmd(&idx.url()).args(["nccl", "path", "2.23.4", "--cuda", "12"]));
    assert_ne!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("epdoctor nccl fetch 2.23.4 --cuda 12"), "{}", text(&o.stderr));
    assert!(idx.downloads().is_empty(), "{:?}", idx.downloads());
    assert!(e.cache_names().is_empty(), "{:?}", e.cache_names());
}

#[test]
fn pip_downloads_where_it_exists() {
    let pip_ok = std::process::Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !pip_ok {
        eprintln!("skipped: no `python3 -m pip` here (the HTTP client path is tested above)");
        return;
    }
    let idx = Index::start(&["2.22.3"], Page::Html);
    let e = Env::new();
    let o = out(e
        .cmd(&idx.url())
        .env("EPDOCTOR_PIP", "python3 -m pip")
        .env("PIP_NO_INPUT", "1")
        .args(["nccl", "fetch", "2.22.3", "--cuda", "12"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(e.cache().join("2.22.3-cu12/entry.json")).unwrap()).unwrap();
    assert_eq!(meta["via"], "pip");
    assert_eq!(meta["wheel_sha256"], hex(&Sha256::digest(wheel("2.22.3", false))));
    assert!(idx.downloads().len() == 1, "{:?}", idx.requests());
    assert_eq!(e.cache_names(), ["2.22.3-cu12"]);
}

fn cells(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("cells.json")).unwrap()).unwrap()
}

fn rules(c: &Value) -> Vec<String> {
    c["rules"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn repro_with_releases_and_system_as_the_nccl_axis_on_stand_in_ranks() {
    let idx = Index::start(&["2.22.3", "2.23.4"], Page::Json);
    let e = Env::new();
    let run = e.dir.path().join("run");
    let o = out(e
        .cmd(&idx.url())
        .env("EPDOCTOR_WORKER_CMD", stand_in())
        .args(["repro", "--ranks", "2", "--teardown", "clean,abort", "--nccl", "2.22.3,2.23.4", "--nccl", "system"])
        .args(["--cuda", "12", "--timeout", "60", "--out"])
        .arg(&run));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v = cells(&run);
    let cs = v["cells"].as_array().unwrap();
    assert_eq!(cs.len(), 6);
    let ran: Vec<(&str, bool)> = cs
        .iter()
        .map(|c| (c["nccl_version"].as_str().unwrap(), rules(c).contains(&"nccl-abort-pair".to_string())))
        .collect();
    assert_eq!(
        ran,
        [
            ("2.22.3", false),
            ("2.22.3", true),
            ("2.23.4", false),
            ("2.23.4", false),
            ("2.28.3", false),
            ("2.28.3", false)
        ]
    );
    // The cells are named by release, not lib1/lib2.
    assert!(cs[1]["id"].as_str().unwrap().starts_with("002-2.22.3-abort"), "{}", cs[1]["id"]);
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("nccl-abort-pair: in 1 of 6 settings, exactly when nccl-lib=2.22.3 and teardown=abort"),
        "{stdout}"
    );
    // Not a plain run: no hint.
    assert!(!stdout.contains("no longer prints"), "{stdout}");
}

#[test]
fn a_plain_run_on_a_newer_nccl_says_which_command_shows_the_warnings() {
    let e = Env::new();
    let run = e.dir.path().join("run");
    let o = out(e
        .cmd("http://127.0.0.1:9/simple/")
        .env("EPDOCTOR_WORKER_CMD", stand_in())
        .args(["repro", "--ranks", "2", "--teardown", "clean,abort", "--timeout", "60", "--out"])
        .arg(&run));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(s.contains("this machine's NCCL (2.28.3) no longer prints the abort-path warnings"), "{s}");
    assert!(s.contains("To see them: epdoctor repro --nccl 2.22.3 --teardown abort"), "{s}");
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("epdoctor repro --nccl 2.22.3 --teardown abort"), "{md}");
}

#[test]
fn bisect_over_releases_with_stand_in_ranks_names_the_release_that_silenced_the_pair() {
    let all = ["2.19.3", "2.20.5", "2.21.5", "2.22.3", "2.23.4", "2.24.3", "2.25.1", "2.26.2"];
    let idx = Index::start(&all, Page::Json);
    let e = Env::new();
    let run = e.dir.path().join("run");
    let o = out(e
        .cmd(&idx.url())
        .env("EPDOCTOR_WORKER_CMD", stand_in())
        .args(["repro", "--ranks", "2", "--teardown", "abort", "--bisect-nccl", "2.20.0..2.26.2"])
        .args(["--finding", "nccl-abort-pair", "--cuda", "12", "--timeout", "60", "--out"])
        .arg(&run));
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}\n{stdout}", text(&o.stderr));
    assert!(stdout.contains("Answer: `nccl-abort-pair` last seen in 2.22.3, gone from 2.23.4"), "{stdout}");
    let b = &cells(&run)["bisect"];
    assert_eq!(b["releases"].as_array().unwrap().len(), 7, "2.19.3 is outside the range: {b}");
    let probes = b["probes"].as_array().unwrap();
    // 7 releases: at most ceil(log2 7) + 1 = 4 probed, and only those were downloaded.
    assert!(probes.len() <= 4, "{b}");
    assert_eq!(b["max_probes"], 4);
    assert_eq!(idx.downloads().len(), probes.len(), "{:?}", idx.downloads());
    let states: BTreeMap<&str, &str> =
        probes.iter().map(|p| (p["release"].as_str().unwrap(), p["state"].as_str().unwrap())).collect();
    // The first release, then halving: 2.23.4 (absent), 2.21.5 (seen), 2.22.3 (seen).
    let order: Vec<&str> = probes.iter().map(|p| p["release"].as_str().unwrap()).collect();
    assert_eq!(order, ["2.20.5", "2.23.4", "2.21.5", "2.22.3"]);
    assert_eq!(states["2.20.5"], "seen");
    assert_eq!((states.get("2.22.3"), states.get("2.23.4")), (Some(&"seen"), Some(&"absent")), "{states:?}");
    // Each probe is an ordinary cell, explained as such.
    let cs = cells(&run)["cells"].as_array().unwrap().clone();
    assert_eq!(cs.len(), probes.len());
    for c in &cs {
        let seen = rules(c).contains(&"nccl-abort-pair".to_string());
        assert_eq!(seen, states[c["nccl_version"].as_str().unwrap()] == "seen");
    }

    // The same, offline: only the cached releases are candidates, nothing is asked of the index.
    let before = idx.requests().len();
    let run2 = e.dir.path().join("run2");
    let o = out(e
        .cmd(&idx.url())
        .env("EPDOCTOR_WORKER_CMD", stand_in())
        .args(["repro", "--ranks", "2", "--teardown", "abort", "--bisect-nccl", "2.20.0..2.26.2", "--offline"])
        .args(["--finding", "nccl-abort-pair", "--cuda", "12", "--timeout", "60", "--out"])
        .arg(&run2));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("last seen in 2.22.3, gone from 2.23.4"), "{}", text(&o.stdout));
    assert_eq!(idx.requests().len(), before);
}

#[test]
fn bisect_usage_errors_are_found_before_anything_runs() {
    let idx = Index::start(&["2.22.3", "2.23.4"], Page::Json);
    let e = Env::new();
    for (args, want) in [
        (vec!["--bisect-nccl", "2.23.4..2.22.3", "--finding", "nccl-abort-pair"], "FROM must be older than TO"),
        (
            vec!["--bisect-nccl", "2.22.3..2.23.4", "--finding", "no-such-rule"],
            "--finding no-such-rule: no rule has that id",
        ),
        (vec!["--bisect-nccl", "2.24.0..2.26.0", "--finding", "hang"], "0 release(s) on the index in that range"),
        (vec!["--nccl", "latest"], "\"latest\": not a release"),
        (vec!["--nccl", "2.22.3,2.22.3"], "--nccl 2.22.3 given twice"),
        (vec!["--nccl", "/nonexistent/libnccl.so.2"], "/nonexistent/libnccl.so.2"),
    ] {
        let o = out(e
            .cmd(&idx.url())
            .env("EPDOCTOR_WORKER_CMD", stand_in())
            .args(["repro", "--cuda", "12", "--out"])
            .arg(e.dir.path().join("never"))
            .args(&args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(want), "{args:?}: {}", text(&o.stderr));
        assert!(!e.dir.path().join("never").exists(), "{args:?}: a run folder was made");
    }
    // clap: --finding needs --bisect-nccl and the other way round.
    let o = out(e.cmd(&idx.url()).args(["repro", "--finding", "hang"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(idx.downloads().is_empty());
}

/// A torch whose libtorch_cuda.so calls an NCCL function the preloaded library lacks is refused
/// before the run, naming the function. Needs a C compiler to build the two small libraries.
#[test]
fn a_torch_needing_newer_nccl_symbols_is_refused_up_front() {
    if std::process::Command::new("cc").arg("--version").output().is_err() {
        eprintln!("skipped: no C compiler (cc) to build the test libraries");
        return;
    }
    let e = Env::new();
    let d = e.dir.path();
    let cc = |src: &str, out: &Path, extra: &[&str]| {
        let c = d.join("x.c");
        std::fs::write(&c, src).unwrap();
        let o = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(out)
            .arg(&c)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    let nccl = d.join("libnccl.so.2");
    cc("const char *v = \"NCCL version 2.22.3+cuda12.6\"; int ncclCommInitRank(void) { return 0; }\n", &nccl, &[]);
    let torch = d.join("site").join("torch");
    std::fs::create_dir_all(torch.join("lib")).unwrap();
    std::fs::write(torch.join("__init__.py"), "raise SystemExit('not to be imported')\n").unwrap();
    std::fs::write(torch.join("version.py"), "__version__ = '2.8.0+cu128'\n").unwrap();
    cc(
        "int ncclCommInitRank(void); int ncclCommShrink(void);\nint f(void) { return ncclCommInitRank() + ncclCommShrink(); }\n",
        &torch.join("lib").join("libtorch_cuda.so"),
        &["-Wl,--allow-shlib-undefined"],
    );
    let o = out(e
        .cmd("http://127.0.0.1:9/simple/")
        .env("PYTHONPATH", d.join("site"))
        .args(["repro", "--nccl"])
        .arg(&nccl)
        .args(["--out"])
        .arg(d.join("run"))
        .args(["--", "python3", "-c", "print(1)"]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("torch 2.8.0+cu128"), "{err}");
    assert!(err.contains("calls ncclCommShrink, which NCCL 2.22.3"), "{err}");
    assert!(err.contains("torch 2.8.0+cu128's PyPI wheel pins NCCL 2.27.3"), "{err}");
    assert!(!d.join("run").exists());
}

/// clap's own checks of the whole command line (a clash such as a `version` argument beside
/// `--version` panics only when that subcommand is parsed).
#[test]
fn the_command_line_definition_is_consistent() {
    <epdoctor::cli::Cli as clap::CommandFactory>::command().debug_assert();
}
