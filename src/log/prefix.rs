//! What launchers and log collectors put in front of a library's own line, stripped before any
//! pattern or level sees the line: Slurm `srun --label` (`12: `), torchrun (`[rank3]:`,
//! `[default0]:`), mpirun `--tag-output` (`[1,3]<stderr>:`), Ray (`(RayWorkerWrapper pid=123,
//! ip=10.0.0.1) `), docker compose (`trainer-1  | `), `kubectl logs --prefix` (`[pod/x/c] `), pdsh
//! (`host: ` before another prefix), ISO-8601 and syslog timestamps, `[stderr]`-style tags; several
//! vLLM's logger head, NeMo's, torchtitan's and Python logging's `NAME - LEVEL - ` after a stamp
//! (their level kept); several may stack. A `^`-anchored rule pattern then sees where the message
//! starts.
//!
//! NCCL's own `[timestamp] host:pid:tid [dev]` head and c10's `[W1129 ...]` are not prefixes:
//! they belong to the record and are parsed there.

use super::record::Level;

/// The prefixes found in front of a line, and the rest.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Prefixed<'a> {
    /// Rank named by a prefix: `[rankN]` and mpirun's and srun's task ids are global ranks.
    pub rank: Option<u32>,
    /// torchrun's `[defaultN]`: the local rank (the global rank on one node).
    pub local_rank: Option<u32>,
    /// Host or address a collector named (Ray's `ip=`, syslog's host, pdsh).
    pub host: Option<&'a str>,
    /// Process id a collector named (Ray's `pid=`, syslog's `prog[pid]`).
    pub pid: Option<u32>,
    /// Seconds since the start of the year, from an ISO-8601 or syslog prefix.
    pub ts: Option<f64>,
    /// The line had leading whitespace after its prefixes (Python traceback frames).
    pub indented: bool,
    /// The level a logger's head gave the message (vLLM's `WARNING 03-22 18:40:47 [f.py:137] `);
    /// the caller drops it on a continuation line of the same record.
    pub level: Option<Level>,
    /// Bytes of the line up to the end of that head: the same head on the next line means the
    /// same record continued (vLLM repeats it on every line of a multi-line message).
    pub head_end: usize,
    /// The head is one that a multi-line message repeats on each line (vLLM's, Ray's), so the same
    /// head again is the message continued. NeMo and Python logging write a head once and indent
    /// the rest: two warnings under the same head (the same second, NeMo's one `nemo_logging:N`
    /// site) are two messages, each keeping its level.
    pub head_repeats: bool,
    /// The file that head names (`custom_all_reduce.py`).
    pub site: Option<&'a str>,
    /// The message, prefixes and the whitespace after them removed.
    pub rest: &'a str,
}

impl<'a> Prefixed<'a> {
    /// The rank the prefixes imply: an explicit global rank, else the local one.
    pub fn any_rank(&self) -> Option<u32> {
        self.rank.or(self.local_rank)
    }
}

/// Strip every launcher and collector prefix from `line`.
pub fn strip_prefixes(line: &str) -> Prefixed<'_> {
    let mut p = Prefixed { rest: line, ..Prefixed::default() };
    let mut stripped = false;
    for _ in 0..8 {
        let s = if stripped { p.rest.strip_prefix(' ').unwrap_or(p.rest) } else { p.rest };
        let Some(next) = one(after_ws(s), &mut p) else { break };
        if p.level.is_some() && p.head_end == 0 {
            p.head_end = line.len() - next.len();
        }
        p.rest = next;
        stripped = true;
    }
    // One space after a prefix separates it from the message; more is the message's indentation.
    let s = if stripped { p.rest.strip_prefix(' ').unwrap_or(p.rest) } else { p.rest };
    let trimmed = after_ws(s);
    p.indented = trimmed.len() != s.len();
    p.rest = trimmed;
    p
}

/// Strip one prefix from the start of `s`, recording what it says in `p`.
fn one<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let b = s.as_bytes();
    match *b.first()? {
        b'[' => bracket(s, p),
        b'(' => ray(s, p),
        b'0'..=b'9' => iso_ts(s, p).or_else(|| srun_label(s, p)).or_else(|| container_id(s)),
        // NCCL's `host:pid:tid` head (most lines of an INFO log): a name then `:` and no space
        // is none of these prefixes (each wants a space, ` | `, `: ` or a level word there).
        b'A'..=b'Z' | b'a'..=b'z' if b.get(name_len(s)) == Some(&b':') && b.get(name_len(s) + 1) != Some(&b' ') => None,
        b'A'..=b'Z' | b'a'..=b'z' => logger_head(s, p)
            .or_else(|| syslog(s, p))
            .or_else(|| compose(s))
            .or_else(|| pdsh(s, p))
            .or_else(|| container_id(s))
            .or_else(|| tag_pipe(s)),
        _ => None,
    }
}

/// At most the first `n` bytes of `s`, cut on a character boundary.
fn head(s: &str, n: usize) -> &str {
    let mut n = n.min(s.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// Bytes at the start of `s` that a host or service name may hold (`[A-Za-z0-9._-]`).
fn name_len(s: &str) -> usize {
    s.bytes().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_')).count()
}

fn after_ws(s: &str) -> &str {
    s.trim_start_matches([' ', '\t'])
}

fn digits(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_digit).count()
}

/// `[rank3]:`, `[default0]:`, `[1,3]<stderr>:`, `[pod/name/container] `, `[stderr] `.
fn bracket<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let close = head(s, 256).find(']')?;
    let inner = &s[1..close];
    let after = &s[close + 1..];
    if let Some(n) = inner.strip_prefix("rank").filter(|n| !n.is_empty() && digits(n) == n.len()) {
        let rest = after.strip_prefix(':')?;
        p.rank = n.parse().ok();
        return Some(rest);
    }
    if let Some(n) = inner.strip_prefix("default").filter(|n| !n.is_empty() && digits(n) == n.len()) {
        let rest = after.strip_prefix(':')?;
        p.local_rank = n.parse().ok();
        return Some(rest);
    }
    if let Some((job, rank)) = inner.split_once(',') {
        if !job.is_empty() && digits(job) == job.len() && !rank.is_empty() && digits(rank) == rank.len() {
            // `[1,3]<stdout>:` (`--tag-output`) or `[1,3]:`.
            let rest = match after.strip_prefix('<') {
                Some(t) => {
                    let end = head(t, 16).find(">:")?;
                    &t[end + 2..]
                }
                None => after.strip_prefix(':')?,
            };
            p.rank = rank.parse().ok();
            return Some(rest);
        }
    }
    // TorchServe's frontend forwards a worker's stdout/stderr under its own log4j head
    // (`[%-5p] %t %c - `): `[INFO ] W-9000-model_1.0-stdout MODEL_LOG - `. That level is the
    // stream's, not the message's, so the head goes and the model's line is read on its own.
    if matches!(inner.trim_end(), "INFO" | "WARN" | "ERROR" | "DEBUG") {
        let t = after.strip_prefix(' ').unwrap_or("");
        if let Some(rest) = t.strip_prefix("W-").and_then(|w| w[name_len(w)..].strip_prefix(" MODEL_LOG - ")) {
            return Some(rest);
        }
    }
    // Determined's `[rank=3] `.
    if let Some(n) = inner.strip_prefix("rank=").filter(|n| !n.is_empty() && digits(n) == n.len()) {
        let rest = after.strip_prefix(' ')?;
        p.rank = n.parse().ok();
        return Some(rest);
    }
    // A bracketed ISO-8601 stamp: SGLang's `[2025-01-02 10:11:12 TP1] ` (its parallel-rank tags
    // follow the time), Determined's `[2024-02-27T21:35:32.106313Z] `.
    // NCCL 2.32 writes the same stamp as SGLang's untagged one; its own parser reads that (a
    // message that merely names NCCL, DeepSpeed's `NCCL backend ... not yet implemented`, is no
    // NCCL line).
    if inner.len() >= 19 && after.starts_with(' ') && !super::records::is_nccl_line(head(after, 160)) {
        let (stamp, tags) = match inner.get(19..).and_then(|t| t.find(' ')).map(|i| i + 19) {
            Some(i) => (&inner[..i], &inner[i + 1..]),
            None => (inner, ""),
        };
        let tags_ok = tags.split(' ').all(|t| {
            t.is_empty()
                || (t.len() <= 8
                    && t.starts_with(|c: char| c.is_ascii_uppercase())
                    && t.ends_with(|c: char| c.is_ascii_digit()))
        });
        let mut probe = Prefixed::default();
        let spaced = format!("{stamp} ");
        if tags_ok && iso_ts(&spaced, &mut probe).is_some() {
            p.ts = probe.ts;
            let rest = &after[1..];
            // torch's own handler: the level is read, the logger's name stays in the message (as
            // the site of torch's glog-style head does), which the rules of its banner read.
            if let Some(l) = torch_logging_level(rest) {
                p.level = Some(l);
            }
            return Some(rest);
        }
    }
    if let Some(rest) = ray_core_head(inner, after, p) {
        return Some(rest);
    }
    if let Some(rest) = nemo_head(inner, after, p) {
        return Some(rest);
    }
    // A program's tag before Python logging's stamp: torchtitan's `[titan] 2025-03-12 11:10:21,603 - `.
    if let Some(t) = after.strip_prefix(' ').filter(|_| (2..=16).contains(&inner.len())) {
        if inner.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_'))
            && iso_ts(t, &mut Prefixed::default()).is_some()
        {
            return Some(t);
        }
    }
    // A collector's line counter (`[80746] `) in front of another prefix.
    if !inner.is_empty() && digits(inner) == inner.len() && inner.len() <= 9 {
        let rest = after.strip_prefix(' ')?;
        let mut probe = Prefixed::default();
        return one(rest, &mut probe).is_some().then_some(rest);
    }
    if matches!(inner, "stdout" | "stderr" | "STDOUT" | "STDERR" | "out" | "err") {
        let rest = after.strip_prefix(':').unwrap_or(after);
        return Some(rest);
    }
    // Open MPI's and UCX's crash handlers: `[host:pid] `, `[host:pid:tid:n] `.
    if let Some((host, rest)) = inner.split_once(':') {
        let pid = rest.split(':').next().unwrap_or("");
        if !host.is_empty()
            && host.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
            && !pid.is_empty()
            && digits(pid) == pid.len()
            && rest.bytes().all(|c| c.is_ascii_digit() || c == b':')
            && after.starts_with(':')
            && !rest.contains(':')
            && pid.len() <= 5
        {
            // `[gpu187:1]:` (accelerate and DeepSpeed's per-host prefix): the host and the rank.
            p.host = Some(host);
            p.rank = pid.parse().ok();
            return Some(&after[1..]);
        }
        if !host.is_empty()
            && host.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
            && !pid.is_empty()
            && digits(pid) == pid.len()
            && rest.bytes().all(|c| c.is_ascii_digit() || c == b':')
            && after.starts_with(' ')
        {
            p.host = Some(host);
            p.pid = pid.parse().ok();
            return Some(&after[1..]);
        }
    }
    // A collector's or launcher's own tag, `[vllm]:`, `[worker-0]:`: a name, then `:`. Level tags
    // (`[INFO]:`, `[ERROR]:`) are the message's own and stay.
    if after.starts_with(':')
        && (2..=32).contains(&inner.len())
        && inner.starts_with(|c: char| c.is_ascii_alphabetic())
        && inner.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !LEVEL_TAGS.iter().any(|l| inner.eq_ignore_ascii_case(l))
    {
        return Some(&after[1..]);
    }
    // A pod's name alone, as `akash logs` writes it: `[webapp-64bcb5d547-fblkv] ` (Kubernetes
    // names a Deployment's pods `<name>-<hash>-<5 chars>`).
    if after.starts_with(' ') && is_pod_name(inner) {
        return Some(&after[1..]);
    }
    // kubectl logs --prefix: `[pod/<pod>/<container>] `.
    if inner.starts_with("pod/") && inner.matches('/').count() == 2 && after.starts_with(' ') {
        return Some(&after[1..]);
    }
    None
}

fn is_pod_name(s: &str) -> bool {
    let Some((front, suffix)) = s.rsplit_once('-') else { return false };
    s.len() <= 253
        && front.contains('-')
        && suffix.len() == 5
        && s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
}

const LEVEL_TAGS: [&str; 9] = ["info", "warning", "warn", "error", "debug", "critical", "fatal", "trace", "notice"];

/// Ray's worker prefix: `(RayWorkerWrapper pid=123, ip=10.0.0.1) `, `(pid=123) `,
/// `(Runner pid=9, ip=10.1.2.3, actor_id=...) `, `(raylet) `.
fn ray<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let close = head(s, 300).find(')')?;
    let inner = &s[1..close];
    let after = s[close + 1..].strip_prefix(' ')?;
    if inner == "raylet" || inner == "gcs_server" || inner == "autoscaler" {
        return Some(after);
    }
    let head_end = inner.find("pid=")?;
    let mut head = &inner[..head_end];
    // Nothing goes into `p` before the whole prefix is known to be one: a line that only looks
    // like it keeps no rank or host.
    let mut rank = None;
    // vLLM's multiprocess workers: `(VllmWorker rank=1 pid=2345) `; SkyPilot's Ray tasks, named
    // `<node>, rank=<n>,` (`(worker1, rank=1, pid=16369, ip=10.164.0.58) `).
    if let Some(i) = head.find(" rank=") {
        let n = head[i + 6..].trim_end().trim_end_matches(',');
        if n.is_empty() || digits(n) != n.len() {
            return None;
        }
        rank = n.parse().ok();
        head = &head[..i + 1];
    }
    // The actor or task name before `pid=` is one word (e.g. `RayWorkerWrapper`, `_MapWorker`).
    if !(head.is_empty() || (head.ends_with(' ') && !head.trim_end().contains(' '))) {
        return None;
    }
    let (mut pid, mut host) = (None, None);
    for kv in inner[head_end..].split(", ") {
        match kv.split_once('=') {
            Some(("pid", v)) => pid = Some(v.parse().ok()?),
            Some(("ip", v)) => host = Some(v),
            Some((k, _)) if k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') => {}
            _ => return None,
        }
    }
    p.pid = pid;
    p.host = host.or(p.host);
    if rank.is_some() {
        p.rank = rank;
    }
    Some(after)
}

/// A benchmark runner's tag and pipe, milabench's `resnet50.D0 [stderr] ` (its TerminalFormatter).
fn tag_pipe(s: &str) -> Option<&str> {
    let sp = head(s, 80).find(' ')?;
    let tag = &s[..sp];
    if !tag.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_')) || !tag.contains('.') {
        return None;
    }
    let t = &s[sp + 1..];
    let rest = t.strip_prefix("[stderr]").or_else(|| t.strip_prefix("[stdout]"))?;
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.strip_prefix(' ').unwrap_or(rest))
}

/// Determined's per-container tag: eight hex digits and ` || ` (`fa88a9df || `).
fn container_id(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    (b.len() > 12 && b[..8].iter().all(u8::is_ascii_hexdigit) && &b[8..12] == b" || ").then(|| &s[12..])
}

/// `srun --label`: the task id, a colon and a space (` 3: `, `12: `).
fn srun_label<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let n = digits(s);
    if n == 0 || n > 5 {
        return None;
    }
    let rest = s[n..].strip_prefix(": ")?;
    // `12: 34` is more likely a time or a count than a label followed by a number.
    if rest.is_empty() {
        return None;
    }
    p.rank = s[..n].parse().ok();
    Some(rest)
}

/// ISO-8601 (`2024-05-01T12:00:00.123Z `, `2024-05-01 12:00:00,123 `, offsets too) at the start of
/// a line, as Docker, Kubernetes, journald exports and Python's logging write them. NCCL's own
/// bracketed stamp is left to the NCCL parser.
fn iso_ts<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b' ') || b[13] != b':' {
        return None;
    }
    let date = &s[..10];
    let mut end =
        11 + s[11..].find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.' || c == ',')).unwrap_or(s.len() - 11);
    let time = &s[11..end];
    let rest = &s[end..];
    let tz = rest
        .strip_prefix('Z')
        .map(|_| 1)
        .or_else(|| {
            let t = rest.strip_prefix(['+', '-'])?;
            let n = t.bytes().take_while(|c| c.is_ascii_digit() || *c == b':').count();
            (n >= 2).then_some(n + 1)
        })
        .unwrap_or(0);
    end += tz;
    let after = &s[end..];
    // Python logging separates with ` - ` or a space; anything else glued on is not a prefix.
    if !(after.starts_with(' ') || after.starts_with('\t') || after.starts_with(" - ")) {
        return None;
    }
    p.ts = super::record::date_time_secs(date, &time.replace(',', "."));
    p.ts?;
    let rest = after.trim_start_matches([' ', '\t']);
    Some(after.strip_prefix(" - ").and_then(|f| logging_fields(f, p)).unwrap_or(rest))
}

/// Python logging's fields after its stamp, `%(name)s - %(levelname)s - ` or `%(levelname)s - `
/// (torchtitan's `root - WARNING - `, a basicConfig of `%(asctime)s - %(name)s - %(levelname)s - `):
/// the level is the message's own, kept in `p.level`.
fn logging_fields<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    // `logging.warn` and `logging.fatal` are aliases; their records print WARN/FATAL where a
    // formatter or handler renamed the levels.
    let level = |w: &str| {
        python_level(w).or(match w {
            "WARN" => Some(Level::Warn),
            "FATAL" => Some(Level::Error),
            _ => None,
        })
    };
    let (first, rest) = s.split_once(" - ")?;
    let (lvl, msg) = match level(first) {
        Some(l) => (l, rest),
        None => {
            // A logger name: dotted words, no blank.
            let name = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-');
            if first.is_empty() || !first.bytes().all(name) {
                return None;
            }
            let (word, msg) = rest.split_once(" - ")?;
            (level(word)?, msg)
        }
    };
    p.level = Some(lvl);
    Some(msg)
}

/// The level in the fields after the stamp of torch's own log handler, `[%(asctime)s] %(name)s:
/// [%(levelname)s] %(message)s` (`DEFAULT_FORMATTER` of torch/_logging/_internal.py, torch 2.1;
/// torchrun prints `[2024-01-15 23:37:46,764] torch.distributed.run: [WARNING] ...` with it).
fn torch_logging_level(s: &str) -> Option<Level> {
    let (name, t) = s.split_once(": [")?;
    let name_ok = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_');
    if name.is_empty() || name.len() > 128 || !name.bytes().all(name_ok) {
        return None;
    }
    let (word, _) = t.split_once(']')?;
    python_level(word)
}

/// Python logging's `%(levelname)s` as a level.
fn python_level(word: &str) -> Option<Level> {
    match word {
        "DEBUG" => Some(Level::Trace),
        "INFO" => Some(Level::Info),
        "WARNING" => Some(Level::Warn),
        "ERROR" | "CRITICAL" => Some(Level::Error),
        _ => None,
    }
}

/// NeMo's logger head, `[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d]` (its debug
/// formatter adds ` rank:%(rank)s`; nemo/utils/formatters/base.py): the level letter is the
/// message's own. Its module is NeMo's logging wrapper for nearly every line (`nemo_logging:349`),
/// so no site is kept: it says nothing of where the message comes from.
fn nemo_head<'a>(inner: &str, after: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let t = inner.strip_prefix("NeMo ")?;
    let level = match t.as_bytes().first()? {
        b'D' => Level::Trace,
        b'I' => Level::Info,
        b'W' => Level::Warn,
        b'E' | b'C' => Level::Error,
        _ => return None,
    };
    let t = t.get(1..)?.strip_prefix(' ')?;
    let (date, time) = (t.get(..10)?, t.get(11..19)?);
    let mut f = t.get(19..)?.strip_prefix(' ')?.split(' ');
    source_file(f.next()?)?;
    let rank = match f.next() {
        Some(r) => Some(r.strip_prefix("rank:")?.parse::<u32>().ok()?),
        None => None,
    };
    if f.next().is_some() || !(after.is_empty() || after.starts_with(' ')) {
        return None;
    }
    let ts = super::record::date_time_secs(date, time)?;
    p.ts = Some(ts);
    p.level = Some(level);
    p.rank = rank.or(p.rank);
    Some(after.strip_prefix(' ').unwrap_or(after))
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// syslog: `May  1 12:00:00 host prog[123]: `.
fn syslog<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let month = MONTHS.iter().position(|m| s.starts_with(m))? as u32 + 1;
    let t = s[3..].strip_prefix(' ')?;
    let t = t.strip_prefix(' ').unwrap_or(t);
    let dn = digits(t);
    if dn == 0 || dn > 2 {
        return None;
    }
    let day: u32 = t[..dn].parse().ok()?;
    let t = t[dn..].strip_prefix(' ')?;
    let (time, t) = t.split_once(' ')?;
    if time.len() < 8 || time.as_bytes()[2] != b':' {
        return None;
    }
    let (host, t) = t.split_once(' ')?;
    let colon = head(t, 80).find(": ")?;
    let prog = &t[..colon];
    if prog.contains(' ') {
        return None;
    }
    if let Some(open) = prog.find('[') {
        p.pid = prog[open + 1..].strip_suffix(']').and_then(|n| n.parse().ok());
    }
    p.host = Some(host);
    p.ts = super::record::month_day_secs(month, day, time);
    Some(&t[colon + 2..])
}

/// docker compose: `trainer-1  | ` (v2) or `trainer_1  | ` (v1).
fn compose(s: &str) -> Option<&str> {
    // The name runs up to the first byte outside it, which must be the whitespace before ` | `:
    // an NCCL head (`host:pid:tid`) is turned away here, before any search.
    match s.as_bytes().get(name_len(s)) {
        Some(&c) if c.is_ascii() && c != b' ' && !(b'\t'..=b'\r').contains(&c) => return None,
        None => return None,
        _ => {}
    }
    let bar = head(s, 80).find(" | ").or_else(|| head(s, 80).find(" |\t"))?;
    let name = s[..bar].trim_end();
    let (base, n) = name.rsplit_once(['-', '_'])?;
    if base.is_empty() || n.is_empty() || digits(n) != n.len() {
        return None;
    }
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')) {
        return None;
    }
    Some(&s[bar + 3..])
}

/// vLLM's logger head, `%(levelname)s %(asctime)s %(filename)s:%(lineno)d] ` with the date as
/// `%m-%d %H:%M:%S` (vllm/logger.py; releases since 0.7 bracket the file: `[%(fileinfo)s:%(lineno)d]`).
/// The level is the message's own, kept in `p.level`.
fn logger_head<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let (word, rest) = s.split_once(' ')?;
    let level = python_level(word)?;
    let b = rest.as_bytes();
    let date_ok = b.len() > 15
        && b[2] == b'-'
        && b[5] == b' '
        && b[8] == b':'
        && b[11] == b':'
        && b[14] == b' '
        && [0, 1, 3, 4, 6, 7, 9, 10, 12, 13].iter().all(|&i| b[i].is_ascii_digit());
    if !date_ok {
        return None;
    }
    let site = &rest[15..];
    let bracketed = site.starts_with('[');
    let site = if bracketed { &site[1..] } else { site };
    let close = head(site, 200).find(']')?;
    let file = source_file(&site[..close])?;
    let after = &site[close + 1..];
    if !(after.is_empty() || after.starts_with(' ')) {
        return None;
    }
    let mut mmdd = rest[..5].split('-').map(|x| x.parse::<u32>().unwrap_or(0));
    let (m, d) = (mmdd.next().unwrap_or(0), mmdd.next().unwrap_or(0));
    p.ts = super::record::month_day_secs(m, d, &rest[6..14]).or(p.ts);
    p.level = Some(level);
    p.head_repeats = true;
    p.site = Some(file);
    Some(after)
}

/// Ray's C++ log head, `[%Y-%m-%d %H:%M:%S,%e %L %P %t] ` then `file.cc:N: ` (src/ray/util/logging.cc,
/// its text pattern since Ray 1.0): `%L` is the level's letter, kept in `p.level` as vLLM's is.
fn ray_core_head<'a>(inner: &str, after: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    let mut f = inner.get(24..)?.split(' ');
    let (letter, pid, tid) = (f.next()?, f.next()?, f.next()?);
    let level = match letter {
        "T" | "D" => Level::Trace,
        "I" => Level::Info,
        "W" => Level::Warn,
        "E" | "C" => Level::Error,
        _ => return None,
    };
    if f.next().is_some()
        || inner.as_bytes()[23] != b' '
        || [pid, tid].iter().any(|n| n.is_empty() || digits(n) != n.len())
    {
        return None;
    }
    let ts = super::record::date_time_secs(inner.get(..10)?, &inner.get(11..23)?.replace(',', "."))?;
    let msg = after.strip_prefix(' ')?;
    // The source site RAY_LOG writes first: `core_worker.cc:2673: `.
    let (site, rest) = match msg.split_once(": ").and_then(|(f, rest)| Some((source_file(f)?, rest))) {
        Some((f, rest)) => (Some(f), rest),
        None => (None, msg),
    };
    p.ts = Some(ts);
    p.pid = pid.parse().ok().or(p.pid);
    p.level = Some(level);
    p.head_repeats = true;
    p.site = site;
    Some(rest)
}

/// The file of a logger's `file:line` site (`custom_all_reduce.py:137`), if `s` is one.
fn source_file(s: &str) -> Option<&str> {
    let (file, line) = s.rsplit_once(':')?;
    let ok = !file.is_empty() && !file.contains(' ') && !line.is_empty() && digits(line) == line.len();
    ok.then_some(file)
}

/// Words in the file names of vLLM's and SGLang's distributed, executor and worker modules
/// (vllm/distributed/**, vllm/executor/*, vllm/v1/executor/*, vllm/worker/*): a logger warning
/// from any other module (model configs, tokenizers, the API server) is not this tool's subject.
const DISTRIBUTED_SITES: [&str; 14] = [
    "nccl",
    "reduce",
    "communicator",
    "parallel",
    "shm_broadcast",
    "ray",
    "multiproc",
    "executor",
    "worker",
    "distributed",
    "all2all",
    "deepep",
    "kv_transfer",
    "cuda_wrapper",
];

impl Prefixed<'_> {
    /// A logger head's `WARNING` from a module whose file name says nothing of distributed work (a
    /// model config, a tokenizer, Ray's metrics exporter): counted apart.
    pub fn unrelated_warning(&self) -> bool {
        self.level == Some(Level::Warn)
            && self.site.is_some_and(|f| {
                let f = f.to_ascii_lowercase();
                !DISTRIBUTED_SITES.iter().any(|w| f.contains(w))
            })
    }
}

/// pdsh / deepspeed's multi-node launcher: `host: ` in front of a line that itself starts with a
/// prefix or an NCCL head. Alone, `word: ` is far more often a message (`RuntimeError: ...`).
fn pdsh<'a>(s: &'a str, p: &mut Prefixed<'a>) -> Option<&'a str> {
    // The host is a name, then `: ` within the first 64 bytes.
    let colon = name_len(s);
    if colon + 2 > 64 || !s[colon..].starts_with(": ") {
        return None;
    }
    let host = &s[..colon];
    // An exception name is not a host.
    if host.ends_with("Error") || host.ends_with("Exception") || host.ends_with("Warning") {
        return None;
    }
    let rest = &s[colon + 2..];
    let mut probe = Prefixed::default();
    let nested = one(rest, &mut probe).is_some();
    let nccl_head = rest.split_once(' ').is_some_and(|(h, _)| h.matches(':').count() == 2 && h.starts_with(host));
    if !(nested || nccl_head) {
        return None;
    }
    p.host = Some(host);
    Some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest(l: &str) -> &str {
        strip_prefixes(l).rest
    }

    #[test]
    fn torchrun_and_mpirun() {
        let p = strip_prefixes("[rank1]: Cuda failure 'out of memory'");
        assert_eq!((p.rank, p.rest), (Some(1), "Cuda failure 'out of memory'"));
        let p = strip_prefixes("[default2]:[rank6]:[W x.cpp:1] m");
        assert_eq!((p.rank, p.local_rank, p.rest), (Some(6), Some(2), "[W x.cpp:1] m"));
        assert_eq!(strip_prefixes("[1,5]<stdout>:hello").rank, Some(5));
        assert_eq!(rest("[1,5]<stderr>: hello"), "hello");
        assert_eq!(rest("[not a prefix] x"), "[not a prefix] x");
        assert_eq!(
            rest("[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1] x"),
            "[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1] x"
        );
        assert_eq!(
            rest("[2024-05-15 07:06:42] h:1:2 [0] a.cc:1 NCCL WARN y"),
            "[2024-05-15 07:06:42] h:1:2 [0] a.cc:1 NCCL WARN y"
        );
        // TorchServe's head around a DeepSpeed worker's line (pytorch/serve#2419).
        assert_eq!(
            rest("2023-06-21T23:15:00,279 [INFO ] W-29500-opt_1.0-stdout MODEL_LOG - [2023-06-21 23:15:00,279] [WARNING] [comm.py:152:init_deepspeed_backend] x"),
            "[WARNING] [comm.py:152:init_deepspeed_backend] x"
        );
        // DeepSpeed's stamp before a message that names NCCL (RWKV-LM-LoRA#34).
        assert_eq!(
            rest("[2023-06-26 15:45:51,688] [WARNING] [comm.py:152:init_deepspeed_backend] NCCL backend in DeepSpeed not yet implemented"),
            "[WARNING] [comm.py:152:init_deepspeed_backend] NCCL backend in DeepSpeed not yet implemented"
        );
    }

    #[test]
    fn framework_and_platform_prefixes() {
        let p = strip_prefixes(
            "[2025-01-02 10:11:12 DP0 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        );
        assert_eq!(p.rest, "Scheduler hit an exception: Traceback (most recent call last):");
        assert!(p.ts.is_some());
        assert_eq!(rest("[2025-01-02 10:11:12] Load weight end."), "Load weight end.");
        let p = strip_prefixes(
            "[2024-02-27T21:35:32.106313Z] fa88a9df || WARNING: torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers",
        );
        assert!(p.rest.starts_with("WARNING: torch.distributed"), "{}", p.rest);
        assert_eq!(strip_prefixes("[rank=3] x").rank, Some(3));
        let p = strip_prefixes("(VllmWorker rank=1 pid=2345) ERROR 05-12 10:11:12 [x.py:1] boom");
        assert_eq!((p.rank, p.pid), (Some(1), Some(2345)));
        // Not a prefix after all (a bad pid): the line keeps no rank.
        let p = strip_prefixes("(worker1, rank=1, pid=16369, ip=10.164.0.58) * PyTorch version: 2.1.2+cu121");
        assert_eq!(
            (p.rank, p.pid, p.host, p.rest),
            (Some(1), Some(16369), Some("10.164.0.58"), "* PyTorch version: 2.1.2+cu121")
        );
        let p = strip_prefixes("(VllmWorker rank=1 pid=x) boom");
        assert_eq!((p.rank, p.rest), (None, "(VllmWorker rank=1 pid=x) boom"));
        assert_eq!(rest("[not a date at all here] x"), "[not a date at all here] x");
        assert_eq!(rest("deadbeef is not a tag"), "deadbeef is not a tag");
        let p = strip_prefixes("llama.D0 [stderr] [rank0]:[E1117 10:00:00.1 ProcessGroupNCCL.cpp:1] x");
        assert_eq!((p.rank, p.rest), (Some(0), "[E1117 10:00:00.1 ProcessGroupNCCL.cpp:1] x"));
        assert_eq!(rest("see [stderr] for more"), "see [stderr] for more");
        // Akash's `akash logs` (its docs, usage/cli/logs.md): the pod, then kubectl's timestamp.
        let p = strip_prefixes("[webapp-64bcb5d547-fblkv] 2018-08-01T00:08:51.307976982Z NCCL WARN x");
        assert!(p.ts.is_some() && p.rest == "NCCL WARN x", "{:?}", p.rest);
        assert_eq!(rest("[see-the-docs] x"), "[see-the-docs] x");
    }

    #[test]
    fn srun_labels() {
        let p = strip_prefixes("12: [rank12]:[E ProcessGroupNCCL.cpp:1] boom");
        assert_eq!((p.rank, p.rest), (Some(12), "[E ProcessGroupNCCL.cpp:1] boom"));
        assert_eq!(strip_prefixes(" 3: gpu1:12:34 [0] NCCL WARN x").rank, Some(3));
        assert!(strip_prefixes("0:   File \"x.py\", line 3").indented);
        // Not labels.
        assert_eq!(rest("12:34:56 something"), "12:34:56 something");
        assert_eq!(strip_prefixes("123456: x").rank, None);
    }

    #[test]
    fn host_rank_and_host_pid_brackets() {
        let p = strip_prefixes("[gpu187:1]:torch.cuda.OutOfMemoryError: CUDA out of memory.");
        assert_eq!(
            (p.host, p.rank, p.rest),
            (Some("gpu187"), Some(1), "torch.cuda.OutOfMemoryError: CUDA out of memory.")
        );
        let p = strip_prefixes("[k8s-slave03:00956] *** Process received signal ***");
        assert_eq!(
            (p.host, p.pid, p.rank, p.rest),
            (Some("k8s-slave03"), Some(956), None, "*** Process received signal ***")
        );
    }

    #[test]
    fn a_line_counter_before_a_prefix() {
        let p = strip_prefixes("[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x");
        assert_eq!((p.rank, p.rest), (Some(0), "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x"));
        // zsh's job report keeps its `[1]`: rules read the pid after it.
        assert_eq!(rest("[1]    12345 killed     python train.py"), "[1]    12345 killed     python train.py");
    }

    #[test]
    fn named_tags() {
        let p = strip_prefixes("[vllm]:[rank1]: RuntimeError: x");
        assert_eq!((p.rank, p.rest), (Some(1), "RuntimeError: x"));
        assert_eq!(rest("[ERROR]: disk full"), "[ERROR]: disk full");
        assert_eq!(rest("[W1129 12:00:00.5 x.cpp:1] y"), "[W1129 12:00:00.5 x.cpp:1] y");
    }

    #[test]
    fn ray_prefixes() {
        let p = strip_prefixes("(RayWorkerWrapper pid=1234, ip=10.0.0.1) [rank1]: x");
        assert_eq!((p.pid, p.host, p.rank, p.rest), (Some(1234), Some("10.0.0.1"), Some(1), "x"));
        let p = strip_prefixes("(pid=77) NCCL WARN y");
        assert_eq!((p.pid, p.rest), (Some(77), "NCCL WARN y"));
        assert_eq!(strip_prefixes("(Runner pid=9) hello").pid, Some(9));
        assert_eq!(rest("(raylet) msg"), "msg");
        assert_eq!(rest("(see above) msg"), "(see above) msg");
    }

    #[test]
    fn compose_kubectl_tags() {
        assert_eq!(rest("trainer-1  | [rank0]: hi"), "hi");
        assert_eq!(strip_prefixes("trainer-1  | [rank0]: hi").rank, Some(0));
        assert_eq!(rest("[pod/train-0/pytorch] NCCL WARN x"), "NCCL WARN x");
        assert_eq!(rest("[stderr] RuntimeError: x"), "RuntimeError: x");
        assert_eq!(rest("a | b"), "a | b");
    }

    #[test]
    fn timestamps() {
        let p = strip_prefixes("2024-05-15T07:06:42.500Z [rank2]: x");
        assert_eq!((p.rank, p.rest), (Some(2), "x"));
        let nccl = super::super::parse("[2024-05-15 07:06:42] h:1:2 [0] a.cc:1 NCCL WARN y", None).ts.unwrap();
        assert!((p.ts.unwrap() - nccl - 0.5).abs() < 1e-6);
        assert!(strip_prefixes("2024-05-15 07:06:42,123 - root - WARNING - x").ts.is_some());
        // torch's own handler (torch/_logging), as torchrun 2.1 prints it, also behind Ray's prefix.
        for l in [
            "[2024-01-15 23:37:46,764] torch.distributed.run: [WARNING] master_addr is only used for static rdzv_backend",
            "(head, rank=0, pid=17266) [2024-01-15 23:37:46,769] torch.distributed.run: [WARNING] master_addr is only used",
        ] {
            let p = strip_prefixes(l);
            assert_eq!(p.level, Some(Level::Warn), "{l}");
            assert!(p.rest.starts_with("torch.distributed.run: [WARNING] master_addr is only used"), "{}", p.rest);
        }
        let p = strip_prefixes(
            "[2024-01-15 23:37:46,764] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)",
        );
        assert_eq!(p.level, Some(Level::Error));
        assert_eq!(
            strip_prefixes("[2024-07-15 22:49:55,968] torch.distributed.run: [WARNING] ").level,
            Some(Level::Warn)
        );
        // Not a logger name before the colon: the text stays as it is.
        let p = strip_prefixes("[2024-01-15 23:37:46,764] some text: [WARNING] x");
        assert_eq!((p.level, p.rest), (None, "some text: [WARNING] x"));
        let p = strip_prefixes("May  1 12:00:00 node7 python[4242]: NCCL WARN x");
        assert_eq!((p.host, p.pid, p.rest), (Some("node7"), Some(4242), "NCCL WARN x"));
        assert_eq!(rest("2024-05-15T07:06:42Z"), "2024-05-15T07:06:42Z");
    }

    #[test]
    fn pdsh_only_before_another_prefix() {
        let p = strip_prefixes("worker-1: [rank3]: Traceback (most recent call last):");
        assert_eq!((p.host, p.rank, p.rest), (Some("worker-1"), Some(3), "Traceback (most recent call last):"));
        assert_eq!(rest("RuntimeError: [rank3]: x"), "RuntimeError: [rank3]: x");
        assert_eq!(rest("note: x"), "note: x");
        assert_eq!(strip_prefixes("node1: node1:123:456 [0] NCCL WARN x").host, Some("node1"));
    }

    #[test]
    fn indentation_survives_as_a_flag() {
        let p = strip_prefixes("[rank0]:   File \"train.py\", line 88, in <module>");
        assert!(p.indented);
        assert_eq!(p.rest, "File \"train.py\", line 88, in <module>");
        let p = strip_prefixes("  File \"train.py\", line 88");
        assert!(p.indented);
        assert_eq!(p.rest, "File \"train.py\", line 88");
        assert!(!strip_prefixes("RuntimeError: x").indented);
    }

    #[test]
    fn logger_heads_keep_their_level_and_file() {
        // vLLM, bracketed (>= 0.7) and not; the same head on each line of a message.
        let p = strip_prefixes("WARNING 03-22 18:40:47 [custom_all_reduce.py:137] Custom allreduce is disabled");
        assert_eq!(
            (p.level, p.site, p.rest),
            (Some(Level::Warn), Some("custom_all_reduce.py"), "Custom allreduce is disabled")
        );
        assert!(!p.unrelated_warning());
        let p = strip_prefixes("(VllmWorker rank=1 pid=7) WARNING 03-22 18:40:47 config.py:9] max_model_len is large");
        assert_eq!((p.rank, p.level, p.rest), (Some(1), Some(Level::Warn), "max_model_len is large"));
        assert!(p.unrelated_warning());
        assert_eq!(strip_prefixes("WARNING 03-22 18:40:47 not a head").level, None);
        // Ray's C++ head: the level letter, the pid, the `file.cc:N: ` site.
        let p = strip_prefixes(
            "[2023-07-11 15:20:41,680 E 42067 42067] logging.cc:97: Unhandled exception: St13runtime_error.",
        );
        assert_eq!((p.level, p.pid, p.site), (Some(Level::Error), Some(42067), Some("logging.cc")));
        assert_eq!(p.rest, "Unhandled exception: St13runtime_error.");
        let p = strip_prefixes("[2023-07-11 15:20:15,496 W 42067 42248] metric_exporter.cc:209: [1] Export failed");
        assert!(p.unrelated_warning());
        assert_eq!(strip_prefixes("[2023-07-11 15:20:15,496 W x 1] a.cc:1: m").level, None);
        assert_eq!(strip_prefixes("[2023-07-11 15:20:15,4é6 W 1 1] a.cc:1: m").level, None);
    }

    #[test]
    fn nemo_and_python_logging_heads_keep_their_level() {
        // NeMo: the level letter, the stamp, its logging wrapper's module (no site kept), the
        // debug formatter's rank; a head written once per message.
        let p = strip_prefixes("[NeMo W 2025-06-13 03:48:23 nemo_logging:405] Could not copy Trainer's 'max_steps'");
        assert_eq!((p.level, p.site, p.rest), (Some(Level::Warn), None, "Could not copy Trainer's 'max_steps'"));
        assert!(p.ts.is_some() && !p.head_repeats && !p.unrelated_warning());
        let p = strip_prefixes("[NeMo I 2025-06-13 03:48:23 nemo_logging:393 rank:3] Using a strategy");
        assert_eq!((p.level, p.rank, p.rest), (Some(Level::Info), Some(3), "Using a strategy"));
        assert_eq!(strip_prefixes("[NeMo X 2025-06-13 03:48:23 nemo_logging:405] m").level, None);
        assert_eq!(strip_prefixes("[NeMo W 2025-06-13 03:48:23 nemo logging] m").level, None);
        // torchtitan: `[titan] `, then Python logging's stamp, logger name and level.
        let p = strip_prefixes(
            "[rank0]:[titan] 2025-03-12 11:10:21,603 - root - WARNING - Dataset c4_test is being re-looped",
        );
        assert_eq!((p.rank, p.level, p.rest), (Some(0), Some(Level::Warn), "Dataset c4_test is being re-looped"));
        assert!(p.ts.is_some() && !p.head_repeats);
        let p =
            strip_prefixes("[titan] 2026-09-11 23:05:43,256 - torchtitan.distributed.parallel_dims - INFO - Building");
        assert_eq!((p.level, p.rest), (Some(Level::Info), "Building"));
        // A basicConfig without the logger's name; a stamp with no level after it keeps its text.
        assert_eq!(strip_prefixes("2024-05-15 07:06:42,123 - ERROR - boom").level, Some(Level::Error));
        let p = strip_prefixes("2024-05-15 07:06:42,123 - a note - with dashes");
        assert_eq!((p.level, p.rest), (None, "- a note - with dashes"));
        assert_eq!(rest("[titan] not a stamp"), "[titan] not a stamp");
        // vLLM's head repeats on each line of a message.
        assert!(strip_prefixes("WARNING 03-22 18:40:47 [custom_all_reduce.py:137] x").head_repeats);
    }
}
