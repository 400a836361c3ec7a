//! The message catalogue (rules/catalog/, from scripts/catalog/generate.py) against the rules:
//! a rule's NCCL version range must be the releases whose catalogued sites its patterns match
//! (allowed differences in rules/catalog/range-exceptions.toml, each with its reason), and
//! docs/coverage.md must be what the catalogue and the rules give now
//! (`EPDOCTOR_BLESS=1 cargo test --release --test suite catalog::` rewrites it).
//!
//! A rule is linked to a site by rendering the site's format string with plausible arguments
//! (%d -> 3, 0, 6; %s -> a word, `Close`, `Success`, an errno text...; %p -> 0x7f...) into a log
//! line of the site's level and running the rule's patterns on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use epdoctor::model::version::{Range, Version};
use epdoctor::rules::catalog::{Known, KnownClass};
use epdoctor::rules::schema::{self, Rule};
use epdoctor::rules::Engine;
use regex::Regex;
use serde::Deserialize;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One row of nccl.tsv / torch.tsv / nvshmem.tsv / deepep.tsv.
#[derive(Debug, Clone)]
struct Site {
    lib: &'static str,
    /// torch: `binary` for C++ sites (read from machine code), `python`.
    origin: String,
    file: String,
    line: u32,
    level: String,
    first: String,
    last: String,
    family: String,
    format: String,
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

fn read_tsv(name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root().join("rules/catalog").join(name)).unwrap();
    text.lines().filter(|l| !l.starts_with('#')).skip(1).map(|l| l.split('\t').map(str::to_string).collect()).collect()
}

/// The launcher and training libraries catalogued beside torch (scripts/catalog/libs.py).
const LIBS: [&str; 13] = [
    "accelerate",
    "deepspeed",
    "lightning",
    "torchtitan",
    "megatron-core",
    "nemo",
    "vllm",
    "transformers",
    "sglang",
    "ray",
    "transformer-engine",
    "jax",
    "aws-ofi-nccl",
];

struct Catalog {
    nccl_releases: Vec<Version>,
    torch_releases: Vec<Version>,
    nvshmem_releases: Vec<Version>,
    lib_releases: HashMap<String, Vec<Version>>,
    sites: Vec<Site>,
}

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(read_catalog)
}

fn read_catalog() -> Catalog {
    let (mut nccl_releases, mut torch_releases, mut nvshmem_releases) = (Vec::new(), Vec::new(), Vec::new());
    let mut lib_releases: HashMap<String, Vec<Version>> = HashMap::new();
    for r in read_tsv("releases.tsv") {
        match r[0].as_str() {
            "nccl" => nccl_releases.push(Version::parse(&r[1]).unwrap()),
            "torch" => torch_releases.push(Version::parse(&r[1]).unwrap()),
            "nvshmem" => nvshmem_releases.push(Version::parse(&r[1]).unwrap()),
            "deepep" => {} // git refs, named in each row
            lib => lib_releases.entry(lib.to_string()).or_default().push(Version::parse(&r[1]).unwrap()),
        }
    }
    let mut sites = Vec::new();
    for r in read_tsv("nccl.tsv") {
        // file line level subsys first last family origin format
        sites.push(Site {
            lib: "nccl",
            origin: r[7].clone(),
            file: r[0].clone(),
            line: r[1].parse().unwrap(),
            level: r[2].clone(),
            first: r[4].clone(),
            last: r[5].clone(),
            family: r[6].clone(),
            format: unescape(&r[8]).replace("\\\"", "\""),
        });
    }
    for r in read_tsv("torch.tsv") {
        // file line level first last family class origin format
        sites.push(Site {
            lib: "torch",
            origin: r[7].clone(),
            file: r[0].clone(),
            line: r[1].parse().unwrap(),
            level: r[2].clone(),
            first: r[3].clone(),
            last: r[4].clone(),
            family: r[5].clone(),
            format: unescape(&r[8]),
        });
    }
    for lib in LIBS {
        for r in read_tsv(&format!("{lib}.tsv")) {
            // file line level first last family class format
            sites.push(Site {
                lib,
                origin: "python".into(),
                file: r[0].clone(),
                line: r[1].parse().unwrap(),
                level: r[2].clone(),
                first: r[3].clone(),
                last: r[4].clone(),
                family: r[5].clone(),
                format: unescape(&r[7]),
            });
        }
    }
    for r in read_tsv("nvshmem.tsv") {
        // library first last family format
        sites.push(Site {
            lib: "nvshmem",
            origin: "binary".into(),
            file: r[0].clone(),
            line: 0,
            level: "?".into(),
            first: r[1].clone(),
            last: r[2].clone(),
            family: r[3].clone(),
            format: unescape(&r[4]),
        });
    }
    for r in read_tsv("deepep.tsv") {
        // file line kind refs family format (refs: first = last = the refs)
        sites.push(Site {
            lib: "deepep",
            origin: "source".into(),
            file: r[0].clone(),
            line: r[1].parse().unwrap(),
            level: r[2].clone(),
            first: r[3].clone(),
            last: r[3].clone(),
            family: r[4].clone(),
            format: unescape(&r[5]),
        });
    }
    Catalog { nccl_releases, torch_releases, nvshmem_releases, lib_releases, sites }
}

impl Catalog {
    /// The catalogued releases a site is in (none for DeepEP: git refs, not releases).
    fn releases_of(&self, s: &Site) -> Vec<Version> {
        let list = match s.lib {
            "nccl" => &self.nccl_releases,
            "torch" => &self.torch_releases,
            "nvshmem" => &self.nvshmem_releases,
            "deepep" => return Vec::new(),
            lib => &self.lib_releases[lib],
        };
        let (a, b) = (Version::parse(&s.first).unwrap(), Version::parse(&s.last).unwrap());
        list.iter().copied().filter(|v| *v >= a && *v <= b).collect()
    }
}

/// Plausible values of each kind of conversion; variant `i` takes value `i % len` of each.
const INTS: &[&str] = &["3", "0", "6"];
const STRS: &[&str] = &["word", "Close", "Success", "Resource temporarily unavailable"];
/// Python placeholders carry no type.
const ANY: &[&str] = &["3", "0", "word", "Connection reset by peer"];
const HEX: &[&str] = &["7f", "0", "1f"];
const PTR: &[&str] = &["0x7f0000001000"];
const FLOATS: &[&str] = &["1.5"];

fn c_conversions(fmt: &str) -> Vec<(usize, usize, &'static [&'static str])> {
    let re = Regex::new(r"%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L|q)?([diouxXeEfgGcspn%])").unwrap();
    re.captures_iter(fmt)
        .map(|c| {
            let m = c.get(0).unwrap();
            let kind: &'static [&'static str] = match &c[1] {
                "d" | "i" | "u" | "o" => INTS,
                "x" | "X" => HEX,
                "p" => PTR,
                "s" => STRS,
                "c" => &["x"],
                "%" => &["%"],
                "n" => &[""],
                _ => FLOATS,
            };
            (m.start(), m.end(), kind)
        })
        .collect()
}

fn py_conversions(fmt: &str) -> Vec<(usize, usize, &'static [&'static str])> {
    let re = Regex::new(r"\{[^{}]*\}|%[-+ #0]*\d*(?:\.\d+)?([dsrfix])").unwrap();
    re.find_iter(fmt).map(|m| (m.start(), m.end(), if m.as_str().ends_with('d') { INTS } else { ANY })).collect()
}

/// The format rendered with every combination of values (capped), then with uniform variants.
fn renderings(lib: &str, fmt: &str) -> Vec<String> {
    let conv = if matches!(lib, "nccl" | "nvshmem") || lib == "deepep" && fmt.contains('%') {
        c_conversions(fmt)
    } else {
        py_conversions(fmt)
    };
    let fill = |pick: &dyn Fn(usize, &[&str]) -> usize| {
        let mut out = String::new();
        let mut at = 0;
        for (k, (s, e, vals)) in conv.iter().enumerate() {
            out.push_str(&fmt[at..*s]);
            out.push_str(vals[pick(k, vals) % vals.len()]);
            at = *e;
        }
        out.push_str(&fmt[at..]);
        out
    };
    let product: usize = conv.iter().map(|c| c.2.len()).product();
    let mut out = Vec::new();
    if lib != "nccl" {
        // torch, NVSHMEM, DeepEP: thousands of formats with untyped or many fields; every field at
        // its i-th value is enough (the full product made this test take many minutes).
        for i in 0..ANY.len().max(STRS.len()) {
            out.push(fill(&|_, _| i));
        }
    } else if product <= 256 {
        for mut n in 0..product {
            let digits: Vec<usize> = conv
                .iter()
                .map(|c| {
                    let d = n % c.2.len();
                    n /= c.2.len();
                    d
                })
                .collect();
            out.push(fill(&|k, _| digits[k]));
        }
    } else {
        // Too many combinations: each conversion through its values, the others at their first;
        // and all at their i-th.
        for (k, c) in conv.iter().enumerate() {
            for i in 0..c.2.len() {
                out.push(fill(&|j, _| if j == k { i } else { 0 }));
            }
        }
        for i in 0..STRS.len() {
            out.push(fill(&|_, _| i));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Log lines as the library prints a message of this site (NCCL: with its level and, for
/// WARN/ATTN, file:line; torch: a c10 warning line and a Python logging line).
fn lines(s: &Site) -> Vec<String> {
    let mut out = Vec::new();
    for msg in renderings(s.lib, &s.format) {
        let msg = msg.replace('\n', " ");
        let msg = msg.trim();
        if s.lib == "nccl" {
            match s.level.as_str() {
                "INFO" => out.push(format!("host:1:2 [0] NCCL INFO {msg}")),
                lvl => {
                    let lvl = if lvl == "?" { "WARN" } else { lvl };
                    out.push(format!("host:1:2 [0] {}:{} NCCL {lvl} {msg}", s.file, s.line));
                }
            }
        } else if s.lib == "torch" && s.origin == "binary" {
            // C++: LOG and TORCH_WARN print behind c10's prefix with the file's base name;
            // TORCH_CHECK and throws reach Python as the exception's text.
            let base = s.file.rsplit('/').next().unwrap_or(&s.file);
            let prefix = |c: char| format!("[{c}1201 10:00:00.000000000 {base}:{}]", s.line);
            match s.level.as_str() {
                "INFO" => out.push(format!("{} {msg}", prefix('I'))),
                "WARNING" => out.push(format!("{} {msg}", prefix('W'))),
                "ERROR" => out.push(format!("{} {msg}", prefix('E'))),
                "FATAL" => out.push(format!("{} {msg}", prefix('F'))),
                "TORCH_WARN" => out.push(format!("{} Warning: {msg}", prefix('W'))),
                "TORCH_CHECK" | "INTERNAL_ASSERT" | "THROW" => out.push(format!("RuntimeError: {msg}")),
                class if class.starts_with("Dist") => out.push(format!("torch.distributed.{class}: {msg}")),
                class => out.push(format!("{class}: {msg}")),
            }
        } else if s.lib == "torch" {
            let word = match s.level.as_str() {
                "raise" => "RuntimeError: ".to_string(),
                w if w.ends_with("Warning") => format!("{w}: "),
                _ => String::new(),
            };
            out.push(format!("[W1201 10:00:00.000000000 {}:{}] {word}{msg}", s.file, s.line));
        } else if LIBS.contains(&s.lib) {
            // Python's warnings format, or the library's logger line with its level.
            if s.level.ends_with("Warning") {
                out.push(format!("/env/site-packages/{}:{}: {}: {msg}", s.file, s.line, s.level));
            } else {
                let lvl = match s.level.as_str() {
                    "error" | "exception" | "critical" => "ERROR",
                    "info" | "log_dist" | "rank_zero_info" => "INFO",
                    _ => "WARNING",
                };
                let base = s.file.rsplit('/').next().unwrap_or(&s.file);
                if s.lib == "vllm" {
                    // vllm/logger.py's head: `LEVEL MM-DD HH:MM:SS [file.py:line] ` (0.7 on;
                    // earlier releases without the brackets).
                    out.push(format!("{lvl} 01-02 10:00:00 [{base}:{}] {msg}", s.line));
                } else {
                    out.push(format!("[2025-01-02 10:00:00,000] [{lvl}] [{base}:{}:f] {msg}", s.line));
                }
            }
        } else if s.lib == "nvshmem" {
            // Errors behind `file:line: `, warnings behind `WARN: `.
            out.push(format!("/src/host/x.cpp:100: {msg}"));
            out.push(format!("WARN: {msg}"));
        } else {
            // __FILE__ as a build prints it: the path of the checkout.
            let file = format!("/build/DeepEP/{}", s.file);
            match s.level.as_str() {
                "EP_HOST_ASSERT" => {
                    // V1 wording, then V2's.
                    out.push(format!("RuntimeError: Failed: Assertion error {file}:{} '{msg}'", s.line));
                    out.push(format!("RuntimeError: Assertion exception ({file}:{}): {msg}", s.line));
                }
                "EP_DEVICE_ASSERT" => out.push(format!("Assertion failed: {file}:{}, condition: {msg}", s.line)),
                "raise" => out.push(format!("RuntimeError: {msg}")),
                "assert" => out.push(format!("AssertionError: {msg}")),
                _ => out.push(msg.to_string()),
            }
        }
    }
    out
}

struct Linker {
    /// The engine over the built-in rules: rows are linked to rules as explain links a log's line.
    engine: Engine,
    /// (lib, level, file, format) -> rules: rows that differ only in line and releases render alike.
    cache: Mutex<HashMap<RowKey, BTreeSet<usize>>>,
}

/// (lib, level, file, format) of a catalogue row.
type RowKey = (String, String, String, String);

fn linker() -> &'static Linker {
    static L: OnceLock<Linker> = OnceLock::new();
    L.get_or_init(Linker::new)
}

impl Linker {
    fn new() -> Linker {
        let engine = Engine::new(schema::load_rules(&[]).unwrap()).unwrap();
        Linker { engine, cache: Mutex::new(HashMap::new()) }
    }

    /// The rules whose patterns match a rendering of the site, less those that match the line's
    /// frame alone (the same line with a neutral message: `RuntimeError: x` is any exception).
    fn rules_of(&self, s: &Site) -> BTreeSet<usize> {
        let key = (s.lib.to_string(), s.level.clone(), s.file.clone(), s.format.clone());
        if let Some(r) = self.cache.lock().unwrap().get(&key) {
            return r.clone();
        }
        let hits = |lines: Vec<String>| -> BTreeSet<usize> {
            lines.iter().flat_map(|l| self.engine.rules_matching(l)).collect()
        };
        // (DeepEP's and NCCL's frames name the library: a rule on the frame does cover the row.)
        // (The frame depends on the row's library, level, file and line only: computed once per file.)
        let frame = if s.lib == "torch" {
            let fkey = (s.lib.to_string(), s.level.clone(), s.file.clone(), "\0frame".to_string());
            let cached = self.cache.lock().unwrap().get(&fkey).cloned();
            cached.unwrap_or_else(|| {
                let f = hits(lines(&Site { format: "zq".into(), ..s.clone() }));
                self.cache.lock().unwrap().insert(fkey, f.clone());
                f
            })
        } else {
            BTreeSet::new()
        };
        let r: BTreeSet<usize> = hits(lines(s)).difference(&frame).copied().collect();
        self.cache.lock().unwrap().insert(key, r.clone());
        r
    }
}

/// The rules of every catalogue row (index into `catalog().sites`), computed once for all tests.
fn links() -> &'static Vec<BTreeSet<usize>> {
    static L: OnceLock<Vec<BTreeSet<usize>>> = OnceLock::new();
    L.get_or_init(|| {
        // Tens of thousands of rows: split over the cores.
        let sites = &catalog().sites;
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).max(1);
        let chunk = sites.len().div_ceil(n).max(1);
        std::thread::scope(|sc| {
            let parts: Vec<_> = sites
                .chunks(chunk)
                .map(|c| sc.spawn(move || c.iter().map(|s| linker().rules_of(s)).collect::<Vec<_>>()))
                .collect();
            parts.into_iter().flat_map(|h| h.join().unwrap()).collect()
        })
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Exception {
    rule: String,
    /// `nccl` (the default) or `torch`: whose releases.
    #[serde(default)]
    lib: Option<String>,
    /// The releases where range and catalogue may disagree.
    releases: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Ignored {
    /// A regex on the site's format string.
    #[serde(default)]
    format: Option<String>,
    /// A regex on the file of every site of the message (e.g. a Windows-only source).
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    lib: Option<String>,
    reason: String,
}

impl Ignored {
    fn regexes(&self) -> (Option<Regex>, Option<Regex>) {
        let re = |r: &Option<String>| r.as_deref().map(|r| Regex::new(r).unwrap());
        (re(&self.format), re(&self.file))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Exceptions {
    #[serde(default)]
    exception: Vec<Exception>,
    #[serde(default)]
    ignored: Vec<Ignored>,
}

/// `rules/catalog/exceptions*.toml`, in name order (one file per area keeps edits apart).
fn exceptions() -> Exceptions {
    let dir = root().join("rules/catalog");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("exceptions") && n.ends_with(".toml"))
        })
        .collect();
    files.sort();
    let mut e = Exceptions { exception: Vec::new(), ignored: Vec::new() };
    for p in files {
        let one: Exceptions = toml::from_str(&std::fs::read_to_string(&p).unwrap())
            .unwrap_or_else(|err| panic!("{}: {err}", p.display()));
        e.exception.extend(one.exception);
        e.ignored.extend(one.ignored);
    }
    for x in &e.exception {
        assert!(!x.reason.trim().is_empty(), "exception for {} has no reason", x.rule);
        Range::parse(&x.releases).unwrap();
    }
    for x in &e.ignored {
        assert!(!x.reason.trim().is_empty(), "ignored {:?} {:?} has no reason", x.format, x.file);
        assert!(x.format.is_some() || x.file.is_some(), "ignored entry needs `format` or `file`: {}", x.reason);
        x.regexes();
    }
    e
}

/// Disagreements of one rule's NCCL range with the releases of the sites it matches:
/// (releases it claims without a site, releases with a site that it misses).
fn range_problems(
    range: &Range,
    with_site: &BTreeSet<Version>,
    releases: &[Version],
    allowed: &[Range],
) -> (Vec<Version>, Vec<Version>) {
    let ok = |v: &Version| allowed.iter().any(|a| a.contains(*v));
    let claims = releases.iter().copied().filter(|v| range.contains(*v) && !with_site.contains(v) && !ok(v)).collect();
    let misses = releases.iter().copied().filter(|v| !range.contains(*v) && with_site.contains(v) && !ok(v)).collect();
    (claims, misses)
}

#[test]
fn range_check_catches_both_kinds_of_mistake() {
    let rel: Vec<Version> = ["2.22.3", "2.23.4", "2.30.3"].iter().map(|v| Version::parse(v).unwrap()).collect();
    let with: BTreeSet<Version> = rel[..2].iter().copied().collect();
    let (c, m) = range_problems(&Range::parse(">=2.23.4").unwrap(), &with, &rel, &[]);
    assert_eq!((c, m), (vec![rel[2]], vec![rel[0]]));
    let (c, m) = range_problems(&Range::parse("<2.30.3").unwrap(), &with, &rel, &[]);
    assert!(c.is_empty() && m.is_empty());
    let (c, _) = range_problems(&Range::parse(">=2.23.4").unwrap(), &with, &rel, &[Range::parse(">=2.30").unwrap()]);
    assert!(c.is_empty());
}

#[test]
fn renderings_fill_every_conversion() {
    let r = renderings("nccl", "Could not receive type from localRank %d, res=%u, closed=%d");
    assert!(r.contains(&"Could not receive type from localRank 0, res=3, closed=0".to_string()), "{r:?}");
    assert!(renderings("nccl", "a %s b %p %lu %% %016llx").iter().all(|s| !s.contains('%') || s.contains("% ")));
    assert!(renderings("torch", "Failed to recv, got {} bytes.").contains(&"Failed to recv, got 0 bytes.".to_string()));
}

/// A rule's version range for a library's releases: `nccl` or `torch`.
fn rule_range<'a>(r: &'a Rule, lib: &str) -> Option<&'a Range> {
    if lib == "nccl" {
        r.nccl.as_ref()
    } else {
        r.torch.as_ref()
    }
}

/// Where a rule's version range and the catalogued sites it matches disagree (outside the exceptions).
fn rule_range_problems() -> Vec<String> {
    let cat = catalog();
    let linker = linker();
    let exc = exceptions();
    let mut problems = Vec::new();
    for (lib, releases) in [("nccl", &cat.nccl_releases), ("torch", &cat.torch_releases)] {
        let mut with_site: BTreeMap<usize, BTreeSet<Version>> = BTreeMap::new();
        for (s, rules) in cat.sites.iter().zip(links()).filter(|(s, _)| s.lib == lib) {
            for r in rules.iter().copied().filter(|&r| rule_range(&linker.engine.rules[r], lib).is_some()) {
                with_site.entry(r).or_default().extend(cat.releases_of(s));
            }
        }
        for (i, r) in linker.engine.rules.iter().enumerate() {
            let Some(range) = rule_range(r, lib) else { continue };
            let Some(w) = with_site.get(&i) else {
                // No catalogued message of this library: a rule on other text gated by its version.
                continue;
            };
            let allowed: Vec<Range> = exc
                .exception
                .iter()
                .filter(|e| e.rule == r.def.id && e.lib.as_deref().unwrap_or("nccl") == lib)
                .map(|e| Range::parse(&e.releases).unwrap())
                .collect();
            let (claims, misses) = range_problems(range, w, releases, &allowed);
            let list = |v: &[Version]| v.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
            if !claims.is_empty() {
                problems.push(format!(
                    "rule `{}` ({lib} = \"{}\") claims releases where no catalogued site matches: {}",
                    r.def.id,
                    range.text(),
                    list(&claims)
                ));
            }
            if !misses.is_empty() {
                problems.push(format!(
                    "rule `{}` ({lib} = \"{}\") misses releases whose catalogued sites it matches: {}",
                    r.def.id,
                    range.text(),
                    list(&misses)
                ));
            }
        }
    }
    if !problems.is_empty() {
        problems.push("(fix the range, or add an exception with its reason to rules/catalog/exceptions.toml)".into());
    }
    problems
}

/// The families whose every WARN/ATTN site (NCCL) and raised/logged message (torch) should be
/// covered by a rule or ignored with a reason.
const GOAL: &[(&str, &str)] = &[
    ("nccl", "teardown"),
    ("nccl", "proxy"),
    ("nccl", "socket"),
    ("nccl", "bootstrap"),
    ("nccl", "shm"),
    // Init failures, and the NET/IB and P2P/NVLS transports that fail at init or under load.
    ("nccl", "init"),
    ("nccl", "net"),
    ("nccl", "transport"),
    ("nccl", "ras"),
    ("torch", "teardown"),
    ("torch", "store"),
    ("torch", "socket"),
    ("torch", "watchdog"),
    ("nvshmem", "bootstrap"),
    ("nvshmem", "teardown"),
    // What DeepEP users meet first: NVSHMEM's init and its IBGDA transport.
    ("nvshmem", "init"),
    ("nvshmem", "ibgda"),
    ("deepep", "timeout"),
    ("deepep", "teardown"),
];

fn coverage_doc() -> String {
    let cat = catalog();
    let linker = linker();
    let exc = exceptions();
    let ignored: Vec<(Option<Regex>, Option<Regex>, &Ignored)> = exc
        .ignored
        .iter()
        .map(|i| {
            let (f, p) = i.regexes();
            (f, p, i)
        })
        .collect();
    // The entry that ignores a message: its library, its format, and every file it is printed from.
    let ignoring = |lib: &str, fmt: &str, m: &Msg| {
        ignored.iter().find(|(f, p, i)| {
            i.lib.as_deref().is_none_or(|l| l == lib)
                && f.as_ref().is_none_or(|f| f.is_match(fmt))
                && p.as_ref().is_none_or(|p| m.files.iter().all(|file| p.is_match(file)))
        })
    };
    // One message = (lib, family, level, format): its rows differ only in file:line and releases.
    #[derive(Default)]
    struct Msg {
        /// Its first row, to render it for the catalogue lookup.
        site: Option<Site>,
        releases: BTreeSet<Version>,
        /// DeepEP: the git refs.
        refs: BTreeSet<String>,
        rules: BTreeSet<String>,
        files: BTreeSet<String>,
    }
    let mut msgs: BTreeMap<(String, String, String, String), Msg> = BTreeMap::new();
    for (s, rules) in cat.sites.iter().zip(links()) {
        if s.lib == "nccl" && !matches!(s.level.as_str(), "WARN" | "ATTN" | "?")
            || s.lib == "torch" && s.origin == "binary" && s.level == "INFO"
        {
            continue; // INFO lines are traces; the few that rules read are counted by rules test
        }
        if s.format.trim().len() < 4 {
            continue;
        }
        let rel = cat.releases_of(s);
        let m = msgs.entry((s.lib.to_string(), s.family.clone(), s.level.clone(), s.format.clone())).or_default();
        for &r in rules {
            let rule = &linker.engine.rules[r];
            let in_range = |v: &Version| match (s.lib, &rule.nccl, &rule.torch) {
                ("nccl", Some(n), _) => n.contains(*v),
                ("torch", _, Some(t)) => t.contains(*v),
                _ => true,
            };
            // DeepEP rows name git refs, no releases: no range to be in.
            if rel.is_empty() || rel.iter().any(in_range) {
                m.rules.insert(rule.def.id.clone());
            }
        }
        if m.site.is_none() {
            m.site = Some(s.clone());
        }
        m.releases.extend(rel);
        if s.lib == "deepep" {
            m.refs.extend(s.first.split(',').map(str::to_string));
        }
        m.files.insert(s.file.clone());
    }
    let span = |r: &BTreeSet<Version>| match (r.first(), r.last()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}-{b}"),
        _ => String::new(),
    };
    let md = |s: &str| s.replace('|', "\\|").replace('`', "'").replace('\n', " ");
    let mut out = String::from(
        "# Message coverage\n\n\
         Generated by `EPDOCTOR_BLESS=1 cargo test --release --test suite catalog::` from the message catalogue\n\
         (`rules/catalog/`, see [catalog.md](catalog.md)) and the rules; `cargo test` fails when it is out of date.\n\n\
         A message is a (library, family, level, format string); it is **covered** when a rule's patterns match\n\
         the format rendered with plausible arguments in a release inside the rule's version range, **ignored**\n\
         when a `rules/catalog/exceptions*.toml` file names it with a reason, **known** when no rule reads it\n\
         but the engine finds it in `rules/catalog/known.toml` from the same rendering and gives it the finding\n\
         of its class (`known-*`, rules/known-sites.toml). NCCL: WARN and ATTN sites (and wheel-only sites\n\
         whose level could not be read), NCCL 2.18.1-2.32.3; torch 1.8-2.15: messages raised, warned or logged\n\
         by `torch/distributed/**.py` and `torch/nn/parallel/**.py`, and the C++ c10d sites read from the\n\
         wheels' machine code (LOG(WARNING/ERROR/FATAL), TORCH_WARN, TORCH_CHECK, throws; not LOG(INFO));\n\
         accelerate 0.18-1.16, DeepSpeed 0.7-0.19, Lightning 2.0-2.6, torchtitan 0.1-0.3, megatron-core\n\
         0.5-0.19, NeMo 1.23-3.0 (its core, utils, lightning and Megatron training paths), vLLM 0.4-0.34\n\
         (its distributed, executor, worker, engine, platform, config and env code), transformers\n\
         4.30-5.25 (the Trainer, its arguments, the DeepSpeed / FSDP / tensor-parallel integrations, model\n\
         loading), SGLang 0.3-0.5.23 (its serving runtime: distributed, managers, model runner, MoE, PD\n\
         disaggregation), Ray 2.5-2.60 (Train, ray.util.collective, the core's Python side),\n\
         TransformerEngine 1.13-2.20 (its common, PyTorch and JAX Python) and JAX 0.4.38-0.12 (jax.distributed,\n\
         cluster detection, backend bring-up): their warnings and log lines; aws-ofi-nccl 1.6-1.21 (the OFI net\n\
         plugin's NCCL_OFI_WARN sites, read from its release tags);\n\
         NVSHMEM 3.1-3.8: the message strings of the wheel's libraries; DeepEP: its asserts, printf and raised\n\
         texts at the refs read (V1 tag, V2 and hybrid-EP branches).\n\n\
         | library | family | messages | covered | ignored | known | not covered |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut by_family: BTreeMap<(String, String), (usize, usize, usize, usize)> = BTreeMap::new();
    for ((lib, fam, _, fmt), m) in &msgs {
        let e = by_family.entry((lib.clone(), fam.clone())).or_default();
        e.0 += 1;
        if !m.rules.is_empty() {
            e.1 += 1;
        } else if ignoring(lib, fmt, m).is_some() {
            e.2 += 1;
        } else if m.site.as_ref().is_some_and(known_finds) {
            e.3 += 1;
        }
    }
    let mut tot = (0, 0, 0, 0, 0);
    for ((lib, fam), (n, c, i, k)) in &by_family {
        out.push_str(&format!("| {lib} | {fam} | {n} | {c} | {i} | {k} | {} |\n", n - c - i - k));
        tot = (tot.0 + n, tot.1 + c, tot.2 + i, tot.3 + k, tot.4 + n - c - i - k);
    }
    out.push_str(&format!("| **all** | | {} | {} | {} | {} | {} |\n", tot.0, tot.1, tot.2, tot.3, tot.4));
    out.push_str(
        "\nBefore the catalogue reached every torch.distributed file, torch 2.0 and the three launcher\n\
         libraries (issue 22), the table read: 6389 messages, 3000 covered, 400 ignored, 2989 not covered;\n\
         torch c10d 830 (16 covered), elastic 241 (2), other 843 (4), all three almost wholly not covered,\n\
         and no `known` column: a line of an uncovered message was `unknown`.\n",
    );
    out.push_str(
        "\nThe goal: every message of the families below covered or ignored with a reason (a message only\n\
         known gets its class's generic finding, which says less than a rule).\n\
         Other families are counted above only.\n",
    );
    for (glib, gfam) in GOAL {
        out.push_str(&format!("\n## {glib} / {gfam}\n\n| level | releases | message | covered by / ignored because |\n| --- | --- | --- | --- |\n"));
        for ((lib, fam, level, fmt), m) in &msgs {
            if lib != glib || fam != gfam {
                continue;
            }
            let releases = if m.refs.is_empty() {
                span(&m.releases)
            } else {
                m.refs.iter().cloned().collect::<Vec<_>>().join(", ")
            };
            let why = if !m.rules.is_empty() {
                m.rules.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", ")
            } else if let Some((_, _, i)) = ignoring(lib, fmt, m) {
                format!("ignored: {}", md(&i.reason))
            } else if let Some(c) = m.site.as_ref().and_then(known_class) {
                format!("known: `{}`", c.rule_id())
            } else {
                "**not covered**".into()
            };
            out.push_str(&format!("| {level} | {releases} | `{}` | {why} |\n", md(fmt.trim())));
        }
    }
    out
}

/// The class the engine's catalogue lookup names the message by, from a rendering of its row (as
/// a message of the same library).
fn known_class(s: &Site) -> Option<KnownClass> {
    let k = Known::builtin().unwrap();
    if s.lib != "torch" && !LIBS.contains(&s.lib) {
        return None;
    }
    lines(s).iter().find_map(|l| {
        let rest = epdoctor::log::strip_prefixes(l).rest;
        k.lookup(rest).and_then(|id| k.get(id)).filter(|m| m.lib == s.lib).map(|m| m.class)
    })
}

fn known_finds(s: &Site) -> bool {
    known_class(s).is_some()
}

/// docs/coverage.md against what the catalogue and the rules give now (rewritten under EPDOCTOR_BLESS).
fn coverage_doc_problem() -> Option<String> {
    let doc = coverage_doc();
    let path = root().join("docs/coverage.md");
    if std::env::var_os("EPDOCTOR_BLESS").is_some() {
        std::fs::write(&path, &doc).unwrap();
        return None;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    (have != doc).then(|| {
        "docs/coverage.md is out of date: run `EPDOCTOR_BLESS=1 cargo test --release --test suite catalog::` and review the diff".into()
    })
}

/// Both checks read one linking of every catalogue row to the rules (the slow part: every rule on
/// ~25k rendered lines). One test, so that it is computed once under nextest too, which runs each
/// test in a process of its own; each check's problems are still reported apart.
#[test]
fn rule_ranges_and_the_coverage_doc_agree_with_the_catalogue() {
    let mut problems = rule_range_problems();
    problems.extend(coverage_doc_problem());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
