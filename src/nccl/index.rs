//! The package index's page for one project (PEP 503 HTML or PEP 691 JSON): its wheel files with
//! their sha256, and the wheel that fits this machine for each release.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use anyhow::{bail, Context, Result};
use regex::Regex;
use serde::Deserialize;

use super::release::Release;

/// The Accept header of PEP 691: JSON first, the HTML forms as fallbacks.
pub const ACCEPT: &str =
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01";

pub const DEFAULT_INDEX: &str = "https://pypi.org/simple/";

/// The wheel package of NCCL for one CUDA major.
pub fn package(cuda_major: u32) -> String {
    format!("nvidia-nccl-cu{cuda_major}")
}

/// The project's page under an index URL (`.../simple/` + `name/`).
pub fn project_url(index: &str, package: &str) -> String {
    format!("{}/{package}/", index.trim_end_matches('/'))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub filename: String,
    /// Absolute.
    pub url: String,
    /// Lower-case hex, as the index gives it.
    pub sha256: Option<String>,
    pub size: Option<u64>,
    pub yanked: bool,
}

/// Parse a project page, JSON or HTML by its content type (or its first byte when the server
/// sends none), with `base` the URL it was fetched from.
pub fn parse_page(body: &str, content_type: Option<&str>, base: &str) -> Result<Vec<File>> {
    let json = match content_type {
        Some(ct) => ct.to_ascii_lowercase().contains("json"),
        None => body.trim_start().starts_with('{'),
    };
    if json {
        parse_json(body, base)
    } else {
        Ok(parse_html(body, base))
    }
}

#[derive(Deserialize)]
struct JsonPage {
    files: Vec<JsonFile>,
}

#[derive(Deserialize)]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: BTreeMap<String, String>,
    #[serde(default)]
    size: Option<u64>,
    /// `false`, `true` or the reason (a string).
    #[serde(default)]
    yanked: serde_json::Value,
}

fn parse_json(body: &str, base: &str) -> Result<Vec<File>> {
    let page: JsonPage = serde_json::from_str(body).context("the index's JSON page (PEP 691) does not parse")?;
    Ok(page
        .files
        .into_iter()
        .map(|f| File {
            url: join(base, &f.url),
            sha256: f.hashes.get("sha256").map(|h| h.to_ascii_lowercase()),
            size: f.size,
            yanked: !matches!(f.yanked, serde_json::Value::Null | serde_json::Value::Bool(false)),
            filename: f.filename,
        })
        .collect())
}

static ANCHOR: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"(?is)<a\s([^>]*)>(.*?)</a\s*>"#).unwrap());
static HREF: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"(?is)\bhref\s*=\s*(?:"([^"]*)"|'([^']*)')"#).unwrap());
static YANKED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"(?i)\bdata-yanked\b"#).unwrap());

/// PEP 503: one anchor per file, its text the file name, `#sha256=` on its URL.
fn parse_html(body: &str, base: &str) -> Vec<File> {
    let mut out = Vec::new();
    for a in ANCHOR.captures_iter(body) {
        let attrs = &a[1];
        let Some(h) = HREF.captures(attrs) else { continue };
        let href = unescape(h.get(1).or(h.get(2)).map_or("", |m| m.as_str()));
        let (url, frag) = match href.split_once('#') {
            Some((u, f)) => (u.to_string(), Some(f.to_string())),
            None => (href.clone(), None),
        };
        let sha256 = frag.as_deref().and_then(|f| f.strip_prefix("sha256=")).map(|h| h.to_ascii_lowercase());
        let text = unescape(a[2].trim());
        let filename = if text.is_empty() { url.rsplit('/').next().unwrap_or("").to_string() } else { text };
        out.push(File { filename, url: join(base, &url), sha256, size: None, yanked: YANKED.is_match(attrs) });
    }
    out
}

/// The few entities an index page uses in names and URLs.
fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';').filter(|&e| e <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let ent = &rest[1..end];
        let ch = match ent {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ if ent.starts_with("#x") || ent.starts_with("#X") => {
                u32::from_str_radix(&ent[2..], 16).ok().and_then(char::from_u32)
            }
            _ if ent.starts_with('#') => ent[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `reference` resolved against `base` (RFC 3986, the forms index pages use: absolute URLs,
/// `//host/...`, `/path`, and relative paths with `..`).
pub fn join(base: &str, reference: &str) -> String {
    if reference.contains("://") {
        return reference.to_string();
    }
    let Some((scheme, rest)) = base.split_once("://") else { return reference.to_string() };
    if let Some(r) = reference.strip_prefix("//") {
        return format!("{scheme}://{r}");
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = path.split(['?', '#']).next().unwrap_or("/");
    let merged = if reference.starts_with('/') {
        reference.to_string()
    } else if reference.is_empty() {
        path.to_string()
    } else {
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{dir}{reference}")
    };
    // Remove dot segments (the query or fragment of the reference kept as is).
    let (p, tail) = match merged.find(['?', '#']) {
        Some(i) => (&merged[..i], &merged[i..]),
        None => (merged.as_str(), ""),
    };
    let mut segs: Vec<&str> = Vec::new();
    let parts: Vec<&str> = p.split('/').collect();
    for (i, s) in parts.iter().enumerate() {
        match *s {
            "." => {
                if i == parts.len() - 1 {
                    segs.push("");
                }
            }
            ".." => {
                if segs.len() > 1 {
                    segs.pop();
                }
                if i == parts.len() - 1 {
                    segs.push("");
                }
            }
            s => segs.push(s),
        }
    }
    let mut p = segs.join("/");
    if !p.starts_with('/') {
        p.insert(0, '/');
    }
    format!("{scheme}://{authority}{p}{tail}")
}

/// A project name as the index compares them (PEP 503): lower case, runs of `-_.` as one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// A wheel's file name: `name-version(-build)?-python-abi-platform.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub name: String,
    pub version: String,
    pub platforms: Vec<String>,
}

impl WheelName {
    pub fn parse(filename: &str) -> Option<WheelName> {
        let stem = filename.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        if parts.len() != 5 && parts.len() != 6 {
            return None;
        }
        let platform = parts[parts.len() - 1];
        Some(WheelName {
            name: normalize(parts[0]),
            version: parts[1].to_string(),
            platforms: platform.split('.').map(String::from).collect(),
        })
    }

    /// A glibc Linux wheel for this CPU (`manylinux*_x86_64`, `linux_aarch64`).
    pub fn fits(&self, arch: &str) -> bool {
        self.platforms
            .iter()
            .any(|p| (p.starts_with("manylinux") || p.starts_with("linux")) && p.ends_with(&format!("_{arch}")))
    }
}

/// This machine's CPU as wheel tags name it.
pub fn host_arch() -> &'static str {
    std::env::consts::ARCH
}

/// For each release, the one wheel of `package` that fits `arch` (not yanked; the first by file
/// name when several fit, so the choice is the same every time).
pub fn wheels(files: &[File], package: &str, arch: &str) -> BTreeMap<Release, File> {
    let mut out: BTreeMap<Release, File> = BTreeMap::new();
    let mut sorted: Vec<&File> = files.iter().filter(|f| !f.yanked).collect();
    sorted.sort_by(|a, b| a.filename.cmp(&b.filename));
    for f in sorted {
        let Some(w) = WheelName::parse(&f.filename) else { continue };
        if w.name != package || !w.fits(arch) {
            continue;
        }
        let Some(r) = Release::parse(&w.version) else { continue };
        out.entry(r).or_insert_with(|| f.clone());
    }
    out
}

/// The wheel of `release`, or an error naming what the page has.
pub fn pick<'a>(wheels: &'a BTreeMap<Release, File>, release: Release, what: &str) -> Result<&'a File> {
    match wheels.get(&release) {
        Some(f) => Ok(f),
        None if wheels.is_empty() => bail!("{what} lists no wheel for this machine ({})", host_arch()),
        None => bail!("{what} has no wheel of {release} for this machine ({})", host_arch()),
    }
}

/// The releases nearest to `r` on the page (for the message when `r` is not there).
pub fn nearest(wheels: &BTreeMap<Release, File>, r: Release) -> Vec<Release> {
    let below = wheels.keys().rev().filter(|k| **k < r).take(2).copied().collect::<Vec<_>>();
    let above = wheels.keys().filter(|k| **k > r).take(2).copied();
    below.into_iter().rev().chain(above).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "https://mirror.example/root/pypi/+simple/nvidia-nccl-cu12/";

    #[test]
    fn html_pages_give_files_hashes_and_absolute_urls() {
        let page = r#"<!DOCTYPE html><html><body><h1>Links for nvidia-nccl-cu12</h1>
<a href="https://files.example/packages/72/3a/nvidia_nccl_cu12-2.22.3-py3-none-manylinux2014_x86_64.whl#sha256=ABCDEF" data-requires-python="&gt;=3">nvidia_nccl_cu12-2.22.3-py3-none-manylinux2014_x86_64.whl</a><br/>
<a href='../../+f/1f/nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_x86_64.whl#sha256=0123' data-yanked="">nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_x86_64.whl</a>
<A HREF="/p/nvidia_nccl_cu12-2.24.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl?x=1&amp;y=2">nvidia_nccl_cu12-2.24.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl</A>
</body></html>"#;
        let f = parse_page(page, Some("text/html; charset=utf-8"), BASE).unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].sha256.as_deref(), Some("abcdef"));
        assert!(!f[0].yanked);
        assert_eq!(
            f[1].url,
            "https://mirror.example/root/pypi/+f/1f/nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_x86_64.whl"
        );
        assert!(f[1].yanked);
        assert_eq!(f[2].url, "https://mirror.example/p/nvidia_nccl_cu12-2.24.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl?x=1&y=2");
        assert_eq!(f[2].sha256, None);
        let w = wheels(&f, "nvidia-nccl-cu12", "x86_64");
        // The yanked one is left out.
        assert_eq!(w.keys().map(|r| r.to_string()).collect::<Vec<_>>(), ["2.22.3", "2.24.3"]);
    }

    #[test]
    fn json_pages_pep_691() {
        let page = r#"{"meta":{"api-version":"1.1"},"name":"nvidia-nccl-cu12","files":[
 {"filename":"nvidia-nccl-cu12-0.0.1.dev5.tar.gz","url":"https://f/x.tar.gz","hashes":{"sha256":"aa"}},
 {"filename":"nvidia_nccl_cu12-2.22.3-py3-none-manylinux2014_x86_64.whl","url":"../../f/a.whl","hashes":{"sha256":"BB"},"size":190896470,"yanked":false},
 {"filename":"nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_aarch64.whl","url":"https://f/b.whl","hashes":{"sha256":"cc"}},
 {"filename":"nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_x86_64.whl","url":"https://f/c.whl","hashes":{},"yanked":"broken"}],
 "versions":["2.22.3","2.23.4"]}"#;
        let f = parse_page(page, Some("application/vnd.pypi.simple.v1+json"), BASE).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(f[1].url, "https://mirror.example/root/pypi/f/a.whl");
        assert_eq!((f[1].sha256.as_deref(), f[1].size), (Some("bb"), Some(190896470)));
        assert!(f[3].yanked);
        let w = wheels(&f, "nvidia-nccl-cu12", "x86_64");
        assert_eq!(w.len(), 1);
        let a = wheels(&f, "nvidia-nccl-cu12", "aarch64");
        assert_eq!(a.keys().next().unwrap().to_string(), "2.23.4");
        assert!(parse_page("{not json", Some("application/vnd.pypi.simple.v1+json"), BASE).is_err());
    }

    #[test]
    fn joins_like_a_browser() {
        let b = "http://127.0.0.1:8080/simple/nvidia-nccl-cu12/";
        assert_eq!(join(b, "../../files/a.whl"), "http://127.0.0.1:8080/files/a.whl");
        assert_eq!(join(b, "a.whl"), "http://127.0.0.1:8080/simple/nvidia-nccl-cu12/a.whl");
        assert_eq!(join(b, "/a.whl"), "http://127.0.0.1:8080/a.whl");
        assert_eq!(join(b, "//other/a.whl"), "http://other/a.whl");
        assert_eq!(join(b, "./x/../a.whl?q=1"), "http://127.0.0.1:8080/simple/nvidia-nccl-cu12/a.whl?q=1");
        assert_eq!(join(b, "../../../../a.whl"), "http://127.0.0.1:8080/a.whl");
        assert_eq!(join("http://h", "a"), "http://h/a");
    }

    #[test]
    fn wheel_names() {
        let w = WheelName::parse("nvidia_nccl_cu12-2.24.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")
            .unwrap();
        assert_eq!(w.name, "nvidia-nccl-cu12");
        assert_eq!(w.version, "2.24.3");
        assert!(w.fits("x86_64") && !w.fits("aarch64"));
        assert!(WheelName::parse("nvidia_nccl_cu12-2.20.5-1-py3-none-win_amd64.whl").is_some_and(|w| !w.fits("x86_64")));
        assert!(WheelName::parse("x-1.0.tar.gz").is_none());
        assert!(WheelName::parse("x-1.0-py3.whl").is_none());
        assert!(!WheelName::parse("a-1-py3-none-musllinux_1_2_x86_64.whl").unwrap().fits("x86_64"));
    }

    #[test]
    fn entities() {
        assert_eq!(unescape("a&amp;b&#43;c&#x2B;&lt;&bogus;&"), "a&b+c+<&bogus;&");
    }

    #[test]
    fn nearest_releases() {
        let files: Vec<File> = ["2.21.5", "2.22.3", "2.23.4", "2.24.3", "2.25.1"]
            .iter()
            .map(|v| File {
                filename: format!("nvidia_nccl_cu12-{v}-py3-none-manylinux2014_x86_64.whl"),
                url: "http://x/a".into(),
                sha256: None,
                size: None,
                yanked: false,
            })
            .collect();
        let w = wheels(&files, "nvidia-nccl-cu12", "x86_64");
        let n: Vec<String> = nearest(&w, Release::parse("2.22.9").unwrap()).iter().map(|r| r.to_string()).collect();
        assert_eq!(n, ["2.21.5", "2.22.3", "2.23.4", "2.24.3"]);
    }
}
