//! PyTorch Flight Recorder dumps (`TORCH_NCCL_TRACE_BUFFER_SIZE`, written on a watchdog timeout with
//! `TORCH_NCCL_DUMP_ON_TIMEOUT=1` to `TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`, default
//! `/tmp/nccl_trace_rank_<rank>`). Recognised by content (a pickle holding `entries` and
//! `pg_status`), not by name. Per process group: each rank's last enqueued, started and completed
//! collective, the ranks that never joined collective N, mismatched collectives, ranks without a
//! dump. What they show becomes `[epdoctor-fr]` lines that the engine reads like any log (the rules
//! in rules/flight-recorder.toml say what each means, and which of them leads over the victims'
//! timeouts: `leads_over`).

pub mod pickle;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use pickle::Value;

use crate::log::Input;

pub const PREFIX: &str = "[epdoctor-fr]";
/// The name of the engine input that holds the lines made from the dumps.
pub const SOURCE: &str = "flight-recorder";
/// A dump is small (kilobytes per thousand entries); anything far larger is not one.
const MAX_DUMP: u64 = 512 << 20;

/// One rank's dump.
#[derive(Debug, Clone)]
pub struct Dump {
    pub path: PathBuf,
    pub rank: Option<u32>,
    pub version: String,
    pub nccl: Option<String>,
    pub groups: BTreeMap<String, Group>,
    pub pg_status: BTreeMap<String, Status>,
    /// pg_status was not in the dump (older torch): read from the entries.
    pub derived: bool,
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, Default)]
pub struct Group {
    pub desc: String,
    pub ranks: Vec<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Status {
    pub enqueued: i64,
    pub started: i64,
    pub completed: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub pg: String,
    /// The group's name and description (`process_group`); the name keys `pg_config`.
    pub pg_name: Option<String>,
    pub pg_desc: Option<String>,
    pub seq: i64,
    pub p2p: bool,
    /// `all_reduce` (without the backend's `nccl:` or `gloo:` prefix).
    pub op: String,
    pub sizes: String,
    pub dtypes: String,
    pub state: String,
    /// Folded Python stack where it was called (`all_reduce <- train.py:88`).
    pub stack: Option<String>,
}

/// A pickle whose first bytes hold one of the dump's keys.
fn looks_like_dump(bytes: &[u8]) -> bool {
    let h = &bytes[..bytes.len().min(64)];
    pickle::looks_like(h)
        && [&b"version"[..], b"entries", b"pg_config"].iter().any(|k| h.windows(k.len()).any(|w| w == *k))
}

/// The dump at `path`, if the file is one (its first bytes are read first: a log is never read whole).
pub fn read_if_dump(path: &Path) -> Option<Dump> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path).ok()?.take(64).read_to_end(&mut head).ok()?;
    looks_like_dump(&head).then(|| read(path).ok()).flatten()
}

/// Each rank's last enqueued collective in the group most ranks belong to (the default group).
pub fn last_enqueued(dumps: &[Dump]) -> BTreeMap<u32, i64> {
    let pg = dumps
        .iter()
        .flat_map(|d| d.groups.iter().map(|(k, g)| (g.ranks.len(), k.clone())))
        .max()
        .map(|(_, k)| k)
        .filter(|k| dumps.iter().any(|d| d.pg_status.contains_key(k)))
        .or_else(|| dumps.iter().flat_map(|d| d.pg_status.keys()).min().cloned());
    let Some(pg) = pg else { return BTreeMap::new() };
    dumps.iter().filter_map(|d| Some((d.rank?, d.pg_status.get(&pg)?.enqueued))).collect()
}

/// Read one dump.
pub fn read(path: &Path) -> anyhow::Result<Dump> {
    use anyhow::Context;
    let len = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len();
    if len > MAX_DUMP {
        anyhow::bail!("{}: {len} bytes is too large for a Flight Recorder dump", path.display());
    }
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    from_bytes(&data, path)
}

pub fn from_bytes(data: &[u8], path: &Path) -> anyhow::Result<Dump> {
    let v = pickle::parse(data).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if v.get("entries").is_none() && v.get("pg_status").is_none() {
        anyhow::bail!("{}: a pickle, but not a Flight Recorder dump (no `entries`, no `pg_status`)", path.display());
    }
    let rank = v.get("rank").and_then(Value::as_int).and_then(|r| u32::try_from(r).ok()).or_else(|| rank_of_name(path));
    let mut groups = BTreeMap::new();
    if let Some(Value::Dict(kv)) = v.get("pg_config") {
        for (k, g) in kv {
            let ranks = g
                .get("ranks")
                .map(|r| match r {
                    Value::Str(s) => s
                        .trim_matches(|c| c == '[' || c == ']')
                        .split(',')
                        .filter_map(|x| x.trim().parse().ok())
                        .collect(),
                    other => {
                        other.items().iter().filter_map(Value::as_int).filter_map(|i| u32::try_from(i).ok()).collect()
                    }
                })
                .unwrap_or_default();
            let desc = g.get("desc").and_then(Value::as_str).unwrap_or("").to_string();
            groups.insert(key(k), Group { desc, ranks });
        }
    }
    let entries: Vec<Entry> = v.get("entries").map(|e| e.items().iter().map(entry).collect()).unwrap_or_default();
    let mut pg_status = BTreeMap::new();
    if let Some(Value::Dict(kv)) = v.get("pg_status") {
        for (k, s) in kv {
            let n = |f: &str| s.get(f).and_then(Value::as_int).unwrap_or(-1);
            pg_status.insert(
                key(k),
                Status {
                    enqueued: n("last_enqueued_collective"),
                    started: n("last_started_collective"),
                    completed: n("last_completed_collective"),
                },
            );
        }
    }
    // Older dumps have no pg_status: each group's progress from its entries, as torch's analyser reads it.
    let derived = pg_status.is_empty();
    if derived {
        pg_status = status_from_entries(&entries);
    }
    Ok(Dump {
        path: path.to_path_buf(),
        rank,
        version: v.get("version").and_then(Value::as_str).unwrap_or("?").to_string(),
        nccl: v.get("comm_lib_version").and_then(Value::as_str).map(String::from),
        groups,
        pg_status,
        derived,
        entries,
    })
}

/// The rank a dump's file name ends with: `nccl_trace_rank_3`, `host7_3`, `fr_3.pkl`.
fn rank_of_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let stem = [".pkl", ".pickle", ".bin"].iter().find_map(|x| name.strip_suffix(x)).unwrap_or(&name);
    let digits: String = stem.chars().rev().take_while(|c| c.is_ascii_digit()).collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

/// Each group's last enqueued, started and completed collective from the entries' sequence numbers
/// and states (entries of point-to-point ops number apart and are left out).
fn status_from_entries(entries: &[Entry]) -> BTreeMap<String, Status> {
    let mut out: BTreeMap<String, Status> = BTreeMap::new();
    for e in entries.iter().filter(|e| !e.p2p && e.seq >= 0) {
        let s = out.entry(e.pg.clone()).or_insert(Status { enqueued: -1, started: -1, completed: -1 });
        s.enqueued = s.enqueued.max(e.seq);
        if e.state == "started" || e.state == "completed" {
            s.started = s.started.max(e.seq);
        }
        if e.state == "completed" {
            s.completed = s.completed.max(e.seq);
        }
    }
    out
}

fn key(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn show(v: Option<&Value>) -> String {
    fn one(v: &Value, out: &mut String) {
        match v {
            Value::List(x) | Value::Tuple(x) => {
                out.push('[');
                for (i, e) in x.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    one(e, out);
                }
                out.push(']');
            }
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Str(s) => out.push_str(s),
            Value::None => out.push_str("None"),
            other => {
                let _ = write!(out, "{other:?}");
            }
        }
    }
    let mut s = String::new();
    if let Some(v) = v {
        one(v, &mut s);
    }
    s
}

fn entry(e: &Value) -> Entry {
    let frames: Vec<crate::model::run::stack::Frame> = e
        .get("frames")
        .map(|f| {
            f.items()
                .iter()
                .map(|fr| {
                    let file = fr.get("filename").and_then(Value::as_str).unwrap_or("?");
                    let line = fr.get("line").and_then(Value::as_int).unwrap_or(0);
                    crate::model::run::stack::Frame {
                        func: fr.get("name").and_then(Value::as_str).unwrap_or("?").to_string(),
                        loc: Some(format!("{file}:{line}")),
                        python: true,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let stack = Some(crate::model::run::stack::fold(&frames)).filter(|s| !s.is_empty());
    let name = e.get("profiling_name").and_then(Value::as_str).unwrap_or("?");
    Entry {
        pg: e.get("pg_id").map(key).unwrap_or_default(),
        pg_name: e.get("process_group").and_then(|g| g.items().first()).map(key),
        pg_desc: e.get("process_group").and_then(|g| g.items().get(1)).and_then(Value::as_str).map(String::from),
        seq: e.get("collective_seq_id").and_then(Value::as_int).unwrap_or(-1),
        p2p: e.get("is_p2p").and_then(Value::as_bool).unwrap_or(false),
        op: strip_backend(name).to_string(),
        sizes: show(e.get("input_sizes")),
        dtypes: show(e.get("input_dtypes")),
        state: e.get("state").and_then(Value::as_str).unwrap_or("?").to_string(),
        stack,
    }
}

/// `nccl:all_reduce`, `gloo:all_reduce` -> `all_reduce`.
fn strip_backend(name: &str) -> &str {
    match name.split_once(':') {
        Some((b, op)) if !b.is_empty() && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') => op,
        _ => name,
    }
}

/// A group's configuration: by its id, else by the name its entries give (gloo dumps key
/// `pg_config` by name: `''` while `pg_status` says `'0'`), else the only group there is.
fn group_of(dumps: &[Dump], pg: &str) -> Group {
    if let Some(g) = dumps.iter().find_map(|d| d.groups.get(pg)) {
        return g.clone();
    }
    let name = dumps.iter().flat_map(|d| &d.entries).find(|e| e.pg == pg).and_then(|e| e.pg_name.clone());
    if let Some(g) = name.and_then(|n| dumps.iter().find_map(|d| d.groups.get(&n))) {
        return g.clone();
    }
    let only: BTreeSet<Vec<u32>> =
        dumps.iter().filter(|d| d.groups.len() == 1).flat_map(|d| d.groups.values().map(|g| g.ranks.clone())).collect();
    match (only.len(), dumps.iter().all(|d| d.groups.len() <= 1)) {
        (1, true) => dumps.iter().find_map(|d| d.groups.values().next()).cloned().unwrap_or_default(),
        _ => Group::default(),
    }
}

fn ranks_text(r: &[u32]) -> String {
    let s: Vec<String> = r.iter().map(u32::to_string).collect();
    format!("{} {}", if r.len() == 1 { "rank" } else { "ranks" }, s.join(", "))
}

/// What the dumps say, as `[epdoctor-fr]` lines (one fact a line), for the engine. A line that
/// names a culprit says so (`culprit rank 3`, `rank 1 never joined`, `rank 3 of the group wrote no
/// ... dump`): the engine reads the rank from there.
pub fn lines(dumps: &[Dump]) -> Vec<String> {
    let mut out = Vec::new();
    for d in dumps {
        let name = d.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        out.push(format!(
            "{PREFIX} dump {name}: rank={} version={} nccl={} entries={}{}",
            d.rank.map(|r| r.to_string()).unwrap_or_else(|| "?".into()),
            d.version,
            d.nccl.as_deref().unwrap_or("?"),
            d.entries.len(),
            if d.derived { " (no pg_status: progress read from the entries)" } else { "" }
        ));
    }
    let pgs: BTreeSet<&String> = dumps.iter().flat_map(|d| d.pg_status.keys()).collect();
    for pg in pgs {
        group_lines(dumps, pg, &mut out);
    }
    out
}

/// The entry of collective `seq` of group `pg` in one dump.
fn at(d: &Dump, pg: &str, seq: i64) -> Option<Entry> {
    d.entries.iter().find(|e| e.pg == pg && !e.p2p && e.seq == seq).cloned()
}

/// One group's facts: the first collective some rank never joined, else the first whose ranks
/// disagree, then the ranks without a dump, else the collective every rank joined and none finished.
fn group_lines(dumps: &[Dump], pg: &str, out: &mut Vec<String>) {
    let mut group = group_of(dumps, pg);
    if group.desc.is_empty() {
        let desc = dumps.iter().flat_map(|d| &d.entries).find(|e| e.pg == pg).and_then(|e| e.pg_desc.clone());
        group.desc = desc.unwrap_or_default();
    }
    let label = if group.desc.is_empty() { format!("pg={pg}") } else { format!("pg={pg} ({})", group.desc) };
    let have: BTreeMap<u32, (&Dump, Status)> =
        dumps.iter().filter_map(|d| Some((d.rank?, (d, *d.pg_status.get(pg)?)))).collect();
    for (r, (_, s)) in &have {
        out.push(format!(
            "{PREFIX} {label} rank={r} last_enqueued={} last_started={} last_completed={}",
            s.enqueued, s.started, s.completed
        ));
    }
    let missing: Vec<u32> = group.ranks.iter().copied().filter(|r| !have.contains_key(r)).collect();
    let lo = have.values().map(|(_, s)| s.completed).min().unwrap_or(0);
    let hi = have.values().map(|(_, s)| s.enqueued).max().unwrap_or(0);
    let mut culprit = false;
    for seq in (lo + 1).max(1)..=hi {
        let joined: Vec<u32> = have.iter().filter(|(_, (_, s))| s.enqueued >= seq).map(|(r, _)| *r).collect();
        let absent: Vec<u32> = have.iter().filter(|(_, (_, s))| s.enqueued < seq).map(|(r, _)| *r).collect();
        let seen: Vec<(u32, Entry)> = joined.iter().filter_map(|r| Some((*r, at(have[r].0, pg, seq)?))).collect();
        let Some((_, first)) = seen.first().cloned() else { continue };
        let desc = format!("seq={seq} op={} sizes={} dtypes={}", first.op, first.sizes, first.dtypes);
        let stack = first.stack.as_deref().map(|s| format!(", called at {s}")).unwrap_or_default();
        if !absent.is_empty() {
            let last: Vec<String> = absent.iter().map(|r| format!("#{}", have[r].1.enqueued)).collect();
            out.push(format!(
                "{PREFIX} {label} {desc}: {} never joined (last enqueued {}); {} enqueued it{stack}",
                ranks_text(&absent),
                last.join(", "),
                ranks_text(&joined)
            ));
            culprit = true;
            break;
        }
        if let Some(line) = mismatch(&seen) {
            out.push(format!("{PREFIX} {label} seq={seq}: collective mismatch, {line}"));
            culprit = true;
            break;
        }
    }
    if !missing.is_empty() {
        // Ranks waiting in the same collective are named together.
        let mut by_wait: Vec<((i64, String), Vec<u32>)> = Vec::new();
        for (r, (d, s)) in have.iter().filter(|(_, (_, s))| s.enqueued > s.completed) {
            let Some(e) = at(d, pg, s.completed + 1) else { continue };
            match by_wait.iter_mut().find(|(k, _)| k.0 == e.seq && k.1 == e.op) {
                Some((_, rs)) => rs.push(*r),
                None => by_wait.push(((e.seq, e.op), vec![*r])),
            }
        }
        let waits: Vec<String> = by_wait
            .iter()
            .map(|((seq, op), rs)| {
                format!("{} {} in seq={seq} op={op}", ranks_text(rs), if rs.len() == 1 { "waits" } else { "wait" })
            })
            .collect();
        let waits = if waits.is_empty() { String::new() } else { format!(" while {}", waits.join(", ")) };
        out.push(format!(
            "{PREFIX} {label}: {} of the group wrote no Flight Recorder dump{waits}",
            ranks_text(&missing)
        ));
    } else if !culprit {
        not_completed(&have, pg, &label, out);
    }
}

/// The ranks whose collective differs from the others' at one sequence number: the odd ones out
/// (the signature most ranks share is the reference; on a tie, the lowest rank's, as torch's
/// analyser compares with the first rank).
fn mismatch(seen: &[(u32, Entry)]) -> Option<String> {
    let sig = |e: &Entry| format!("{} {} {}", e.op, e.sizes, e.dtypes);
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for (r, e) in seen {
        match groups.iter_mut().find(|(s, _)| *s == sig(e)) {
            Some((_, rs)) => rs.push(*r),
            None => groups.push((sig(e), vec![*r])),
        }
    }
    if groups.len() < 2 {
        return None;
    }
    let most = groups.iter().map(|(_, rs)| rs.len()).max().unwrap_or(0);
    let reference = groups.iter().position(|(_, rs)| rs.len() == most).unwrap_or(0);
    let odd: Vec<u32> =
        groups.iter().enumerate().filter(|(i, _)| *i != reference).flat_map(|(_, (_, rs))| rs.clone()).collect();
    let each: Vec<String> = groups.iter().map(|(s, rs)| format!("{} {s}", ranks_text(rs))).collect();
    Some(format!("culprit {}: {}", ranks_text(&odd), each.join("; ")))
}

/// Every rank joined: the collective where they all wait (none completed it), or the ranks that did
/// not complete what others did.
fn not_completed(have: &BTreeMap<u32, (&Dump, Status)>, pg: &str, label: &str, out: &mut Vec<String>) {
    let stuck: Vec<(u32, Entry)> = have
        .iter()
        .filter(|(_, (d, s))| s.enqueued > s.completed && !(d.derived && s.completed < 0 && s.started < 0))
        .filter_map(|(r, (d, s))| Some((*r, at(d, pg, s.completed + 1)?)))
        .collect();
    let Some((_, first)) = stuck.first().cloned() else { return };
    let desc = format!("seq={} op={} sizes={} dtypes={}", first.seq, first.op, first.sizes, first.dtypes);
    let same: Vec<u32> = stuck.iter().filter(|(_, e)| e.seq == first.seq).map(|(r, _)| *r).collect();
    let stack = first.stack.as_deref().map(|s| format!(", called at {s}")).unwrap_or_default();
    if same.len() == have.len() && same.len() == stuck.len() {
        out.push(format!(
            "{PREFIX} {label} {desc}: every rank enqueued it and none completed it ({}; state {}){stack}",
            ranks_text(&same),
            first.state
        ));
    } else {
        let done: Vec<u32> = have.keys().copied().filter(|r| !same.contains(r)).collect();
        out.push(format!(
            "{PREFIX} {label} {desc}: {} did not complete it (state {}), {} did{stack}",
            ranks_text(&same),
            first.state,
            ranks_text(&done)
        ));
    }
}

/// Split the inputs: Flight Recorder dumps (read here) and everything else (logs for the engine).
/// A dump that cannot be read becomes a note, and its bytes are not read as a log.
pub fn split(inputs: Vec<Input>) -> (Vec<Input>, Vec<Dump>, Vec<String>) {
    let (mut logs, mut dumps, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    use std::io::Read;
    let head = |mut r: Box<dyn Read + Send>| {
        let mut h = Vec::new();
        let _ = (&mut r).take(64).read_to_end(&mut h);
        h
    };
    for i in inputs {
        let (name, start): (String, Vec<u8>) = match &i {
            // Only regular files: opening a named pipe here would take the bytes the engine reads.
            Input::File(p) if p.metadata().is_ok_and(|m| m.is_file()) => {
                (p.display().to_string(), std::fs::File::open(p).map(|f| head(Box::new(f))).unwrap_or_default())
            }
            Input::Bytes { name, bytes } => (name.clone(), bytes[..bytes.len().min(64)].to_vec()),
            Input::Member(m) => (m.name.clone(), head(m.reader())),
            _ => (String::new(), Vec::new()),
        };
        if !pickle::looks_like(&start) {
            logs.push(i);
            continue;
        }
        if !looks_like_dump(&start) {
            notes.push(format!("skipped: {name} (a Python pickle, not a Flight Recorder dump)"));
            continue;
        }
        let got = match &i {
            Input::File(p) => read(p),
            Input::Bytes { bytes, .. } => from_bytes(bytes, Path::new(&name)),
            Input::Member(m) => {
                let mut all = Vec::new();
                m.reader()
                    .take(MAX_DUMP)
                    .read_to_end(&mut all)
                    .map_err(anyhow::Error::from)
                    .and_then(|_| from_bytes(&all, Path::new(&name)))
            }
            _ => continue,
        };
        match got {
            Ok(d) => dumps.push(d),
            Err(e) => notes.push(format!("Flight Recorder dump skipped: {e:#}")),
        }
    }
    (logs, dumps, notes)
}

/// The inputs `explain` (and a repro cell) gives the engine: the logs, and the dumps' lines as one
/// more input. Also the notes, and whether any dump was read. Only unreadable dumps: an error.
pub fn prepare(x: crate::log::Expanded) -> anyhow::Result<(Vec<Input>, Vec<String>, bool)> {
    let (mut logs, dumps, fr_notes) = split(x.inputs);
    if logs.is_empty() && dumps.is_empty() && !fr_notes.is_empty() {
        anyhow::bail!("nothing to read: {}", fr_notes.join("; "));
    }
    let had = !dumps.is_empty();
    logs.extend(input(&dumps));
    let mut notes = x.notes;
    notes.extend(fr_notes);
    Ok((logs, notes, had))
}

/// The engine input holding the dumps' lines.
pub fn input(dumps: &[Dump]) -> Option<Input> {
    if dumps.is_empty() {
        return None;
    }
    Some(Input::Memory { name: SOURCE.into(), text: lines(dumps).join("\n") + "\n" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(rank: u32, enq: i64, done: i64, entries: Vec<(i64, &str, &str, &str)>) -> Dump {
        Dump {
            path: PathBuf::from(format!("nccl_trace_rank_{rank}")),
            rank: Some(rank),
            version: "2.10".into(),
            nccl: Some("2.28.9".into()),
            groups: [("0".to_string(), Group { desc: "default_pg".into(), ranks: vec![0, 1] })].into(),
            pg_status: [("0".to_string(), Status { enqueued: enq, started: -1, completed: done })].into(),
            derived: false,
            entries: entries
                .into_iter()
                .map(|(seq, op, sizes, dtypes)| Entry {
                    pg: "0".into(),
                    pg_name: Some("0".into()),
                    pg_desc: Some("default_pg".into()),
                    seq,
                    p2p: false,
                    op: op.into(),
                    sizes: sizes.into(),
                    dtypes: dtypes.into(),
                    state: "scheduled".into(),
                    stack: Some("all_reduce <- train.py:9".into()),
                })
                .collect(),
        }
    }

    #[test]
    fn the_rank_that_never_joined() {
        let d = [dump(0, 5, 4, vec![(5, "all_reduce", "[[4096]]", "[Float]")]), dump(1, 4, 4, vec![])];
        let l = lines(&d);
        assert!(l.contains(&"[epdoctor-fr] pg=0 (default_pg) seq=5 op=all_reduce sizes=[[4096]] dtypes=[Float]: rank 1 never joined (last enqueued #4); rank 0 enqueued it, called at all_reduce <- train.py:9".to_string()), "{l:#?}");
    }

    #[test]
    fn a_mismatch_and_a_missing_dump() {
        let d = [
            dump(0, 5, 4, vec![(5, "all_reduce", "[[4096]]", "[Float]")]),
            dump(1, 5, 4, vec![(5, "all_reduce", "[[2048]]", "[BFloat16]")]),
        ];
        let l = lines(&d);
        assert!(
            l.iter().any(|x| x.ends_with(
                "seq=5: collective mismatch, culprit rank 1: rank 0 all_reduce [[4096]] [Float]; rank 1 all_reduce [[2048]] [BFloat16]"
            )),
            "{l:#?}"
        );
        let l = lines(&d[..1]);
        assert!(l.iter().any(|x| x.ends_with("pg=0 (default_pg): rank 1 of the group wrote no Flight Recorder dump while rank 0 waits in seq=5 op=all_reduce")), "{l:#?}");
    }

    #[test]
    fn garbage_is_an_error_not_a_dump() {
        let p = Path::new("nccl_trace_rank_3");
        assert!(from_bytes(b"\x80\x02K\x01.", p).unwrap_err().to_string().contains("not a Flight Recorder dump"));
        assert!(from_bytes(b"\x80\x02}q\x00(X\x07", p)
            .unwrap_err()
            .to_string()
            .starts_with("nccl_trace_rank_3: not a readable pickle"));
    }
}
