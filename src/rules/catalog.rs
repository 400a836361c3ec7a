//! What the message catalogue (rules/catalog/, written by scripts/catalog/generate.py) gives the
//! engine: the NCCL releases a log's WARN/ATTN sites point to, and the NCCL a torch release's wheel
//! pins. The hand-written rules/fingerprints.toml still serves releases the catalogue lacks. And the
//! messages torch.distributed and the launch and training libraries (accelerate, DeepSpeed,
//! Lightning, torchtitan, megatron-core, NeMo) print (rules/catalog/known.toml),
//! each with its class, so that a line of one that no rule reads is still named (`Known`).

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use serde::Deserialize;

use super::schema::{self, Fingerprint};
use super::version::Version;
use crate::model::VersionNote;

pub const CATALOG_FILE: &str = "rules/catalog/fingerprints.toml";
pub const KNOWN_FILE: &str = "rules/catalog/known.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    releases: Vec<String>,
    #[serde(default)]
    torch_releases: Vec<String>,
    #[serde(default)]
    nccl: HashMap<String, Vec<String>>,
    #[serde(default)]
    torch_nccl: HashMap<String, String>,
    /// torch's C++ sites (`File.cpp:LINE` as its log prefix shows it): the text is a piece the
    /// message contains, not its start (the pieces were read from machine code).
    #[serde(default)]
    torch: HashMap<String, Vec<String>>,
    /// Message start -> `"LEVEL RANGES"` per level, for messages whose level differs by release.
    #[serde(default)]
    nccl_levels: HashMap<String, Vec<String>>,
}

/// One message at one file:line and the releases that print it there.
#[derive(Debug, Clone)]
struct Entry {
    file: String,
    /// The start of the message (empty: any message, for hand-written sites).
    text: String,
    releases: BTreeSet<usize>,
}

/// The WARN/ATTN sites of every known NCCL release.
#[derive(Debug, Default)]
pub struct Sites {
    releases: Vec<Version>,
    entries: Vec<Entry>,
    by_line: HashMap<u32, Vec<usize>>,
    /// torch release -> the NCCL its wheel pins.
    pins: Vec<(Version, Version)>,
    /// torch's C++ sites, ids from 0 in their own space.
    torch: TorchSites,
    /// Messages whose level differs between releases; each (message, level) is an entry.
    levels: Vec<Levels>,
    /// The first LEVEL_HEAD characters of each message start -> indexes into `levels`.
    levels_by_head: HashMap<String, Vec<usize>>,
    /// Indexes into `releases` of the releases the catalogue read (not hand-written ones).
    catalogued: BTreeSet<usize>,
}

/// One message NCCL prints at different levels by release: (level, entry id) per level.
#[derive(Debug)]
struct Levels {
    text: String,
    by_level: Vec<(String, usize)>,
}

/// The heads of the catalogue's level messages, taken by `build.rs` (sorted).
mod built {
    include!(concat!(env!("OUT_DIR"), "/level_heads.rs"));
}

/// Characters of a message start used as the lookup key (every start is at least this long).
const LEVEL_HEAD: usize = 10;

fn head(s: &str) -> &str {
    s.char_indices().nth(LEVEL_HEAD).map_or(s, |(i, _)| &s[..i])
}

/// The C++ c10d sites of every catalogued torch release.
#[derive(Debug, Default)]
struct TorchSites {
    releases: Vec<Version>,
    entries: Vec<Entry>,
    by_line: HashMap<u32, Vec<usize>>,
}

impl Sites {
    /// The built-in catalogue and hand-written fingerprints, parsed once per process (half a MB of
    /// TOML: a debug build took ~60 ms for each engine).
    /// The built-in catalogue, or an empty one if it does not load (a test holds it loadable):
    /// what the engine asks, on its first line that needs the catalogue.
    pub fn builtin_or_empty() -> &'static Sites {
        static EMPTY: OnceLock<Sites> = OnceLock::new();
        Sites::builtin().unwrap_or_else(|_| EMPTY.get_or_init(Sites::default))
    }

    pub fn builtin() -> Result<&'static Sites> {
        static S: OnceLock<Result<Sites, String>> = OnceLock::new();
        S.get_or_init(|| Sites::load_builtin().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow!("{e}"))
    }

    fn load_builtin() -> Result<Sites> {
        let text =
            schema::embedded().iter().find(|(p, _)| *p == CATALOG_FILE).map(|(_, t)| *t).unwrap_or("releases = []");
        Sites::from_parts(text, &schema::load_fingerprints()?)
    }

    pub fn from_parts(catalog: &str, hand: &[Fingerprint]) -> Result<Sites> {
        let f: CatalogFile = toml::from_str(catalog).map_err(|e| anyhow!("{CATALOG_FILE}: {e}"))?;
        let mut releases: Vec<Version> = Vec::new();
        for r in &f.releases {
            releases.push(Version::parse(r).ok_or_else(|| anyhow!("{CATALOG_FILE}: bad release `{r}`"))?);
        }
        let catalogued: BTreeSet<Version> = releases.iter().copied().collect();
        // Hand-written entries name ranges; they count only for releases the catalogue lacks.
        let mut hand_ranges = Vec::new();
        for fp in hand {
            let (Some(min), Some(max)) = (Version::parse(&fp.min), Version::parse(&fp.max)) else {
                return Err(anyhow!("{}: bad version in [{}, {}]", schema::FINGERPRINTS_FILE, fp.min, fp.max));
            };
            for v in [min, max] {
                if !catalogued.contains(&v) && !releases.contains(&v) {
                    releases.push(v);
                }
            }
            hand_ranges.push((min, max, &fp.sites));
        }
        releases.sort();
        let mut s = Sites { releases: releases.clone(), ..Sites::default() };
        let mut keys: Vec<&String> = f.nccl.keys().collect();
        keys.sort(); // entry order must not depend on the hash map's
        for site in keys {
            let (file, line) = split_site(site).ok_or_else(|| anyhow!("{CATALOG_FILE}: bad site `{site}`"))?;
            for item in &f.nccl[site] {
                let text = item.split_once(' ').map(|(_, t)| t).unwrap_or("");
                s.push(file, line, text, parse_ranges(item, &releases, site)?);
            }
        }
        for (min, max, sites) in hand_ranges {
            let set: BTreeSet<usize> = (0..releases.len())
                .filter(|&i| releases[i] >= min && releases[i] <= max && !catalogued.contains(&releases[i]))
                .collect();
            if set.is_empty() {
                continue;
            }
            for site in sites.iter() {
                let (file, line) =
                    split_site(site).ok_or_else(|| anyhow!("{}: bad site `{site}`", schema::FINGERPRINTS_FILE))?;
                s.push(file, line, "", set.clone());
            }
        }
        let mut texts: Vec<&String> = f.nccl_levels.keys().collect();
        texts.sort();
        for text in texts {
            if text.chars().count() < LEVEL_HEAD {
                return Err(anyhow!("{CATALOG_FILE}: nccl_levels: message start `{text}` is too short"));
            }
            let mut by_level = Vec::new();
            for item in &f.nccl_levels[text] {
                let (level, ranges) = item.split_once(' ').unwrap_or((item, ""));
                by_level.push((level.to_string(), s.entries.len()));
                let mut set = parse_ranges(ranges, &releases, text)?;
                // Hand-written releases older than the catalogue print at the first catalogued
                // release's level (the level moved later, if at all).
                if let Some(f) = releases.iter().position(|v| catalogued.contains(v)).filter(|f| set.contains(f)) {
                    set.extend(0..f);
                }
                s.entries.push(Entry { file: String::new(), text: text.clone(), releases: set });
            }
            s.levels_by_head.entry(head(text).to_string()).or_default().push(s.levels.len());
            s.levels.push(Levels { text: text.clone(), by_level });
        }
        s.catalogued = (0..releases.len()).filter(|&i| catalogued.contains(&releases[i])).collect();
        s.torch = TorchSites::parse(&f.torch_releases, &f.torch)?;
        for (t, n) in &f.torch_nccl {
            let bad = || anyhow!("{CATALOG_FILE}: torch_nccl: bad entry `{t}` = `{n}`");
            s.pins.push((Version::parse(t).ok_or_else(bad)?, Version::parse(n).ok_or_else(bad)?));
        }
        s.pins.sort();
        Ok(s)
    }

    fn push(&mut self, file: &str, line: u32, text: &str, releases: BTreeSet<usize>) {
        self.by_line.entry(line).or_default().push(self.entries.len());
        self.entries.push(Entry { file: file.to_string(), text: text.to_string(), releases });
    }

    /// The entry of a WARN/ATTN line printed at `file:line` with message `msg`: the catalogued
    /// message there whose start `msg` has, else a hand-written site there (any message).
    pub fn lookup(&self, file: &str, line: u32, msg: &str) -> Option<u32> {
        let same_file = |f: &str| file == f || (file.ends_with(f) && file[..file.len() - f.len()].ends_with('/'));
        let cands = self.by_line.get(&line)?;
        let msg = msg.trim_start();
        let pick = |want_text: bool| {
            cands.iter().copied().find(|&i| {
                let e = &self.entries[i];
                same_file(&e.file) && (e.text.is_empty() != want_text) && msg.starts_with(e.text.as_str())
            })
        };
        pick(true).or_else(|| pick(false)).map(|i| i as u32)
    }

    /// The entry of an NCCL line at `level` (WARN, INFO, ATTN) whose message changes level between
    /// releases: the releases that print it at that level, and the message start.
    /// Whether `lookup_level` may know `msg`, asked without loading the catalogue: false for
    /// nearly every INFO line, which then needs no catalogue at all.
    pub fn may_have_level(msg: &str) -> bool {
        // A set, not a binary search of the sorted list: it is asked of every NCCL line filed.
        static HEADS: std::sync::LazyLock<std::collections::HashSet<&str, foldhash::fast::RandomState>> =
            std::sync::LazyLock::new(|| built::LEVEL_HEADS.iter().copied().collect());
        HEADS.contains(head(msg.trim_start()))
    }

    pub fn lookup_level(&self, level: &str, msg: &str) -> Option<(u32, &str)> {
        let msg = msg.trim_start();
        let l =
            self.levels_by_head.get(head(msg))?.iter().map(|&i| &self.levels[i]).find(|l| msg.starts_with(&l.text))?;
        let id = l.by_level.iter().find(|(lv, _)| lv == level)?.1;
        Some((id as u32, &l.text))
    }

    /// What the catalogue says of a level entry's message: its level per catalogued release.
    /// None for a WARN line of a message that is never INFO (it moved to ATTN only): WARN shows it.
    pub fn level_note(&self, id: u32) -> Option<String> {
        let (l, levels) = self.levels_of(id)?;
        let own = l.by_level.iter().find(|&&(_, e)| e == id as usize).map(|(lv, _)| lv.as_str());
        if own == Some("WARN") && !l.by_level.iter().any(|(lv, _)| lv == "INFO") {
            return None;
        }
        let mut t = format!("NCCL prints `{}` at {levels} (message catalogue)", l.text);
        let hidden: Vec<&str> = l.by_level.iter().filter(|(lv, _)| lv != "WARN").map(|(lv, _)| lv.as_str()).collect();
        if !hidden.is_empty() {
            t.push_str(&format!(
                "; NCCL_DEBUG=WARN hides the {} lines (NCCL_DEBUG=INFO shows them{})",
                hidden.join(" and "),
                if hidden.contains(&"ATTN") { ", and on 2.32 NCCL_DEBUG_LEVELS=ATTN shows ATTN" } else { "" }
            ));
        }
        Some(t)
    }

    /// A level entry's message and its levels per catalogued release (`WARN in 2.18.1-2.29.7, ...`).
    fn levels_of(&self, id: u32) -> Option<(&Levels, String)> {
        let l = self.levels.iter().find(|l| l.by_level.iter().any(|&(_, e)| e == id as usize))?;
        let span = |set: &BTreeSet<usize>| {
            let mut runs: Vec<(usize, usize)> = Vec::new();
            for &i in set.iter().filter(|i| self.catalogued.contains(i)) {
                match runs.last_mut() {
                    Some(r) if r.1 + 1 == i => r.1 = i,
                    _ => runs.push((i, i)),
                }
            }
            let name = |i: usize| self.releases[i].to_string();
            runs.iter()
                .map(|&(a, b)| if a == b { name(a) } else { format!("{}-{}", name(a), name(b)) })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let levels: Vec<String> =
            l.by_level.iter().map(|(lv, e)| format!("{lv} in {}", span(&self.entries[*e].releases))).collect();
        Some((l, levels.join(", ")))
    }

    /// The levels per release of a level entry's message, for a note (`WARN in ..., INFO in ...`).
    pub fn levels_text(&self, id: u32) -> Option<String> {
        self.levels_of(id).map(|(_, t)| t)
    }

    /// Whether a catalogued release `v` prints entry `id`'s message at its level (`None`: `v` is
    /// not catalogued, nothing to say).
    pub fn entry_has(&self, id: u32, v: Version) -> Option<bool> {
        let i = self.releases.binary_search(&v).ok().filter(|i| self.catalogued.contains(i))?;
        Some(self.entries.get(id as usize)?.releases.contains(&i))
    }

    /// The releases every seen entry allows (their intersection), as (lowest, highest); `None` when
    /// nothing was seen or the entries contradict each other (ranks of different releases).
    #[cfg(test)]
    pub fn infer(&self, seen: impl IntoIterator<Item = u32>) -> Option<(Version, Version)> {
        let c = self.infer_set(seen);
        Some((*c.first()?, *c.last()?))
    }

    /// The releases every seen entry allows, in order (empty: none seen, or a contradiction).
    pub fn infer_set(&self, seen: impl IntoIterator<Item = u32>) -> Vec<Version> {
        let c = intersect(seen.into_iter().map(|id| self.entries.get(id as usize).map(|e| &e.releases)));
        c.unwrap_or_default().into_iter().map(|i| self.releases[i]).collect()
    }

    /// The entry of a torch C++ line printed at `file:line` (its log prefix) with message `msg`.
    pub fn lookup_torch(&self, file: &str, line: u32, msg: &str) -> Option<u32> {
        let t = &self.torch;
        let base = file.rsplit('/').next().unwrap_or(file);
        t.by_line
            .get(&line)?
            .iter()
            .copied()
            .find(|&i| t.entries[i].file == base && msg.contains(&t.entries[i].text))
            .map(|i| i as u32)
    }

    /// The torch releases every seen torch entry allows, as (lowest, highest).
    #[cfg(test)]
    pub fn infer_torch(&self, seen: impl IntoIterator<Item = u32>) -> Option<(Version, Version)> {
        let c = self.infer_torch_set(seen);
        Some((*c.first()?, *c.last()?))
    }

    /// The torch releases every seen torch entry allows, in order.
    pub fn infer_torch_set(&self, seen: impl IntoIterator<Item = u32>) -> Vec<Version> {
        let t = &self.torch;
        let c = intersect(seen.into_iter().map(|id| t.entries.get(id as usize).map(|e| &e.releases)));
        c.unwrap_or_default().into_iter().map(|i| t.releases[i]).collect()
    }

    /// The NCCL the stock wheel of torch `t` pins: the same release, else the same minor's
    /// catalogued release (patch releases of one minor pin the same NCCL in every case read).
    pub fn torch_pin(&self, t: Version) -> Option<(Version, Version)> {
        self.pins
            .iter()
            .find(|(tv, _)| *tv == t)
            .or_else(|| self.pins.iter().find(|(tv, _)| (tv.0, tv.1) == (t.0, t.1)))
            .copied()
    }
}

impl Sites {
    /// NCCL releases as a note shows them: runs of consecutive known releases (`2.26.2-2.29.3,
    /// 2.30.7`), so a gap in the set is not hidden inside one span.
    pub fn releases_text(&self, set: &[Version]) -> String {
        runs_text(set, &self.releases)
    }

    /// torch releases as a note shows them (as `releases_text`).
    pub fn torch_releases_text(&self, set: &[Version]) -> String {
        runs_text(set, &self.torch.releases)
    }

    /// Whether the catalogue read release `v` (not only the hand-written fingerprints).
    pub fn is_catalogued(&self, v: Version) -> bool {
        self.releases.binary_search(&v).is_ok_and(|i| self.catalogued.contains(&i))
    }

    /// The releases that print NCCL entry `id` where it was seen, as a note shows them.
    pub fn entry_releases_text(&self, id: u32) -> String {
        let set = self.entries.get(id as usize).map(|e| &e.releases);
        set.map(|s| span_text(s, &self.releases)).unwrap_or_default()
    }
}

/// `set` (sorted) as runs of consecutive releases of `all`; a version `all` lacks stands alone.
fn runs_text(set: &[Version], all: &[Version]) -> String {
    let idx: Option<BTreeSet<usize>> = set.iter().map(|v| all.binary_search(v).ok()).collect();
    match idx {
        Some(idx) => span_text(&idx, all),
        None => set.iter().map(Version::to_string).collect::<Vec<_>>().join(", "),
    }
}

impl Sites {
    /// The versions note for an NCCL inferred from the torch version a log states.
    pub fn torch_pin_note(&self, torch: &str) -> Option<VersionNote> {
        let t = Version::parse(torch)?;
        let (from, nccl) = self.torch_pin(t)?;
        let same = if from == t { String::new() } else { format!(" (read for torch {from}, the same minor)") };
        Some(VersionNote {
            component: "nccl".into(),
            value: nccl.to_string(),
            how: "inferred".into(),
            detail: format!(
                "the NCCL the PyPI wheel of torch {t} pins{same}; a torch built otherwise, or an NCCL installed \
                 over it, can differ"
            ),
        })
    }
}

impl TorchSites {
    fn parse(releases: &[String], sites: &HashMap<String, Vec<String>>) -> Result<TorchSites> {
        let mut t = TorchSites::default();
        for r in releases {
            t.releases.push(Version::parse(r).ok_or_else(|| anyhow!("{CATALOG_FILE}: bad torch release `{r}`"))?);
        }
        let mut keys: Vec<&String> = sites.keys().collect();
        keys.sort();
        for site in keys {
            let (file, line) = split_site(site).ok_or_else(|| anyhow!("{CATALOG_FILE}: bad torch site `{site}`"))?;
            for item in &sites[site] {
                let set = parse_ranges(item, &t.releases, site)?;
                let text = item.split_once(' ').map(|(_, t)| t).unwrap_or("");
                t.by_line.entry(line).or_default().push(t.entries.len());
                t.entries.push(Entry { file: file.to_string(), text: text.to_string(), releases: set });
            }
        }
        Ok(t)
    }
}

/// The release set of one `"RANGES TEXT"` item: `a..b` or one release, comma-separated.
fn parse_ranges(item: &str, releases: &[Version], site: &str) -> Result<BTreeSet<usize>> {
    let ranges = item.split_once(' ').map(|(r, _)| r).unwrap_or(item);
    let index = |v: &Version| releases.binary_search(v).ok();
    let mut set = BTreeSet::new();
    for r in ranges.split(',') {
        let (a, b) = r.split_once("..").unwrap_or((r, r));
        let bad = || anyhow!("{CATALOG_FILE}: site `{site}`: bad release range `{r}`");
        let a = Version::parse(a).and_then(|v| index(&v)).ok_or_else(bad)?;
        let b = Version::parse(b).and_then(|v| index(&v)).ok_or_else(bad)?;
        set.extend(a..=b);
    }
    Ok(set)
}

/// The intersection of release sets; `None` when there are none or one is unknown.
fn intersect<'a>(sets: impl Iterator<Item = Option<&'a BTreeSet<usize>>>) -> Option<BTreeSet<usize>> {
    let mut cand: Option<BTreeSet<usize>> = None;
    for r in sets {
        let r = r?;
        cand = Some(match cand {
            None => r.clone(),
            Some(c) => c.intersection(r).copied().collect(),
        });
    }
    cand
}

fn split_site(s: &str) -> Option<(&str, u32)> {
    let (f, l) = s.rsplit_once(':')?;
    Some((f, l.parse().ok()?))
}

/// What a catalogued message is (the `class` of rules/catalog/*.tsv, docs/catalog.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KnownClass {
    /// Ordered from the most serious: a line two messages fit takes the first.
    Error,
    Teardown,
    PerformanceHint,
    Deprecation,
    ConfigNotice,
    StartupNotice,
}

impl KnownClass {
    pub const ALL: [KnownClass; 6] = [
        KnownClass::Error,
        KnownClass::Teardown,
        KnownClass::PerformanceHint,
        KnownClass::Deprecation,
        KnownClass::ConfigNotice,
        KnownClass::StartupNotice,
    ];

    /// As the catalogue writes it.
    pub fn name(self) -> &'static str {
        match self {
            KnownClass::Error => "error",
            KnownClass::Teardown => "teardown",
            KnownClass::PerformanceHint => "performance-hint",
            KnownClass::Deprecation => "deprecation",
            KnownClass::ConfigNotice => "config-notice",
            KnownClass::StartupNotice => "startup-notice",
        }
    }

    /// As a finding says it (`a known torch.distributed performance hint`).
    pub fn words(self) -> &'static str {
        match self {
            KnownClass::Error => "error",
            KnownClass::Teardown => "teardown message",
            KnownClass::PerformanceHint => "performance hint",
            KnownClass::Deprecation => "deprecation notice",
            KnownClass::ConfigNotice => "configuration notice",
            KnownClass::StartupNotice => "startup notice",
        }
    }

    /// The id of the rule (rules/known-sites.toml) whose finding a line of this class gets.
    pub fn rule_id(self) -> String {
        format!("known-{}", self.name())
    }

    fn parse(s: &str) -> Option<KnownClass> {
        KnownClass::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One catalogued message.
#[derive(Debug, Clone)]
pub struct KnownMsg {
    pub lib: String,
    pub class: KnownClass,
    pub family: String,
    /// The releases that print it, as `2.0.1-2.15.0` (several runs comma-separated).
    pub releases: String,
    pub files: Vec<String>,
    pub text: String,
}

impl KnownMsg {
    /// The library as users name it.
    pub fn lib_name(&self) -> &str {
        match self.lib.as_str() {
            "torch" => "torch.distributed",
            "nemo" => "NeMo",
            "vllm" => "vLLM",
            lib => lib,
        }
    }

    /// Where the catalogue has it, for a finding's context.
    pub fn where_text(&self) -> String {
        let mut files: Vec<&str> = self.files.iter().map(String::as_str).take(2).collect();
        if self.files.len() > 2 {
            files.push("...");
        }
        format!(
            "message catalogue: {} {} of {} ({}; {} {}): `{}`",
            self.lib_name(),
            self.class.words(),
            self.family,
            files.join(", "),
            self.lib,
            self.releases,
            short(&self.text, 120)
        )
    }
}

fn short(s: &str, n: usize) -> String {
    let one = s.replace('\n', " ");
    match one.char_indices().nth(n) {
        Some((i, _)) => format!("{}...", &one[..i]),
        None => one,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownFile {
    releases: HashMap<String, Vec<String>>,
    known: HashMap<String, Vec<String>>,
}

/// One printed line of a message: its literal pieces (between the `{}` of values).
#[derive(Debug)]
struct KnownLine {
    msg: usize,
    pieces: Vec<String>,
    literal: usize,
    /// The message starts with its first piece (no value before it): in a log line that piece
    /// starts the text or follows a prefix's punctuation, never the middle of another sentence
    /// (`Error message: {}` is not `... RPC Error message: Method not found`).
    leads: bool,
}

/// The catalogued messages of torch.distributed and the launcher libraries, looked up by the words
/// of a line: each printed line of a message is filed under its rarest word, and a log line's
/// words pick the candidates whose every literal piece it holds.
#[derive(Debug, Default)]
pub struct Known {
    msgs: Vec<KnownMsg>,
    lines: Vec<KnownLine>,
    by_word: HashMap<String, Vec<usize>>,
}

/// A printed line of a message needs this many literal characters to be told apart.
const KNOWN_MIN_LITERAL: usize = 12;

fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.len() >= 4)
}

/// A sentence of a longer message stands for it with this many literal characters (a paste that
/// broke the message's line after a sentence leaves each sentence on a line of its own).
const KNOWN_MIN_SENTENCE: usize = 24;

/// The texts a message is looked up by, with the literal length each needs: each line it prints,
/// and each sentence of a line of several.
fn printed_lines(text: &str) -> Vec<(&str, usize)> {
    let mut out = Vec::new();
    for l in text.split('\n') {
        out.push((l, KNOWN_MIN_LITERAL));
        let mut start = 0;
        let b = l.as_bytes();
        let mut cuts = Vec::new();
        for i in 1..b.len().saturating_sub(1) {
            if matches!(b[i - 1], b'.' | b'!' | b'?') && b[i] == b' ' && b[i + 1].is_ascii_uppercase() {
                cuts.push(i);
            }
        }
        if cuts.is_empty() {
            continue;
        }
        cuts.push(l.len());
        for c in cuts {
            out.push((l[start..c].trim(), KNOWN_MIN_SENTENCE));
            start = c;
        }
    }
    out
}

impl Known {
    /// The built-in table, parsed on first use (most logs never need it).
    pub fn builtin() -> Result<&'static Known> {
        static K: OnceLock<Result<Known, String>> = OnceLock::new();
        K.get_or_init(|| {
            let text = schema::embedded().iter().find(|(p, _)| *p == KNOWN_FILE).map(|(_, t)| *t).unwrap_or("");
            if text.is_empty() {
                return Ok(Known::default());
            }
            Known::parse(text).map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow!("{e}"))
    }

    pub fn parse(text: &str) -> Result<Known> {
        let f: KnownFile = toml::from_str(text).map_err(|e| anyhow!("{KNOWN_FILE}: {e}"))?;
        let mut releases: HashMap<&str, Vec<Version>> = HashMap::new();
        for (lib, list) in &f.releases {
            let mut vs = Vec::new();
            for r in list {
                vs.push(Version::parse(r).ok_or_else(|| anyhow!("{KNOWN_FILE}: {lib}: bad release `{r}`"))?);
            }
            releases.insert(lib, vs);
        }
        let mut k = Known::default();
        let mut keys: Vec<&String> = f.known.keys().collect();
        keys.sort();
        for key in keys {
            let mut it = key.split(' ');
            let (Some(lib), Some(class), Some(family), None) = (it.next(), it.next(), it.next(), it.next()) else {
                return Err(anyhow!("{KNOWN_FILE}: key `{key}` is not `LIBRARY CLASS FAMILY`"));
            };
            let class = KnownClass::parse(class).ok_or_else(|| anyhow!("{KNOWN_FILE}: `{key}`: unknown class"))?;
            let rel = releases.get(lib).ok_or_else(|| anyhow!("{KNOWN_FILE}: `{key}`: no releases for {lib}"))?;
            for item in &f.known[key] {
                let mut parts = item.splitn(3, ' ');
                let (Some(runs), Some(files), Some(text)) = (parts.next(), parts.next(), parts.next()) else {
                    return Err(anyhow!("{KNOWN_FILE}: `{key}`: item `{item}` is not `RELEASES FILES TEXT`"));
                };
                let set = parse_ranges(runs, rel, key).map_err(|e| anyhow!("{e} (in {KNOWN_FILE})"))?;
                k.msgs.push(KnownMsg {
                    lib: lib.to_string(),
                    class,
                    family: family.to_string(),
                    releases: span_text(&set, rel),
                    files: files.split(',').map(str::to_string).collect(),
                    text: text.to_string(),
                });
            }
        }
        // Each printed line of each message, and how many lines use each word.
        let mut freq: HashMap<String, usize> = HashMap::new();
        let mut lines = Vec::new();
        for (mi, m) in k.msgs.iter().enumerate() {
            for (l, min) in printed_lines(&m.text) {
                let leads = !l.trim_start().starts_with("{}");
                let pieces: Vec<String> =
                    l.split("{}").map(str::trim).filter(|p| !p.is_empty()).map(str::to_string).collect();
                let literal = pieces.iter().map(String::len).sum::<usize>();
                if literal < min || pieces.iter().all(|p| words(p).next().is_none()) {
                    continue;
                }
                let mut seen: Vec<&str> = Vec::new();
                for p in &pieces {
                    for w in words(p) {
                        if !seen.contains(&w) {
                            seen.push(w);
                        }
                    }
                }
                for w in seen {
                    *freq.entry(w.to_string()).or_default() += 1;
                }
                lines.push((mi, pieces, literal, leads));
            }
        }
        let mut by_word: HashMap<String, Vec<usize>> = HashMap::new();
        for (mi, pieces, literal, leads) in lines {
            let anchor = pieces
                .iter()
                .flat_map(|p| words(p))
                .min_by_key(|w| (freq.get(*w).copied().unwrap_or(0), std::cmp::Reverse(w.len())))
                .map(str::to_string);
            let Some(anchor) = anchor else { continue };
            by_word.entry(anchor).or_default().push(k.lines.len());
            k.lines.push(KnownLine { msg: mi, pieces, literal, leads });
        }
        k.by_word = by_word;
        Ok(k)
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    pub fn get(&self, id: u32) -> Option<&KnownMsg> {
        self.msgs.get(id as usize)
    }

    /// The catalogued message a log line (prefixes stripped) prints, if any: the candidates whose
    /// every literal piece the line holds; of several, the one whose file the line names, then the
    /// one with the most literal text, then the most serious class.
    pub fn lookup(&self, line: &str) -> Option<u32> {
        let mut cands: Vec<usize> = Vec::new();
        for w in words(line) {
            if let Some(ls) = self.by_word.get(w) {
                for &l in ls {
                    let kl = &self.lines[l];
                    if !cands.contains(&l)
                        && kl.pieces.iter().all(|p| line.contains(p.as_str()))
                        && (!kl.leads || kl.pieces.first().is_some_and(|p| starts_a_message(line, p)))
                    {
                        cands.push(l);
                    }
                }
            }
        }
        let names_file =
            |l: &KnownLine| self.msgs[l.msg].files.iter().any(|f| line.contains(f.rsplit('/').next().unwrap_or(f)));
        cands
            .into_iter()
            .map(|l| &self.lines[l])
            .min_by_key(|l| (!names_file(l), std::cmp::Reverse(l.literal), self.msgs[l.msg].class, l.msg))
            .map(|l| l.msg as u32)
    }
}

/// `piece` occurs in `line` where a message can start: at its start, or after punctuation (a
/// prefix's `] `, `: `, ` - `), not after a word.
fn starts_a_message(line: &str, piece: &str) -> bool {
    line.match_indices(piece).any(|(i, _)| {
        let before = line[..i].trim_end();
        // A level word ends a prefix too (`NCCL WARN NET/OFI ...`: a net plugin's message).
        let level =
            matches!(before.rsplit(' ').next(), Some("WARN" | "WARNING" | "ERROR" | "INFO" | "CRITICAL" | "FATAL"));
        before.is_empty() || level || !before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

/// A release set as `a-b` runs, comma-separated.
fn span_text(set: &BTreeSet<usize>, releases: &[Version]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &i in set {
        match runs.last_mut() {
            Some(r) if r.1 + 1 == i => r.1 = i,
            _ => runs.push((i, i)),
        }
    }
    runs.iter()
        .map(|&(a, b)| if a == b { releases[a].to_string() } else { format!("{}-{}", releases[a], releases[b]) })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAT: &str = r#"
releases = ["2.18.1", "2.22.3", "2.23.4", "2.32.3"]
[nccl]
"proxy.cc:1458" = ["2.18.1 [Proxy Service] Get listenSock fd fails", "2.22.3 [Service thread] Accept failed"]
"misc/socket.cc:50" = ["2.18.1..2.23.4 socketProgress: Connection closed by remote peer"]
[torch_nccl]
"2.5.1" = "2.21.5"
"#;

    fn hand() -> Vec<Fingerprint> {
        vec![Fingerprint { min: "2.17.1".into(), max: "2.17.1".into(), sites: vec!["proxy.cc:1458".into()] }]
    }

    #[test]
    fn the_message_picks_the_release_at_a_shared_line() {
        let s = Sites::from_parts(CAT, &hand()).unwrap();
        let a = s.lookup("proxy.cc", 1458, "[Service thread] Accept failed Success").unwrap();
        assert_eq!(s.infer([a]), Some((Version(2, 22, 3), Version(2, 22, 3))));
        let b = s.lookup("src/proxy.cc", 1458, "[Proxy Service] Get listenSock fd fails").unwrap();
        assert_eq!(s.infer([b]), Some((Version(2, 18, 1), Version(2, 18, 1))));
        // Another message at that line: only the hand-written (uncatalogued) release is left.
        let c = s.lookup("proxy.cc", 1458, "[Service thread] Could not receive type from localRank 0").unwrap();
        assert_eq!(s.infer([c]), Some((Version(2, 17, 1), Version(2, 17, 1))));
        assert_eq!(s.lookup("xproxy.cc", 1458, "[Service thread] Accept failed"), None);
        assert_eq!(s.lookup("proxy.cc", 1459, "[Service thread] Accept failed"), None);
    }

    #[test]
    fn sites_intersect_and_contradictions_give_nothing() {
        let s = Sites::from_parts(CAT, &[]).unwrap();
        let a = s.lookup("proxy.cc", 1458, "[Service thread] Accept failed x").unwrap();
        let b = s.lookup("misc/socket.cc", 50, "socketProgress: Connection closed by remote peer h").unwrap();
        assert_eq!(s.infer([b]), Some((Version(2, 18, 1), Version(2, 23, 4))));
        assert_eq!(s.infer([a, b]), Some((Version(2, 22, 3), Version(2, 22, 3))));
        let c = s.lookup("proxy.cc", 1458, "[Proxy Service] Get listenSock fd fails").unwrap();
        assert_eq!(s.infer([a, c]), None);
        assert_eq!(s.infer([]), None);
    }

    #[test]
    fn levels_narrow_the_release_and_extend_to_older_hand_written_releases() {
        let cat = format!(
            "{CAT}[nccl_levels]\n\"[Service thread] Accept failed\" = [\"WARN 2.18.1..2.22.3\", \"INFO 2.23.4\", \"ATTN 2.32.3\"]\n"
        );
        let s = Sites::from_parts(&cat, &hand()).unwrap();
        let (info, text) = s.lookup_level("INFO", "[Service thread] Accept failed Success").unwrap();
        assert_eq!(text, "[Service thread] Accept failed");
        assert_eq!(s.infer([info]), Some((Version(2, 23, 4), Version(2, 23, 4))));
        // WARN in the first catalogued release: also in 2.17.1 (hand-written), which the note leaves out.
        let (warn, _) = s.lookup_level("WARN", "[Service thread] Accept failed x").unwrap();
        assert_eq!(s.infer([warn]), Some((Version(2, 17, 1), Version(2, 22, 3))));
        assert_eq!(s.entry_has(warn, Version(2, 17, 1)), None);
        assert_eq!(s.entry_has(warn, Version(2, 32, 3)), Some(false));
        assert_eq!(s.levels_text(warn).unwrap(), "WARN in 2.18.1-2.22.3, INFO in 2.23.4, ATTN in 2.32.3");
        assert!(s.level_note(info).unwrap().contains("NCCL_DEBUG=WARN hides the INFO and ATTN lines"));
        assert_eq!(s.lookup_level("TRACE", "[Service thread] Accept failed"), None);
        assert_eq!(s.lookup_level("INFO", "[Service thread] Accept"), None);
        let short = cat.replace("\"[Service thread] Accept failed\" =", "\"Accept\" =");
        assert!(Sites::from_parts(&short, &[]).unwrap_err().to_string().contains("too short"));
    }

    #[test]
    fn torch_pins_by_release_then_minor() {
        let s = Sites::from_parts(CAT, &[]).unwrap();
        assert_eq!(s.torch_pin(Version(2, 5, 1)), Some((Version(2, 5, 1), Version(2, 21, 5))));
        assert_eq!(s.torch_pin(Version(2, 5, 0)), Some((Version(2, 5, 1), Version(2, 21, 5))));
        assert_eq!(s.torch_pin(Version(2, 6, 0)), None);
    }

    #[test]
    fn torch_sites_match_a_piece_of_the_message_at_the_base_name_and_line() {
        let cat = r#"
releases = ["2.18.1"]
torch_releases = ["2.6.0", "2.7.1", "2.8.0"]
[torch]
"ProcessGroupNCCL.cpp:1479" = ["2.7.1 was not called before program exit"]
"ProcessGroupNCCL.cpp:1538" = ["2.6.0 heart beat monitor thread joined", "2.8.0 was not called before program exit"]
"#;
        let s = Sites::from_parts(cat, &[]).unwrap();
        let a = s
            .lookup_torch(
                "ProcessGroupNCCL.cpp",
                1538,
                "WARNING: destroy_process_group() was not called before program exit",
            )
            .unwrap();
        assert_eq!(s.infer_torch([a]), Some((Version(2, 8, 0), Version(2, 8, 0))));
        let b = s
            .lookup_torch("/x/c10d/ProcessGroupNCCL.cpp", 1479, "Warning: ... was not called before program exit")
            .unwrap();
        assert_eq!(s.infer_torch([a, b]), None);
        assert_eq!(s.lookup_torch("ProcessGroupNCCL.cpp", 1479, "another message"), None);
        assert!(Sites::from_parts(&cat.replace("2.7.1 was", "2.7.0 was"), &[]).is_err());
    }

    #[test]
    fn bad_data_is_an_error_naming_the_file() {
        let e = Sites::from_parts(&CAT.replace("2.18.1..2.23.4", "2.18.1..9.9.9"), &[]).unwrap_err().to_string();
        assert!(e.contains(CATALOG_FILE) && e.contains("misc/socket.cc:50"), "{e}");
    }

    #[test]
    fn the_builds_level_heads_are_the_catalogues() {
        // `may_have_level` answers without the catalogue: it must never say no to a message the
        // catalogue knows, nor drift from it.
        let s = Sites::builtin().unwrap();
        let mut heads: Vec<&str> = s.levels_by_head.keys().map(String::as_str).collect();
        heads.sort_unstable();
        assert_eq!(heads, built::LEVEL_HEADS);
        assert!(s.levels.iter().all(|l| Sites::may_have_level(&format!("  {} and more", l.text))));
        assert!(!Sites::may_have_level("Channel 00/0 : 1 -> 2 via P2P/CUMEM/read"));
    }

    #[test]
    fn builtin_catalogue_loads_and_knows_the_seed_sites() {
        let s = Sites::builtin().unwrap();
        // DeepEP #41: the three proxy.cc WARNs of 2.22.3.
        let ids: Vec<u32> = [
            (1458, "[Service thread] Accept failed Resource temporarily unavailable"),
            (1497, "[Service thread] Could not receive type from localRank 0, res=3, closed=0"),
            (1521, "[Proxy Service 0] Failed to execute operation Close from rank 0, retcode 3"),
        ]
        .iter()
        .map(|(l, m)| s.lookup("proxy.cc", *l, m).unwrap())
        .collect();
        assert_eq!(s.infer(ids), Some((Version(2, 22, 3), Version(2, 22, 3))));
        // 2.32.3 (read from the wheel's code): Accept failed at proxy.cc:1894.
        let a = s.lookup("proxy.cc", 1894, "[Service thread] Accept failed Success").unwrap();
        assert_eq!(s.infer([a]), Some((Version(2, 32, 3), Version(2, 32, 3))));
        assert!(s.torch_pin(Version(2, 14, 1)).is_some());
    }

    const KNOWN: &str = r#"
[releases]
torch = ["2.0.1", "2.1.2", "2.15.0"]
deepspeed = ["0.9.5", "0.19.8"]
[known]
"torch performance-hint ddp" = ["2.0.1..2.15.0 torch/csrc/distributed/c10d/reducer.cpp find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters in the forward pass. This flag results in an extra traversal of the autograd graph every iteration,  which can adversely affect performance."]
"torch deprecation elastic" = ["2.0.1,2.15.0 torch/distributed/launch.py The module torch.distributed.launch is deprecated\nand will be removed in future. Use torchrun.\nNote that --use-env is set by default in torchrun."]
"deepspeed config-notice launch" = ["0.9.5..0.19.8 deepspeed/launcher/runner.py Unable to find hostfile, will proceed with training with local resources only."]
"torch error c10d" = ["2.15.0 torch/distributed/distributed_c10d.py Bad rank {} of {}"]
"deepspeed error zero" = ["0.9.5..0.19.8 deepspeed/runtime/zero/mics.py Error message: {}"]
"#;

    #[test]
    fn known_messages_are_found_by_their_words_in_any_line_of_them() {
        let k = Known::parse(KNOWN).unwrap();
        let hint =
            "[W reducer.cpp:1300] Warning: find_unused_parameters=True was specified in DDP constructor, but did \
                    not find any unused parameters in the forward pass. This flag results in an extra traversal of \
                    the autograd graph every iteration,  which can adversely affect performance. (function operator())";
        let m = k.get(k.lookup(hint).unwrap()).unwrap();
        assert_eq!((m.lib.as_str(), m.class, m.family.as_str()), ("torch", KnownClass::PerformanceHint, "ddp"));
        assert_eq!(m.releases, "2.0.1-2.15.0");
        // The second printed line of a multi-line message finds it too.
        let d = k.lookup("and will be removed in future. Use torchrun.").map(|i| k.get(i).unwrap().class);
        assert_eq!(d, Some(KnownClass::Deprecation));
        assert_eq!(
            k.get(k.lookup("and will be removed in future. Use torchrun.").unwrap()).unwrap().releases,
            "2.0.1, 2.15.0"
        );
        let ds = "[2024-05-01 10:00:00,000] [WARNING] [runner.py:202:fetch_hostfile] Unable to find hostfile, will \
                  proceed with training with local resources only.";
        assert_eq!(k.get(k.lookup(ds).unwrap()).unwrap().lib, "deepspeed");
        // A paste that broke the line after a sentence: the first sentence alone finds the message.
        let wrapped = "[W reducer.cpp:1300] Warning: find_unused_parameters=True was specified in DDP constructor, \
                       but did not find any unused parameters in the forward pass. ";
        assert_eq!(k.get(k.lookup(wrapped).unwrap()).unwrap().family, "ddp");
        // A message under 12 literal characters per line is not told apart; a near miss is nothing.
        assert_eq!(k.lookup("RuntimeError: Bad rank 3 of 2"), None);
        assert_eq!(k.lookup("Unable to find hostfile, will proceed with training"), None);
        assert_eq!(k.lookup("an unrelated line with performance in it"), None);
        // A message that starts with its text starts a line's message, not the middle of one.
        assert!(k.lookup("[Rank 0] Error message: the gather failed").is_some());
        assert_eq!(k.lookup("Export metrics to agent failed: RPC Error message: Method not found!"), None);
    }

    #[test]
    fn known_table_errors_name_the_file() {
        let e = Known::parse(&KNOWN.replace("torch error c10d", "torch oops c10d")).unwrap_err().to_string();
        assert!(e.contains(KNOWN_FILE) && e.contains("unknown class"), "{e}");
        let e = Known::parse(&KNOWN.replace("2.0.1..2.15.0 torch", "2.0.1..2.9.9 torch")).unwrap_err().to_string();
        assert!(e.contains(KNOWN_FILE), "{e}");
    }

    #[test]
    fn builtin_known_table_loads() {
        let k = Known::builtin().unwrap();
        assert!(k.len() > 1000, "{}", k.len());
    }
}
