//! One log line turned into a record: level, origin (host:pid:tid, device, file:line), rank, time.
//!
//! The level is read cheaply for every line; the full parse runs only for lines that matter
//! (rule hits, warnings and errors), which keeps `explain` fast on INFO floods.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None,
    Trace,
    Info,
    /// NCCL 2.32's `ATTN`, between INFO and WARN (teardown chatter such as `Accept failed`
    /// moved there). Reported when no rule explains it, like a warning.
    Attn,
    Warn,
    Error,
}

impl Level {
    /// The word NCCL prints for this level (`WARN`, `ATTN`, `INFO`, ...).
    pub fn nccl_name(self) -> &'static str {
        match self {
            Level::None => "",
            Level::Trace => "TRACE",
            Level::Info => "INFO",
            Level::Attn => "ATTN",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// What produced the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nccl,
    Torch,
    Python,
    Harness,
    Worker,
    /// A launcher's own line (torchrun's elastic agent), not a rank's.
    Launcher,
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    pub kind: Kind,
    pub level: Level,
    pub rank: Option<u32>,
    pub host: Option<&'a str>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub dev: Option<u32>,
    /// `file:line` of the emitting source (NCCL WARN/TRACE/INFO unwinding, c10 logging).
    pub site: Option<(&'a str, u32)>,
    /// Seconds since the start of the year (years are not compared: NCCL and c10 differ there).
    pub ts: Option<f64>,
    /// The message after all prefixes.
    pub msg: &'a str,
}

/// Substrings of which every line that `level_of` rates `Warn` or `Error` holds at least one,
/// unless `positional_warn` holds for it. `explain` skips the lines that hold none of these and no
/// rule literal without looking at them further, so a new case in `level_of` needs its literal
/// here (the test `warn_literals_cover_level_of` checks it).
pub const WARN_LITERALS: &[&str] = &[
    " NCCL WARN",
    // `TAG: error: ...` (`tagged_level`; `Warning:` and `Error` are below).
    ": error: ",
    " NCCL ATTN",
    "[epdoctor-harness] ",
    "Error",
    "Exception",
    "KeyboardInterrupt",
    "SystemExit",
    "terminate called after throwing",
    "Segmentation fault",
    "Bus error",
    "Fatal Python error",
    "Aborted (core dumped)",
    "ERROR:",
    "CRITICAL:",
    "FATAL:",
    "[ERROR]",
    "WARNING:",
    "[WARNING]",
    "WARN:",
    "Warning: ",
    " - ERROR - ",
    " - CRITICAL - ",
    " - WARNING - ",
    ": non-zero status: ",
    "NVSHMEM ERROR",
    " ERROR: ",
    "NVRM: Xid",
    "Out of memory: Killed process",
    // A logger's level token in the line's head (`head_level`), and a Python warning category.
    "WARN",
    "ERROR",
    "CRITICAL",
    "FATAL",
    "Warning:",
];

/// Whether `line` (rank prefix stripped) starts with a warning by position, the ways to `Warn` in
/// `level_of` that no literal of `WARN_LITERALS` covers: a c10/glog severity, NCCL 2.0-2.2's head,
/// a `NCCL WARN` whose head the paste dropped.
pub fn positional_warn(line: &str) -> bool {
    let b = line.as_bytes();
    c10_level(b).is_some_and(|l| l >= Level::Warn)
        // Its `WARN ` follows a space: most lines lack one, and the head's parse costs more.
        || (find(b, b" WARN ").is_some() && old_nccl_level(b) == Some(Level::Warn))
        || b.starts_with(b"NCCL WARN ")
        || b.starts_with(b"NCCL ATTN ")
}

/// NCCL 2.0-2.2 printed its head without the word `NCCL`: `host:pid:tid [dev] INFO msg` and
/// `host:pid:tid [dev] file:line WARN msg` (their logs show it; those releases' source is not public).
fn old_nccl_level(b: &[u8]) -> Option<Level> {
    let open = find(&b[..b.len().min(160)], b" [")?;
    let mut hpt = b[..open].rsplitn(3, |&c| c == b':');
    let (tid, pid, host) = (hpt.next()?, hpt.next()?, hpt.next()?);
    let number = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if host.is_empty() || host.contains(&b' ') || !number(tid) || !number(pid) {
        return None;
    }
    let rest = &b[open + 2..];
    let close = rest.iter().position(|&c| c == b']')?;
    if !number(&rest[..close]) {
        return None;
    }
    let mut msg = rest[close + 1..].strip_prefix(b" ")?;
    if msg.starts_with(b"INFO ") {
        return Some(Level::Info);
    }
    if let Some(sp) = msg.iter().position(|&c| c == b' ') {
        if msg[..sp].contains(&b':') {
            msg = &msg[sp + 1..];
        }
    }
    msg.starts_with(b"WARN ").then_some(Level::Warn)
}

/// The level of a line, cheaply (no full parse). `line` has its rank prefix stripped.
/// Keep `WARN_LITERALS` in step with what makes a line `Warn` or `Error` here.
pub fn level_of(line: &str) -> Level {
    let b = line.as_bytes();
    // A paste that dropped NCCL's `host:pid:tid [dev]` head starts with the level word's `NCCL `.
    let at = if b.starts_with(b"NCCL ") { Some(5) } else { find(b, b" NCCL ").map(|i| i + 6) };
    if let Some(j) = at {
        let tail = &b[j..];
        if tail.starts_with(b"WARN") {
            return Level::Warn;
        }
        if tail.starts_with(b"INFO") {
            return Level::Info;
        }
        if tail.starts_with(b"ATTN") {
            return Level::Attn;
        }
        if tail.starts_with(b"TRACE") || tail.starts_with(b"CALL") {
            return Level::Trace;
        }
    }
    if let Some(l) = c10_level(b).or_else(|| old_nccl_level(b)) {
        return l;
    }
    if b.starts_with(b"[epdoctor-harness] ") {
        return harness_level(line);
    }
    let t = line.trim_start();
    if is_exception_line(t) {
        return Level::Error;
    }
    // A Python warning's category line at any indentation (a wrapped or indented paste).
    if is_warning_line(t) {
        return Level::Warn;
    }
    const ERR_STARTS: [&str; 9] = [
        "terminate called after throwing",
        "Segmentation fault",
        "Bus error",
        "Fatal Python error",
        "Aborted (core dumped)",
        "ERROR:",
        "CRITICAL:",
        "FATAL:",
        "[ERROR]",
    ];
    if ERR_STARTS.iter().any(|p| t.starts_with(p)) {
        return Level::Error;
    }
    if t.starts_with("WARNING:") || t.starts_with("[WARNING]") || t.starts_with("WARN:") {
        return Level::Warn;
    }
    // Python `warnings`: "/path/file.py:12: UserWarning: ..."
    if t.contains("Warning: ") && (t.contains(".py:") || t.starts_with("Warning: ")) {
        return Level::Warn;
    }
    // A program's tag, then its level word: `libibverbs: Warning: couldn't load driver ...`,
    // `srun: error: ...`.
    if let Some(l) = tagged_level(t) {
        return l;
    }
    // Python logging with a logger: "WARNING:torch.distributed...", " - WARNING - ".
    if t.contains(" - ERROR - ") || t.contains(" - CRITICAL - ") {
        return Level::Error;
    }
    if t.contains(" - WARNING - ") {
        return Level::Warn;
    }
    // NVSHMEM's error macro: "/path/file.cu:123: non-zero status: 7 ..."
    if t.contains(": non-zero status: ") || t.contains("NVSHMEM ERROR") || t.contains(" ERROR: ") {
        return Level::Error;
    }
    // Kernel log lines quoted from dmesg.
    if t.contains("NVRM: Xid") || t.contains("Out of memory: Killed process") {
        return Level::Error;
    }
    head_level(t).unwrap_or(Level::None)
}

/// The level of `TAG: Warning: ...` / `TAG: error: ...`, where TAG is one word (a program's name,
/// a `path:line`): the tag is no prose, so the word after it is the line's level.
fn tagged_level(t: &str) -> Option<Level> {
    let (tag, rest) = t.split_once(": ")?;
    if tag.is_empty() || tag.len() > HEAD || tag.contains(char::is_whitespace) {
        return None;
    }
    let word = rest.split_once(": ").map(|(w, _)| w)?;
    match word {
        "Warning" | "WARNING" => Some(Level::Warn),
        "Error" | "error" | "ERROR" => Some(Level::Error),
        _ => None,
    }
}

/// Bytes of a line's start where a logger writes its level (after a date, a time, a thread or
/// process name): a level word further on is prose, not the line's level.
const HEAD: usize = 64;

/// The level a logger's level word in the line's head gives it, whatever the logger's format:
/// loguru's `2025-12-07 10:00:00.123 | WARNING  | mod:fn:12 - msg`, Python logging's
/// `%(asctime)s %(levelname)s %(name)s: %(message)s`, log4j's `[time] WARN  [thread] msg`. The head
/// is what comes before the first word of prose (a lowercase letter outside brackets): a level word
/// after one is text (`set by environment to WARN`). The word stands alone and a message follows
/// it: not part of a name or a setting (`NCCL_DEBUG=WARN`, `ERROR_CODE`).
fn head_level(t: &str) -> Option<Level> {
    let b = t.as_bytes();
    let head = &b[..b.len().min(HEAD)];
    let before_ok = |i: usize| i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'|' | b'[' | b'(' | b'<');
    // ... and a message follows it (`NCCL_DEBUG: WARN` with trailing blanks is a setting's value).
    let after_ok = |j: usize| {
        j < b.len()
            && matches!(b[j], b' ' | b'\t' | b'|' | b']' | b')' | b'>' | b':')
            && b[j..].iter().any(|c| c.is_ascii_alphanumeric())
    };
    let (mut i, mut depth) = (0, 0u32);
    while i < head.len() {
        match head[i] {
            b'[' | b'(' | b'<' => depth += 1,
            b']' | b')' | b'>' => depth = depth.saturating_sub(1),
            c if c.is_ascii_lowercase() && depth == 0 => return None,
            _ => {}
        }
        if !head[i].is_ascii_uppercase() || (i > 0 && head[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let end = i + b[i..].iter().take_while(|c| c.is_ascii_uppercase()).count();
        let level = match &b[i..end] {
            b"WARN" | b"WARNING" => Some(Level::Warn),
            b"ERROR" | b"CRITICAL" | b"FATAL" => Some(Level::Error),
            _ => None,
        };
        if let Some(l) = level.filter(|_| before_ok(i) && after_ok(end)) {
            return Some(l);
        }
        i = end.max(i + 1);
    }
    None
}

/// One setting and its value, as option dumps print them (`NCCL_DEBUG: WARN`, ProcessGroupNCCL's
/// `initialized with following options:` block, `TORCH_CPP_LOG_LEVEL=ERROR`): an upper-case name, `:`
/// or `=`, one word. A level word there is a value, not a level.
fn is_setting(t: &str) -> bool {
    let t = t.trim();
    let Some(i) = t.find([':', '=']) else { return false };
    let (name, value) = (t[..i].trim_end(), t[i + 1..].trim());
    name.len() >= 3
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.bytes().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || matches!(c, b'_' | b'(' | b')'))
        && name.contains('_')
        && !value.is_empty()
        && !value.contains(char::is_whitespace)
}

/// `UserWarning: ...`, `torch.distributed.SomeWarning: ...` at the line's start: the category line
/// of a Python warning whose `path:line:` head went on the line before (or was not pasted).
pub(crate) fn is_warning_line(t: &str) -> bool {
    let (last, rest) = python_class(t);
    last.len() > "Warning".len() && last.ends_with("Warning") && rest.starts_with(':')
}

/// The last part of the dotted Python class name `t` starts with (`DistBackendError` of
/// `torch.distributed.DistBackendError: ...`) when it is capitalised, else "", and what follows.
fn python_class(t: &str) -> (&str, &str) {
    let name_end = t.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(t.len());
    let last = t[..name_end].rsplit('.').next().unwrap_or("");
    (if last.starts_with(|c: char| c.is_ascii_uppercase()) { last } else { "" }, &t[name_end..])
}

fn harness_level(line: &str) -> Level {
    // Everything the harness reports is a failure except a clean exit, a phase note and leftovers.
    if line.contains(" exit=0") && !line.contains("deadline") || line.contains(" last phase=") {
        Level::Info
    } else if line.contains(" leftover ") {
        Level::Warn
    } else {
        Level::Error
    }
}

/// `SomeError: ...`, `torch.distributed.DistBackendError: ...`, `KeyboardInterrupt` at line start.
pub(crate) fn is_exception_line(t: &str) -> bool {
    let (last, rest) = python_class(t);
    let is_exc =
        last.ends_with("Error") || last.ends_with("Exception") || last == "KeyboardInterrupt" || last == "SystemExit";
    is_exc && (rest.is_empty() || rest.starts_with(':'))
}

/// Literals of which every line `looks_like_error` accepts holds one (for the prefilter).
pub const ERROR_LIKE_LITERALS: &[&str] = &[
    "error",
    "ERROR",
    "failed",
    "Failed",
    "FAILED",
    "failure",
    "Failure",
    "fatal",
    "Fatal",
    "FATAL",
    "FAILURE",
    "aborted",
    "Aborted",
    "aborting",
    "egmentation",
    "killed",
    "Killed",
    "KILLED",
    "terminated",
    "Terminated",
    "Traceback",
    "SIGSEGV",
    "SIGABRT",
    "SIGBUS",
    "SIGKILL",
    "xception",
    "xit code",
    "xit status",
    "xited with",
    "exitcode",
    "non-zero exit",
    "nonzero exit",
];

/// Whether an unlevelled line reads like a failure (error, failed, fatal, abort, a signal, a
/// segmentation fault, killed, a non-zero exit, a traceback, terminate). Words inside identifiers
/// and metric names (`error_rate`, `mean_abs_error`) and zero counts (`0 errors`) do not count.
pub fn looks_like_error(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    // The frames of a C++ exception's message, which follow the line that named it.
    let t = line.trim_start();
    // `Last error:` alone heads the payload line below it (the record reads that one).
    if t.starts_with("Exception raised from")
        || t.starts_with("frame #")
        || t.trim_end() == "Last error:"
        || is_heading_or_header(t)
        || is_setting(t)
    {
        return false;
    }
    let words = [
        "error",
        "errors",
        "failed",
        "failure",
        "fatal",
        "aborted",
        "aborting",
        "segmentation",
        "killed",
        "terminated",
        "traceback",
        "sigsegv",
        "sigabrt",
        "sigbus",
        "sigkill",
        "exception",
    ];
    let b = l.as_bytes();
    let mut hit = false;
    for w in words {
        let mut from = 0;
        while let Some(i) = l[from..].find(w) {
            let s = from + i;
            let e = s + w.len();
            from = e;
            let before = s.checked_sub(1).map(|j| b[j]);
            let after = b.get(e).copied();
            let ident = |c: Option<u8>| {
                c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.' || c == b'/')
            };
            // Part of a name (`error_rate`), or a setting's value (`mode=abort`).
            if ident(before) || ident(after) || before == Some(b'=') {
                continue;
            }
            // "0 errors", "no error", "errors: 0", "without error", "This is not an error".
            let head = l[..s].trim_end();
            let tail = l[e..].trim_start_matches([':', '=', ' ']);
            if head.ends_with(" 0")
                || head == "0"
                || head.ends_with("no")
                || head.ends_with("without")
                || head.ends_with(" not an")
                || head.ends_with(" isn't an")
                || head.ends_with("if")
                || tail.starts_with('0') && !tail[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == 'x')
            {
                continue;
            }
            hit = true;
            break;
        }
        if hit {
            return true;
        }
    }
    // "exit code 3", "exit status 1", "exited with code 137", "non-zero exit".
    if let Some(i) = l.find("exit") {
        let rest = &l[i..];
        if rest.contains("non-zero") || l.contains("non-zero exit") || l.contains("nonzero exit") {
            return true;
        }
        let num = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == ' ' || c == ':' || c == '=');
        if num.starts_with(|c: char| c.is_ascii_digit() && c != '0') || num.starts_with("-") {
            return rest.starts_with("exit code")
                || rest.starts_with("exit status")
                || rest.starts_with("exited with")
                || rest.starts_with("exitcode");
        }
    }
    false
}

/// A section heading (`Errors` over its `======`) or a table's header row, where `error` is a
/// column's title (nccl-tests' `... busbw  error`, NCCL RAS's `Status  Errors`): at least four
/// cells apart by two or more spaces (padded: two gaps of three at least), none with a digit, a
/// colon or more than 24 characters.
fn is_heading_or_header(t: &str) -> bool {
    let t = t.trim_end();
    if matches!(t, "Errors" | "Failures" | "ERRORS" | "FAILURES") {
        return true;
    }
    let cells: Vec<&str> = t.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    // Padding to a column's width, twice at least (prose has single spaces, a typo two).
    t.matches("   ").count() >= 2
        && cells.len() >= 4
        && cells.iter().all(|c| {
            c.len() <= 24
                && c.bytes().all(|b| b.is_ascii_alphabetic() || b" #()/%_-.".contains(&b))
                && !c.ends_with('.')
        })
}

/// A Python warning (`/path/mod.py:12: FutureWarning: ...`) from a module outside
/// torch.distributed, NCCL, NVSHMEM and DeepEP: counted apart, never `unknown`.
pub fn is_unrelated_warning(line: &str) -> bool {
    let Some(i) = line.find(".py:") else { return false };
    let path = &line[..i];
    let rest = &line[i + 4..];
    let n = rest.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 {
        return false;
    }
    let rest = &rest[n..];
    let Some(rest) = rest.strip_prefix(": ") else { return false };
    let cat_end = rest.find(": ").unwrap_or(0);
    let cat = &rest[..cat_end];
    if !(cat.ends_with("Warning") && cat.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')) {
        return false;
    }
    let related =
        ["torch/distributed", "torch\\distributed", "deep_ep", "deepep", "nvshmem", "nccl", "torch/cuda/nccl"];
    let p = path.to_ascii_lowercase();
    !related.iter().any(|r| p.contains(r))
}

/// A glog/absl/c10 head of severity F (FATAL): the process aborts right after the message (glog
/// src/logging.cc and absl/log/internal/log_format.cc write `Lmmdd hh:mm:ss.uuuuuu tid file:line] `).
/// Read here rather than as an outcome pattern, which would have no literal for the prefilter.
pub fn is_fatal_head(line: &str) -> bool {
    c10_severity(line.as_bytes()) == Some(b'F')
}

/// c10 / glog severity: `[W1129 13:54:38.758 file:line]`, `[W file:line]`, `W1129 13:54:38.758 123 file:line]`.
fn c10_level(b: &[u8]) -> Option<Level> {
    match c10_severity(b)? {
        b'I' => Some(Level::Info),
        b'W' => Some(Level::Warn),
        _ => Some(Level::Error),
    }
}

/// The severity letter (I, W, E, F) of a c10/glog head, the one reading of that head.
fn c10_severity(b: &[u8]) -> Option<u8> {
    let (sev, rest) = if b.first() == Some(&b'[') && b.len() > 3 {
        (b[1], &b[2..])
    } else if b.len() > 6 && b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' ' {
        (b[0], &b[1..])
    } else {
        return None;
    };
    if !matches!(sev, b'I' | b'W' | b'E' | b'F') {
        return None;
    }
    // Must be followed by MMDD or a space + file:line] to count.
    let ok = rest.first().is_some_and(|c| c.is_ascii_digit() || *c == b' ')
        && rest.iter().take(80).any(|&c| c == b']')
        && find(&rest[..rest.len().min(120)], b":").is_some();
    ok.then_some(sev)
}

/// `memmem::find` builds a searcher per call, which cost more than the search on every line of a
/// large log; the needles here are short and begin with a space or hold a rarer byte second.
pub(crate) fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    match n {
        [] => Some(0),
        [c] => memchr::memchr(*c, h),
        [_, c, ..] => memchr::memchr_iter(*c, h.get(1..)?).find(|&i| h[i..].starts_with(n)),
    }
}

/// The full parse of a line (rank prefix already stripped by the caller and passed in `rank`).
pub fn parse<'a>(line: &'a str, rank: Option<u32>) -> Record<'a> {
    let mut r = parse_any(line, rank);
    if is_launcher_line(line) {
        r.kind = Kind::Launcher;
    }
    r
}

/// torchrun's elastic agent writes from `torch/distributed/elastic/` and `run.py`; its lines are
/// the launcher's, whatever rank's file holds them.
fn is_launcher_line(line: &str) -> bool {
    // All four name `distributed`, which a line that passes the prefilter seldom holds.
    find(line.as_bytes(), b"distributed").is_some()
        && (line.contains("torch/distributed/elastic/")
            || line.contains("torch.distributed.elastic")
            || line.contains("torch/distributed/run.py")
            || line.contains("torch/distributed/launch.py"))
}

fn parse_any<'a>(line: &'a str, rank: Option<u32>) -> Record<'a> {
    let level = level_of(line);
    if let Some(r) = parse_nccl(line, level, rank) {
        return r;
    }
    if let Some(r) = parse_c10(line, level, rank) {
        return r;
    }
    if let Some(rest) = line.strip_prefix("[epdoctor-harness] ") {
        return Record { kind: Kind::Harness, rank: rank.or_else(|| kv_u32(rest, "rank=")), msg: rest, ..base(level) };
    }
    // epdoctor's stack lines name the rank they were taken from; its Flight Recorder lines the culprit.
    if let Some(rest) = line.strip_prefix("[epdoctor-stack] ") {
        return Record { kind: Kind::Harness, rank: rank.or_else(|| kv_u32(rest, "rank=")), msg: rest, ..base(level) };
    }
    if let Some(rest) = line.strip_prefix("[epdoctor-fr] ") {
        return Record { kind: Kind::Harness, rank: rank.or_else(|| fr_culprit(rest)), msg: rest, ..base(level) };
    }
    if let Some(rest) = line.strip_prefix("[epdoctor] ") {
        // A clock within ±300 000 years of 1970: anything else (inf, NaN, 1e300) is no time.
        let ts = kv(rest, "t=").and_then(|t| t.parse::<f64>().ok()).filter(|t| t.abs() < 1e13).map(unix_to_year_secs);
        return Record {
            kind: Kind::Worker,
            rank: rank.or_else(|| kv_u32(rest, "rank=")),
            ts,
            msg: rest,
            ..base(level)
        };
    }
    let kind = if is_exception_line(line.trim_start()) { Kind::Python } else { Kind::Other };
    Record { kind, rank, msg: line, ..base(level) }
}

fn base<'a>(level: Level) -> Record<'a> {
    Record {
        kind: Kind::Other,
        level,
        rank: None,
        host: None,
        pid: None,
        tid: None,
        dev: None,
        site: None,
        ts: None,
        msg: "",
    }
}

/// The value after `key` up to the next space.
pub fn kv<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let i = s.find(key)?;
    if i > 0 && !s.as_bytes()[i - 1].is_ascii_whitespace() {
        return None;
    }
    let v = &s[i + key.len()..];
    Some(v.split_whitespace().next().unwrap_or(""))
}

/// The rank a Flight Recorder fact blames (the first, when it names several).
fn fr_culprit(s: &str) -> Option<u32> {
    let first = |t: &str| t.trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok();
    if let Some(i) = s.find("culprit rank") {
        return first(s[i..].trim_start_matches("culprit ranks").trim_start_matches("culprit rank"));
    }
    for tail in [" never joined", " of the group wrote no Flight Recorder dump"] {
        if let Some(j) = s.find(tail) {
            let head = &s[..j];
            let i = head.rfind(": rank")?;
            return first(head[i + 2..].trim_start_matches("ranks").trim_start_matches("rank"));
        }
    }
    None
}

fn kv_u32(s: &str, key: &str) -> Option<u32> {
    kv(s, key)?.parse().ok()
}

/// `[TS] host:pid:tid [dev] [file:line [(func)] ]NCCL LEVEL msg`
fn parse_nccl<'a>(line: &'a str, level: Level, rank: Option<u32>) -> Option<Record<'a>> {
    let idx = find(line.as_bytes(), b" NCCL ")?;
    let after = &line[idx + 6..];
    let (lvl_word, msg) = after.split_once(' ').unwrap_or((after, ""));
    if !matches!(lvl_word, "WARN" | "ATTN" | "INFO" | "TRACE" | "CALL" | "ABORT") {
        return None;
    }
    let mut head = &line[..idx];
    let mut ts = None;
    if let Some(rest) = head.strip_prefix('[') {
        if let Some(close) = find(rest.as_bytes(), b"] ") {
            ts = parse_nccl_ts(&rest[..close]);
            head = &rest[close + 2..];
        }
    }
    // head = "host:pid:tid [dev]" optionally followed by " file:line" and " (func)"
    let (hpt, rest) = match find(head.as_bytes(), b" [") {
        Some(i) => (&head[..i], &head[i + 2..]),
        None => (head, ""),
    };
    let mut hpt_it = hpt.rsplitn(3, ':');
    let tid = hpt_it.next().and_then(|t| t.parse().ok());
    let pid = hpt_it.next().and_then(|p| p.parse().ok());
    let host = hpt_it.next().filter(|h| !h.is_empty() && !h.contains(' '));
    let (dev, after_dev) = match rest.split_once(']') {
        Some((d, a)) => (d.parse().ok(), a.trim_start()),
        None => (None, ""),
    };
    let mut site = None;
    if let Some(tok) = first_word(after_dev) {
        if let Some((f, l)) = tok.rsplit_once(':') {
            if let Ok(n) = l.parse() {
                site = Some((f, n));
            }
        }
    }
    // INFO unwinding lines carry their site inside the message: "misc/socket.cc:826 -> 3".
    if site.is_none() {
        if let Some(tok) = first_word(msg) {
            if let Some((f, l)) = tok.rsplit_once(':') {
                if f.ends_with(".cc") || f.ends_with(".h") || f.ends_with(".cu") {
                    if let Ok(n) = l.parse() {
                        site = Some((f, n));
                    }
                }
            }
        }
    }
    Some(Record { kind: Kind::Nccl, level, rank, host, pid, tid, dev, site, ts, msg })
}

/// `s.split_whitespace().next()`, without decoding characters while the bytes are ASCII (it is
/// asked twice of every NCCL line filed).
fn first_word(s: &str) -> Option<&str> {
    if !s.is_ascii() {
        return s.split_whitespace().next();
    }
    // ASCII's whitespace to `char::is_whitespace` (0x0b too, unlike `u8::is_ascii_whitespace`).
    let ws = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = s.bytes().position(|c| !ws(&c))?;
    let len = s.as_bytes()[start..].iter().position(ws).unwrap_or(s.len() - start);
    Some(&s[start..start + len])
}

/// `[W1129 13:54:38.758212116 ProcessGroupNCCL.cpp:1575] msg` (also without the date, and glog's
/// unbracketed `W1129 13:54:38.758 123 file:line] msg`).
fn parse_c10<'a>(line: &'a str, level: Level, rank: Option<u32>) -> Option<Record<'a>> {
    c10_level(line.as_bytes())?;
    let bracketed = line.starts_with('[');
    let body = if bracketed { &line[2..] } else { &line[1..] };
    let close = body.find(']')?;
    let inner = &body[..close];
    let msg = body[close + 1..].trim_start();
    let mut ts = None;
    let mut toks = inner.split_whitespace().collect::<Vec<_>>();
    if let (Some(date), Some(time)) = (toks.first(), toks.get(1)) {
        // c10 prints the month unpadded (`W515` is May 15), glog pads it (`W0515`).
        if (3..=4).contains(&date.len()) && date.bytes().all(|c| c.is_ascii_digit()) {
            let (m, d) = date.split_at(date.len() - 2);
            let month: u32 = m.parse().ok()?;
            let day: u32 = d.parse().ok()?;
            ts = hms(time).map(|s| day_of_year(month, day) as f64 * 86400.0 + s);
            toks.drain(..2);
        }
    }
    let site = toks.last().and_then(|t| t.rsplit_once(':')).and_then(|(f, l)| Some((f, l.parse().ok()?)));
    let msg = msg.strip_prefix("Warning: ").unwrap_or(msg);
    Some(Record { kind: Kind::Torch, level, rank, site, ts, msg, ..base(level) })
}

fn hms(s: &str) -> Option<f64> {
    let mut it = s.splitn(3, ':');
    let h: f64 = it.next()?.parse().ok()?;
    let m: f64 = it.next()?.parse().ok()?;
    let sec: f64 = it.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + sec)
}

/// `2026-11-29 14:09:06` (NCCL's default format; fractional seconds allowed).
fn parse_nccl_ts(s: &str) -> Option<f64> {
    let (date, time) = s.split_once(' ')?;
    date_time_secs(date, time)
}

/// `YYYY-MM-DD` and `HH:MM:SS[.frac]` as seconds since the start of the year.
pub(crate) fn date_time_secs(date: &str, time: &str) -> Option<f64> {
    let mut d = date.splitn(3, '-');
    let _year: i64 = d.next()?.parse().ok()?;
    let m: u32 = d.next()?.parse().ok()?;
    let dd: u32 = d.next()?.parse().ok()?;
    month_day_secs(m, dd, time)
}

/// Month, day and `HH:MM:SS[.frac]` as seconds since the start of the year.
pub(crate) fn month_day_secs(m: u32, d: u32, time: &str) -> Option<f64> {
    Some(day_of_year(m, d) as f64 * 86400.0 + hms(time)?)
}

/// Day of a non-leap year: every source's clock is mapped onto the same calendar, since c10 logs
/// carry no year (a log spanning 29 February is off by a day, which only matters across that day).
fn day_of_year(m: u32, d: u32) -> u32 {
    const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let m = m.clamp(1, 12);
    // A day past the month's end (a garbled or hostile log) stays a large number, not an overflow.
    CUM[(m - 1) as usize].saturating_add(d.saturating_sub(1))
}

fn unix_to_year_secs(t: f64) -> f64 {
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm), then the same mapping.
    let days = (t / 86400.0).floor() as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    day_of_year(m, d) as f64 * 86400.0 + (t - days as f64 * 86400.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_is_split_whitespaces_first() {
        for t in
            ["", " ", "a", "  misc/socket.cc:826 -> 3", "x\x0by", "\t\r\x0c a b", "\u{a0}a b", "a\u{2003}b c", "é x"]
        {
            assert_eq!(first_word(t), t.split_whitespace().next(), "{t:?}");
        }
    }

    #[test]
    fn column_titles_and_headings_are_not_errors() {
        // nccl-tests' header (NVIDIA/nccl-tests, aws-ofi-nccl#65) and NCCL RAS's table (NVIDIA/nccl#1911).
        for l in [
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
            "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
            "Errors",
        ] {
            assert!(!looks_like_error(l), "{l}");
        }
        for l in
            ["Killed", "Error", "RuntimeError  failed  to  connect  store", "step 10  loss 0.2  error  rank 3  failed"]
        {
            assert!(looks_like_error(l), "{l}");
        }
    }

    #[test]
    fn a_message_that_says_it_is_not_an_error_is_none() {
        // The tail of the DDP reducer's stride hint, hard-wrapped by a console (stylegan2-ada-pytorch#275).
        let l = "at the param's strides changed since DDP was constructed.  This is not an error, but may impair performance.";
        assert!(!looks_like_error(l));
        assert!(looks_like_error("This is an error, not a warning"));
    }

    #[test]
    fn nccl_2_2_heads_without_the_nccl_word() {
        // horovod#83 (NCCL 2.0-era INFO) and nccl-tests#15 (NCCL 2.2.13's WARN).
        assert_eq!(
            level_of("ecb2de971add:35789:35964 [1] INFO nvmlDeviceGetNvLinkCapability() failed: Not Supported"),
            Level::Info
        );
        let w =
            "gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out";
        assert_eq!(level_of(w), Level::Warn);
        assert!(positional_warn(w));
        assert_eq!(level_of("host 1:2 [0] INFO x"), Level::None);
        assert_eq!(level_of("a:b:3 [0] WARN x"), Level::None);
        // A paste without the head (NVIDIA/nccl#1584): the level word still rates the line.
        assert_eq!(level_of("NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v9 symbol."), Level::Info);
        assert!(positional_warn("NCCL WARN Cuda failure 'out of memory'"));
    }

    #[test]
    fn nccl_warn_with_timestamp_and_func() {
        let l = "[2026-11-29 14:33:31] vm:554:554 [0] transport/rma_socket.cc:32 (ncclRmaSocketProxyInit) NCCL WARN RMA/Socket : rma_socket requires GDRCopy";
        let r = parse(l, None);
        assert_eq!(r.kind, Kind::Nccl);
        assert_eq!(r.level, Level::Warn);
        assert_eq!(r.host, Some("vm"));
        assert_eq!(r.pid, Some(554));
        assert_eq!(r.dev, Some(0));
        assert_eq!(r.site, Some(("transport/rma_socket.cc", 32)));
        assert!(r.ts.is_some());
        assert!(r.msg.starts_with("RMA/Socket"));
    }

    #[test]
    fn nccl_info_unwind_site() {
        let r = parse("0bc8f5b83646:2374:2994 [0] NCCL INFO misc/socket.cc:826 -> 3", None);
        assert_eq!(r.level, Level::Info);
        assert_eq!(r.site, Some(("misc/socket.cc", 826)));
        assert_eq!(r.host, Some("0bc8f5b83646"));
    }

    #[test]
    fn c10_with_rank_prefix() {
        let p = crate::log::strip_prefixes(
            "[rank3]:[W310 15:54:45.576772833 ProcessGroupNCCL.cpp:1802] [PG ID 0 PG GUID 0 Rank 3] Failed to check",
        );
        let (rank, rest) = (p.rank, p.rest);
        assert_eq!(rank, Some(3));
        let r = parse(rest, rank);
        assert_eq!(r.kind, Kind::Torch);
        assert_eq!(r.level, Level::Warn);
        assert_eq!(r.site, Some(("ProcessGroupNCCL.cpp", 1802)));
        assert!(r.msg.starts_with("[PG ID 0"));
    }

    #[test]
    fn c10_unpadded_month_and_same_calendar_as_nccl() {
        let c10 = parse("[E515 07:06:42.5 ProcessGroupNCCL.cpp:1117] x", None).ts.unwrap();
        let nccl = parse("[2024-05-15 07:06:42] h:1:2 [0] a.cc:1 NCCL WARN y", None).ts.unwrap();
        assert!((c10 - nccl - 0.5).abs() < 1e-6, "{c10} {nccl}");
        // 2024-05-15 07:06:42 UTC
        let w = parse("[epdoctor] rank=0 phase=work t=1715756802.000000", None).ts.unwrap();
        assert!((w - nccl).abs() < 1e-6, "{w} {nccl}");
    }

    #[test]
    fn c10_without_date() {
        let r = parse("[W ProcessGroupNCCL.cpp:1128] Warning: something", None);
        assert_eq!(r.level, Level::Warn);
        assert_eq!(r.site, Some(("ProcessGroupNCCL.cpp", 1128)));
        assert_eq!(r.msg, "something");
    }

    /// Warning- and error-looking lines of several loggers and pastes (issue 38, point 2).
    const WARN_LOOKING: [&str; 8] = [
        // modelscope/ms-swift#9778: a Python warning pasted indented and wrapped (its `path:line:`
        // head not pasted).
        "  UserWarning: c10d::allreduce_: an autograd kernel was not registered to the",
        "FutureWarning: `torch.distributed._all_gather_base` is a private function",
        "    torch.distributed.SomeWarning: x",
        // loguru's default format (`{time} | {level: <8} | {name}:{function}:{line} - {message}`).
        "2025-12-07 10:00:00.123 | WARNING  | swift.trainers:train:120 - the dataset is small",
        // Python logging's `%(asctime)s %(levelname)s %(name)s: %(message)s`.
        "2025-12-07 10:00:00,123 WARNING some.module: something odd",
        // log4j's `%d [%t] %-5level %logger - %msg` and `[%d] %-5level [%t] %msg`.
        "2025-12-07 10:00:00,123 [main] WARN  org.x.Pool - pool exhausted",
        "[2025-12-07 10:00:00] WARN  [main] pool exhausted",
        // bytedance/byteps#313: a program's tag, then its level word.
        "libibverbs: Warning: couldn't load driver 'mlx4': libmlx4-rdmav2.so: cannot open shared object file",
    ];
    const ERROR_LOOKING: [&str; 4] = [
        "2025-12-07 10:00:00.123 | ERROR    | swift.trainers:train:130 - step failed",
        "2025-12-07 10:00:00,123 CRITICAL x.y: down",
        "2025-12-07 10:00:00,123 FATAL x.y: down",
        "srun: error: node-3: task 1: Exited with exit code 1",
    ];

    /// A warning-looking line is a warning wherever it sits, so that a log holding one is never
    /// `clean`; a level word after prose, or inside a name or a setting, is not one.
    #[test]
    fn warning_looking_lines_are_warnings_at_any_indentation_and_in_any_logger_head() {
        for l in WARN_LOOKING {
            assert_eq!(level_of(l), Level::Warn, "{l}");
        }
        for l in ERROR_LOOKING {
            assert_eq!(level_of(l), Level::Error, "{l}");
        }
        let none = [
            "export NCCL_DEBUG=WARN",
            "NCCL_DEBUG set by environment to WARN",
            "python train.py --log-level=WARNING",
            "ERROR_CODE_TABLE loaded",
            "Warning",
            "step 10 loss 0.31 (2 warnings suppressed so far, see the WARNING section of the docs at the end)",
            "    warnings.warn(\"x\", FutureWarning)",
            // A tag is one word: prose before the colon is no tag.
            "the run says: Warning: none of this is a level",
            // ProcessGroupNCCL's option dump, trailing blanks as pasted (pytorch#105695).
            "NCCL_DEBUG: WARN                    ",
        ];
        for l in none {
            assert_ne!(level_of(l), Level::Warn, "{l}");
        }
        for l in ["TORCH_CPP_LOG_LEVEL: ERROR", "NCCL_DEBUG: WARN  ", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"] {
            assert!(!looks_like_error(l) && level_of(l) < Level::Warn, "a setting: {l}");
        }
        // A FATAL head, glog's and c10's; an F that starts prose is none.
        assert!(is_fatal_head("F0105 23:50:34.026692   34204 nccl_all_reduce_thunk.cc:175] Check failed: x"));
        assert!(is_fatal_head("[F1129 13:54:38.758212116 ProcessGroupNCCL.cpp:1575] [PG 0] Terminating"));
        assert!(!is_fatal_head("E0403 15:37:24.104311 3871038 pjrt.cc:2809] Execution of replica 0 failed"));
        assert!(!is_fatal_head("F1 score 0.93 after 3 epochs: done"));
        for l in ["NCCL_SOCKET: connection failed", "JOB_STATUS: FAILED (exit 3)"] {
            assert!(looks_like_error(l), "a message: {l}");
        }
    }

    /// Every line `level_of` rates a warning or worse holds a literal of `WARN_LITERALS` (or is a
    /// positional warning): the prefilter skips the others unread.
    #[test]
    fn warn_literals_cover_level_of() {
        let others = [
            "RuntimeError: NCCL error",
            "terminate called after throwing an instance of 'c10::Error'",
            "/x/y.py:3: UserWarning: z",
            "Out of memory: Killed process 12 (python)",
        ];
        for l in WARN_LOOKING.into_iter().chain(ERROR_LOOKING).chain(others) {
            assert!(level_of(l) >= Level::Warn, "{l}");
            assert!(WARN_LITERALS.iter().any(|w| l.contains(w)) || positional_warn(l), "{l}");
        }
    }

    #[test]
    fn levels() {
        assert_eq!(level_of("RuntimeError: DeepEP error: timeout"), Level::Error);
        assert_eq!(level_of("torch.distributed.DistBackendError: NCCL error in: x"), Level::Error);
        assert_eq!(level_of("Traceback (most recent call last):"), Level::None);
        assert_eq!(level_of("ErrorCount: 3 is fine"), Level::None);
        assert_eq!(level_of("some ordinary output"), Level::None);
        assert_eq!(level_of("[epdoctor-harness] rank=1 exit=0"), Level::Info);
        assert_eq!(level_of("[epdoctor-harness] rank=1 signal=9 (SIGKILL)"), Level::Error);
        assert_eq!(level_of("/x/y.py:3: UserWarning: careful"), Level::Warn);
    }

    #[test]
    fn absurd_times_do_not_overflow() {
        for t in ["1e300", "inf", "-inf", "NaN", "-1e300", "9223372036854775807", "-9223372036854775808"] {
            let line = format!("[epdoctor] rank=1 phase=work t={t}");
            assert_eq!(parse(&line, None).ts, None, "{t}");
        }
        assert!(parse("[epdoctor] rank=1 phase=work t=-5", None).ts.is_some());
        let r = parse("[2026-12-4294967295 99:99:1e308] vm:1:2 [0] x.cc:1 NCCL WARN boom", None);
        assert_eq!(r.level, Level::Warn);
        let r = parse("[W1299 13:54:38.758 x.cpp:1] y", None);
        assert_eq!(r.level, Level::Warn);
    }

    #[test]
    fn epdoctor_stack_and_flight_recorder_lines_carry_their_rank() {
        assert_eq!(parse("[epdoctor-stack] rank=7 pid=12 via=py-spy thread=main: x (a.py:1)", None).rank, Some(7));
        let fr = |l: &str| parse(l, None).rank;
        assert_eq!(fr("[epdoctor-fr] pg=0 (default_pg) seq=5 op=all_reduce sizes=[[4]] dtypes=[Float]: ranks 3, 5 never joined (last enqueued #4, #4); rank 0 enqueued it"), Some(3));
        assert_eq!(fr("[epdoctor-fr] pg=0 seq=5: collective mismatch, culprit rank 2: ranks 0, 1 all_reduce; rank 2 all_gather"), Some(2));
        assert_eq!(fr("[epdoctor-fr] pg=0 (default_pg): rank 1 of the group wrote no Flight Recorder dump while rank 0 waits in seq=5 op=all_reduce"), Some(1));
        assert_eq!(fr("[epdoctor-fr] pg=0 (default_pg) rank=0 last_enqueued=5 last_started=-1 last_completed=4"), None);
    }

    #[test]
    fn worker_marker_time() {
        let r = parse("[epdoctor] rank=1 phase=work t=1764426546.500000", None);
        assert_eq!(r.kind, Kind::Worker);
        assert_eq!(r.rank, Some(1));
        assert!(r.ts.unwrap() > 0.0);
    }
}
