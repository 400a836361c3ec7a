//! HTTP(S) to the package index: the system's certificate store (so a TLS-inspecting proxy whose
//! root the system trusts works, as it does for pip and curl), the proxy variables (ALL_PROXY,
//! HTTPS_PROXY, HTTP_PROXY, NO_PROXY, read by ureq), bounded connect and first-byte times, no
//! bound on a download that keeps moving.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use ureq::ResponseExt;

/// Why a request failed: a missing page is not a network problem, and says so.
#[derive(Debug)]
pub enum HttpError {
    /// The server answered with this status.
    Status(u16),
    /// Nothing usable came back (DNS, connect, TLS, proxy, a cut connection).
    Network(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Status(s) => write!(f, "the server answered HTTP {s}"),
            HttpError::Network(e) => f.write_str(e),
        }
    }
}

fn classify(e: ureq::Error) -> HttpError {
    match e {
        ureq::Error::StatusCode(s) => HttpError::Status(s),
        ureq::Error::HostNotFound => HttpError::Network("host not found (DNS)".into()),
        ureq::Error::ConnectionFailed => HttpError::Network("connection failed".into()),
        ureq::Error::Timeout(t) => HttpError::Network(format!("timed out ({t})")),
        other => HttpError::Network(other.to_string()),
    }
}

fn agent() -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::PlatformVerifier).build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .timeout_recv_body(None)
        .user_agent(concat!("epdoctor/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// A page: its text, its content type, and the URL it came from after redirects.
pub struct Page {
    pub body: String,
    pub content_type: Option<String>,
    pub url: String,
}

pub fn get_page(url: &str, accept: &str) -> Result<Page, HttpError> {
    let mut r = agent().get(url).header("Accept", accept).call().map_err(classify)?;
    let final_url = r.get_uri().to_string();
    let content_type = r.headers().get("content-type").and_then(|v| v.to_str().ok()).map(String::from);
    let body = r.body_mut().with_config().limit(64 << 20).read_to_string().map_err(classify)?;
    Ok(Page { body, content_type, url: final_url })
}

/// Stream `url` into `dest` (created new), hashing as it goes; `progress(done, total)` after
/// each chunk. Returns the sha256 (hex) and the byte count.
pub fn download(
    url: &str,
    dest: &Path,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<(String, u64), HttpError> {
    let r = agent().get(url).call().map_err(classify)?;
    let total = r.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let mut body = r.into_body().into_reader();
    let mut out = std::fs::File::create_new(dest)
        .map_err(|e| HttpError::Network(format!("cannot create {}: {e}", dest.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HttpError::Network(format!("the download broke off after {n} bytes: {e}"))),
        };
        h.update(&buf[..k]);
        out.write_all(&buf[..k]).map_err(|e| HttpError::Network(format!("writing {}: {e}", dest.display())))?;
        n += k as u64;
        progress(n, total);
    }
    if let Some(t) = total.filter(|t| *t != n) {
        return Err(HttpError::Network(format!("the download ended after {n} of {t} bytes")));
    }
    out.sync_all().map_err(|e| HttpError::Network(format!("writing {}: {e}", dest.display())))?;
    Ok((hex(&h.finalize()), n))
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// sha256 of a file (hex) and its size.
pub fn sha256_file(p: &Path) -> std::io::Result<(String, u64)> {
    let mut f = std::fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((hex(&h.finalize()), n))
}
