//! Lines joined into the records a person reads as one message: a Python traceback with its
//! exception, `terminate called ...` with its `what():`, a crash handler's backtrace block, NCCL's
//! `Last error:` with the line that restates the failure, a c10 warning wrapped after its header.
//!
//! Knows no rules. The engine feeds every line that passes its prefilter (and, while a record is
//! open, every line) and matches what comes out: most lines are records on their own and are
//! handed back at once, without a copy; open records are kept per rank prefix, since torchrun
//! interleaves the tracebacks of several ranks line by line.

use super::prefix::Prefixed;
use super::record::{is_exception_line, Level};

/// How a traceback's detail names its innermost frame (rules with `frames` read the rest).
pub const INNERMOST: &str = "innermost frame: ";

/// Lines of one record past which it is closed anyway (a runaway block).
const MAX_PARTS: usize = 64;
/// Records open at once in one source (one per rank prefix).
const MAX_OPEN: usize = 64;

/// Literals one of which every line that opens a record holds (for the engine's prefilter).
pub const OPENERS: &[&str] = &[
    "Traceback (most recent call last)",
    "Exception ignored in",
    "terminate called",
    "*** ",
    "Caught signal",
    "Fatal Python error",
    "Last error:",
    "==== backtrace",
];

/// How a part of a record is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Matched as a line of its own (`msg`), with the record's flags.
    Match,
    /// The line after NCCL's `Last error:`: it restates the failing WARN, so it is matched as one.
    Payload,
    /// Read for the record (frames, separators) but not matched.
    Context,
}

/// What a record says about the exception or crash it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// An exception raised while handling an earlier one: the earlier one is the cause.
    pub chained: bool,
    /// Printed by Python's `Exception ignored in:` (a destructor at exit): it ended nothing.
    pub ignored: bool,
    /// A continuation of the message of the record's head.
    pub continuation: bool,
    /// The record was cut before its exception or signal line.
    pub incomplete: bool,
    /// A traceback whose outermost frame is the script's top level (`in <module>`): nothing
    /// caught the exception, so it ended the process (an outcome marker).
    pub uncaught: bool,
}

/// Prefix facts of a line, owned (a record outlives the reader's buffer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origin {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub ts: Option<f64>,
    /// The level the line's logger head gave it (`Prefixed::level`).
    pub level: Option<Level>,
}

impl Origin {
    pub fn of(p: &Prefixed<'_>) -> Origin {
        Origin {
            rank: p.rank,
            local_rank: p.local_rank,
            host: p.host.map(str::to_string),
            pid: p.pid,
            ts: p.ts,
            level: p.level,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub line: u64,
    /// The physical line (prefixes included), for evidence.
    pub raw: String,
    /// What is matched: the message, or a joined form (`terminate ... what(): ...`).
    pub msg: String,
    pub origin: Origin,
    pub role: Role,
    pub flags: Flags,
    /// What the record adds to this line: the innermost frame, the libraries of a backtrace, the
    /// error a `Last error:` payload belongs to.
    pub detail: Option<String>,
}

impl Part {
    /// Add what the record joins to this line, to what is matched and to the evidence alike.
    fn join(&mut self, sep: &str, text: &str) {
        for s in [&mut self.msg, &mut self.raw] {
            s.push_str(sep);
            s.push_str(text);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Traceback,
    Terminate,
    Crash,
    Wrapped,
    LastError,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Frames of a traceback, before its exception line.
    Frames,
    /// After the exception line (or a terminate's head): message continuation lines.
    Message,
    /// Frames after the message (c10's `frame #N:`, a crash handler's backtrace).
    Trailer,
}

#[derive(Debug)]
struct Open {
    key: Option<u32>,
    kind: Kind,
    stage: Stage,
    parts: Vec<Part>,
    /// Index in `parts` of the part that gets the record's detail (the exception, the crash head).
    head: Option<usize>,
    innermost: Option<String>,
    libs: Vec<String>,
    chained_next: bool,
    ignored: bool,
    /// The next line of this key is a `Last error:` payload.
    payload_next: bool,
    /// A complete-looking c10 line that may go on in the next physical line (a paste wrapped it).
    soft: bool,
    /// In the current traceback: whether a frame was read yet, and whether the first was `<module>`.
    framed: bool,
    from_module: bool,
}

impl Open {
    fn new(key: Option<u32>, kind: Kind, stage: Stage) -> Open {
        Open {
            key,
            kind,
            stage,
            parts: Vec::new(),
            head: None,
            innermost: None,
            libs: Vec::new(),
            chained_next: false,
            ignored: false,
            payload_next: false,
            soft: false,
            framed: false,
            from_module: false,
        }
    }

    fn push(&mut self, line: u64, raw: &str, p: &Prefixed<'_>, role: Role, msg: String, flags: Flags) {
        self.parts.push(Part { line, raw: raw.to_string(), msg, origin: Origin::of(p), role, flags, detail: None });
    }

    /// A line that continues the head's message, matched on its own.
    fn push_continuation(&mut self, line: u64, raw: &str, p: &Prefixed<'_>) {
        let flags = Flags { continuation: true, ..Flags::default() };
        self.push(line, raw, p, Role::Match, p.rest.to_string(), flags);
    }

    /// The finished record: the head gets what the body said about it.
    fn close(mut self) -> Vec<Part> {
        let detail = match self.kind {
            Kind::Traceback => self.innermost.take().map(|f| format!("{INNERMOST}{f}")),
            Kind::Crash => (!self.libs.is_empty()).then(|| format!("backtrace through {}", self.libs.join(", "))),
            Kind::Terminate => self.innermost.take(),
            _ => None,
        };
        match self.head {
            Some(h) => {
                if let Some(d) = detail {
                    if self.kind == Kind::Crash {
                        // Backtrace libraries are matched too (a SIGBUS in libnccl's shm code).
                        let m = &mut self.parts[h].msg;
                        m.push_str(" | ");
                        m.push_str(&d);
                    }
                    self.parts[h].detail = Some(d);
                }
            }
            None if self.kind == Kind::Traceback => {
                // Cut before its exception line. When the innermost frame's source line raises a
                // named exception, that line says what the missing one would: it is the head.
                let uncaught = self.from_module && !self.ignored;
                match self.parts.last_mut().and_then(|l| raised(&l.msg).map(|m| (l, m))) {
                    Some((last, msg)) => {
                        last.msg = msg;
                        last.role = Role::Match;
                        last.flags = Flags { incomplete: true, uncaught, ignored: self.ignored, ..Flags::default() };
                        last.detail = detail;
                    }
                    None => {
                        // The opener is all there is; the engine lists it.
                        if let Some(first) = self.parts.first_mut() {
                            first.role = Role::Match;
                            first.flags.incomplete = true;
                        }
                    }
                }
            }
            None => {}
        }
        self.parts
    }
}

/// What `feed` did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// The line is a record on its own: match it as it is.
    Alone,
    /// The line went into an open record.
    Taken,
}

#[derive(Debug, Default)]
pub struct Assembler {
    open: Vec<Open>,
    done: Vec<Vec<Part>>,
}

impl Assembler {
    /// Whether a record is open (every line must then be fed, prefilter or not).
    pub fn is_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Records finished by the last `feed` (or `finish`), in the order they were opened.
    pub fn take_done(&mut self) -> Vec<Vec<Part>> {
        std::mem::take(&mut self.done)
    }

    /// Close every open record (end of input).
    pub fn finish(&mut self) {
        let mut open = std::mem::take(&mut self.open);
        open.sort_by_key(|o| o.parts.first().map_or(0, |p| p.line));
        for o in open {
            self.done.push(o.close());
        }
    }

    /// Feed line `line` (`raw` as read, `p` its prefixes stripped).
    pub fn feed(&mut self, line: u64, raw: &str, p: &Prefixed<'_>) -> Fed {
        if let Some(fed) = self.soft_wrap(line, raw, p) {
            return fed;
        }
        let key = p.any_rank();
        let msg = p.rest;
        if msg.is_empty() {
            // A blank line (or a bare prefix) inside a traceback separates its chained parts.
            return if self.open.iter().any(|o| o.key == key) { Fed::Taken } else { Fed::Alone };
        }
        if let Some(i) = self.open.iter().position(|o| o.key == key) {
            if self.continue_open(i, line, raw, p) {
                return Fed::Taken;
            }
            let o = self.open.remove(i);
            self.done.push(o.close());
        }
        self.start(line, raw, p, key, msg)
    }

    /// Open a record if `msg` starts one.
    fn start(&mut self, line: u64, raw: &str, p: &Prefixed<'_>, key: Option<u32>, msg: &str) -> Fed {
        let (kind, stage, role) = if msg.starts_with("Traceback (most recent call last)")
                || msg.starts_with("Exception ignored in")
                // A logger that prints the traceback after its own words (SGLang's `Scheduler hit
                // an exception: Traceback (most recent call last):`).
                || msg.ends_with(": Traceback (most recent call last):")
        {
            (Kind::Traceback, Stage::Frames, Role::Context)
        } else if msg.starts_with("terminate called after throwing an instance of") {
            (Kind::Terminate, Stage::Message, Role::Match)
        } else if is_crash_head(msg) {
            (Kind::Crash, Stage::Message, Role::Match)
        } else if is_wrapped_c10_header(msg) || may_wrap(msg) {
            (Kind::Wrapped, Stage::Message, Role::Match)
        } else if msg.trim_end().ends_with("Last error:") {
            (Kind::LastError, Stage::Message, Role::Match)
        } else {
            return Fed::Alone;
        };
        if self.open.len() >= MAX_OPEN {
            let o = self.open.remove(0);
            self.done.push(o.close());
        }
        let mut o = Open::new(key, kind, stage);
        o.ignored = msg.starts_with("Exception ignored in");
        o.push(line, raw, p, role, msg.to_string(), Flags::default());
        if role == Role::Match {
            o.head = Some(0);
        }
        o.payload_next = kind == Kind::LastError;
        o.soft = kind == Kind::Wrapped && !is_wrapped_c10_header(msg);
        self.open.push(o);
        Fed::Taken
    }

    /// A pasted log wraps long lines where the terminal did: the rest of a message lands on the
    /// next line without the prefixes. Join such a line to the message it continues (a c10 line
    /// waiting alone, or the message part a traceback or terminate record read last); any other
    /// line closes a c10 line that waits alone.
    fn soft_wrap(&mut self, line: u64, raw: &str, p: &Prefixed<'_>) -> Option<Fed> {
        let next = |o: &Open| o.parts.last().is_some_and(|l| l.line + 1 == line);
        if let Some(o) = self.open.iter_mut().find(|o| next(o) && (o.soft || o.kind != Kind::Wrapped)) {
            let last = o.parts.last().expect("an open record has a part");
            // The part that was read last, or the one whose wrap was read last.
            let m = if last.role == Role::Match {
                Some(o.parts.len() - 1)
            } else if last.flags.continuation && last.role == Role::Context {
                o.parts.iter().rposition(|x| x.role == Role::Match)
            } else {
                None
            };
            // A wrap at a word boundary often keeps the space it broke at; only a c10 line that
            // waits alone may go on in upper case (torch's own multi-line messages do).
            let broke_at_space = o.soft && last.raw.ends_with(' ');
            if let Some(m) = m.filter(|&m| o.parts[m].msg.len() < 2048) {
                if (broke_at_space || ends_mid_sentence(&o.parts[m].msg)) && continues_wrapped(raw, p, broke_at_space) {
                    let h = &mut o.parts[m];
                    for s in [&mut h.msg, &mut h.raw] {
                        s.truncate(s.trim_end().len());
                    }
                    h.join(" ", p.rest);
                    let flags = Flags { continuation: true, ..Flags::default() };
                    o.push(line, raw, p, Role::Context, p.rest.to_string(), flags);
                    return Some(Fed::Taken);
                }
            }
        }
        if let Some(i) = self.open.iter().position(|o| o.soft) {
            let o = self.open.remove(i);
            self.done.push(o.close());
        }
        None
    }

    /// Take `msg` into open record `i`, or say it does not belong there.
    fn continue_open(&mut self, i: usize, line: u64, raw: &str, p: &Prefixed<'_>) -> bool {
        let msg = p.rest;
        let o = &mut self.open[i];
        if o.parts.len() >= MAX_PARTS {
            return false;
        }
        if o.payload_next {
            o.payload_next = false;
            // An empty payload (torch prints `Last error:` and nothing when NCCL kept none) is
            // followed by c10's backtrace header, which restates nothing.
            if !msg.is_empty() && !starts_record(msg) && !msg.starts_with("Exception raised from") {
                o.push(line, raw, p, Role::Payload, msg.to_string(), Flags { continuation: true, ..Flags::default() });
                if let Some(h) = o.head {
                    let head = o.parts[h].raw.clone();
                    o.parts.last_mut().unwrap().detail = Some(format!("restates the error of: {head}"));
                }
                return true;
            }
            return false;
        }
        match o.kind {
            Kind::Wrapped => {
                // The body of a header cut after `Warning:` or before its `]`.
                if !o.soft && o.parts.len() == 1 && !starts_record(msg) {
                    o.parts[0].join(" ", msg);
                    return true;
                }
                false
            }
            Kind::LastError => false,
            Kind::Traceback => continue_traceback(o, line, raw, p),
            Kind::Terminate => {
                if let Some(w) = msg.strip_prefix("what():") {
                    o.innermost = Some(format!("what(): {}", w.trim()));
                    // The uncaught exception's own message, an error by nature: read like any
                    // error line (listed when no rule reads it), not as a continuation of the head.
                    o.push(line, raw, p, Role::Match, msg.to_string(), Flags::default());
                    if let Some(last) = o.parts.last_mut() {
                        last.origin.level = Some(Level::Error);
                    }
                    return true;
                }
                if is_frame_line(msg) || msg.starts_with("Exception raised from") {
                    o.stage = Stage::Trailer;
                    note_libs(&mut o.libs, msg);
                    o.push(line, raw, p, Role::Context, msg.to_string(), Flags::default());
                    return true;
                }
                if o.stage == Stage::Message && o.parts.len() < 6 && !starts_record(msg) {
                    o.push_continuation(line, raw, p);
                    return true;
                }
                false
            }
            Kind::Crash => {
                if is_crash_body(msg) {
                    note_libs(&mut o.libs, msg);
                    let role = if msg.starts_with("Signal: ") || msg.starts_with("Signal code: ") {
                        Role::Match
                    } else {
                        Role::Context
                    };
                    if role == Role::Match {
                        // The evidence shows the signal too: the head alone names no cause.
                        o.parts[0].join(" | ", msg);
                    }
                    o.push(line, raw, p, Role::Context, msg.to_string(), Flags::default());
                    return true;
                }
                false
            }
        }
    }
}

fn continue_traceback(o: &mut Open, line: u64, raw: &str, p: &Prefixed<'_>) -> bool {
    let msg = p.rest;
    if msg.starts_with("During handling of the above exception")
        || msg.starts_with("The above exception was the direct cause")
    {
        o.chained_next = true;
        o.stage = Stage::Frames;
        o.push(line, raw, p, Role::Context, msg.to_string(), Flags::default());
        return true;
    }
    if msg.starts_with("Traceback (most recent call last)") {
        o.stage = Stage::Frames;
        o.framed = false;
        o.push(line, raw, p, Role::Context, msg.to_string(), Flags::default());
        return true;
    }
    match o.stage {
        Stage::Frames => {
            if msg.starts_with("File \"") {
                if !o.framed {
                    o.framed = true;
                    o.from_module = msg.trim_end().ends_with(", in <module>");
                }
                o.innermost = Some(msg.to_string());
                o.push(line, raw, p, Role::Context, msg.to_string(), Flags::default());
                return true;
            }
            if p.indented || msg.starts_with('^') || msg.starts_with('~') || msg == "..." {
                // A frame's source line, its caret markers, a `...` elision.
                o.push(line, raw, p, Role::Context, msg.to_string(), Flags::default());
                return true;
            }
            if is_exception_line(msg) {
                let chained = o.chained_next || o.head.is_some();
                o.chained_next = false;
                let uncaught = o.from_module && !o.ignored;
                let flags = Flags { chained, ignored: o.ignored, uncaught, ..Flags::default() };
                o.push(line, raw, p, Role::Match, msg.to_string(), flags);
                if o.head.is_none() {
                    o.head = Some(o.parts.len() - 1);
                }
                o.stage = Stage::Message;
                if msg.trim_end().ends_with("Last error:") {
                    o.payload_next = true;
                }
                return true;
            }
            false
        }
        Stage::Message | Stage::Trailer => {
            if starts_record(msg) || msg.starts_with("File \"") || p.indented {
                return false;
            }
            if o.parts.len() - o.head.unwrap_or(0) > 12 {
                return false;
            }
            if msg.trim_end().ends_with("Last error:") {
                o.payload_next = true;
            }
            let flags = Flags {
                continuation: true,
                chained: o.parts.last().is_some_and(|l| l.flags.chained),
                ignored: o.ignored,
                ..Flags::default()
            };
            o.push(line, raw, p, Role::Match, msg.to_string(), flags);
            true
        }
    }
}

/// A frame's source line `raise Name(args)` -> the exception line it would print, `Name: args`
/// (a single string literal unquoted); None for a bare `raise` or a name that is no exception.
fn raised(src: &str) -> Option<String> {
    let call = src.trim().strip_prefix("raise ")?.trim_end();
    let (name, args) = match call.find('(') {
        Some(i) if call.ends_with(')') => (&call[..i], call[i + 1..call.len() - 1].trim()),
        Some(_) => return None,
        None => (call, ""),
    };
    if !is_exception_line(name) || name.contains(char::is_whitespace) {
        return None;
    }
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|&q| args.strip_prefix(q)?.strip_suffix(q).filter(|s| !s.contains(q)))
        .or_else(|| ["f\"", "f'"].iter().find_map(|q| args.strip_prefix(q)?.strip_suffix(&q[1..])));
    let what = unquoted.unwrap_or(args);
    Some(if what.is_empty() { name.to_string() } else { format!("{name}: {what}") })
}

/// A line that begins a message of its own, so it cannot continue another one.
fn starts_record(msg: &str) -> bool {
    msg.starts_with("Traceback (most recent call last)")
        || is_nccl_line(msg)
        || super::record::positional_warn(msg)
        || msg.starts_with("[epdoctor")
        || msg.starts_with("terminate called")
        || is_crash_head(msg)
        || is_glibc_heap_abort(msg)
        || msg.starts_with("During handling of the above exception")
        || msg.starts_with("The above exception was the direct cause")
        || msg.starts_with("Exception ignored in")
        || (msg.contains("torch/distributed/elastic/") || msg.contains("torch.distributed.elastic"))
            && !is_exception_line(msg)
}

/// glibc's allocator reporting a corrupted heap just before it aborts (malloc_printerr's texts:
/// `free(): invalid pointer`, `malloc_consolidate(): ...`, `double free or corruption (out)`):
/// lower case like a wrapped line's rest, but a line of its own.
fn is_glibc_heap_abort(msg: &str) -> bool {
    const FUNCS: [&str; 11] = [
        "free(): ",
        "malloc(): ",
        "realloc(): ",
        "munmap_chunk(): ",
        "mremap_chunk(): ",
        "malloc_consolidate(): ",
        "tcache_thread_shutdown(): ",
        "int_mallinfo(): ",
        "__malloc_info(): ",
        "do_check_malloc_state(): ",
        "_int_memalign(): ",
    ];
    FUNCS.iter().any(|f| msg.starts_with(f))
        || msg.starts_with("double free or corruption (")
        || msg.starts_with("corrupted size vs. prev_size")
        || msg.starts_with("corrupted double-linked list")
}

/// An NCCL debug line (`host:pid:tid [dev] NCCL INFO ...`), not a message that names NCCL.
pub(super) fn is_nccl_line(msg: &str) -> bool {
    msg.match_indices(" NCCL ").any(|(i, _)| {
        let t = &msg[i + 6..];
        ["INFO", "WARN", "ATTN", "TRACE", "ABORT", "VERSION"].iter().any(|l| t.starts_with(l))
    })
}

/// The first line of an in-process crash handler's report.
fn is_crash_head(msg: &str) -> bool {
    msg.starts_with("*** Process received signal ***")
        || (msg.starts_with("*** SIG") && msg.contains(" received at time="))
        || msg.starts_with("Fatal Python error: ")
        || (msg.contains("Caught signal ") && msg.contains('('))
        || msg.starts_with("==== backtrace")
}

/// A line of a crash handler's report after its head.
fn is_crash_body(msg: &str) -> bool {
    msg.starts_with("Signal: ")
        || msg.starts_with("Signal code: ")
        || msg.starts_with("Failing at address: ")
        || msg.starts_with("*** End of error message ***")
        || msg.starts_with("==== backtrace")
        || msg.starts_with("=====")
        || msg.starts_with("PC: @")
        || msg.starts_with("@ ")
        || msg.starts_with("[ ")
        || msg.starts_with("Thread 0x")
        || msg.starts_with("Current thread 0x")
        || msg.starts_with("File \"")
        || msg.starts_with("Extension modules:")
        || is_frame_line(msg)
        || msg.bytes().next().is_some_and(|c| c.is_ascii_digit()) && msg.contains("0x")
}

/// c10's `frame #3: ...`, a numbered backtrace line.
fn is_frame_line(msg: &str) -> bool {
    msg.starts_with("frame #")
}

/// A c10 warning header whose body went to the next line: it ends in `Warning:`, or its bracket
/// was cut (`[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1496` and nothing else).
fn is_wrapped_c10_header(msg: &str) -> bool {
    let b = msg.as_bytes();
    if b.len() < 8 || b[0] != b'[' || !matches!(b[1], b'W' | b'E' | b'I' | b'F') {
        return false;
    }
    if !b[2..].iter().take(4).all(|c| c.is_ascii_digit() || *c == b' ') {
        return false;
    }
    match msg.find(']') {
        None => msg.len() < 120 && msg.contains(':'),
        Some(close) => {
            let body = msg[close + 1..].trim();
            body.is_empty() || body == "Warning:"
        }
    }
}

/// A c10 warning or error whose text does not end like a finished sentence: a paste may have
/// wrapped it (torch's messages end in `.`, `)` or a value, rarely in a plain word).
fn may_wrap(msg: &str) -> bool {
    let b = msg.as_bytes();
    // `[W1129 13:54:38.758 file:line]` and torch < 2.0's `[W file:line]`.
    if b.len() < 40 || b[0] != b'[' || !matches!(b[1], b'W' | b'E' | b'F') || !(b[2].is_ascii_digit() || b[2] == b' ') {
        return false;
    }
    let Some(close) = msg.find("] ") else { return false };
    let body = msg[close + 2..].trim_end();
    body.len() > 20 && (ends_mid_sentence(body) || msg.ends_with(' '))
}

/// Text that stops where a sentence would not: in a word or after a comma.
fn ends_mid_sentence(msg: &str) -> bool {
    msg.trim_end().bytes().last().is_some_and(|c| c.is_ascii_alphabetic() || c == b',')
}

/// The line goes on with a wrapped message: no prefix of its own (nothing was stripped, so no
/// rank, time or indentation either), not a record or a header, and it starts mid-sentence
/// (lower case), or the line before broke at a space.
fn continues_wrapped(raw: &str, p: &Prefixed<'_>, broke_at_space: bool) -> bool {
    let msg = p.rest;
    let first = msg.bytes().next();
    raw.len() == msg.len()
        && (first.is_some_and(|c| c.is_ascii_lowercase())
            || broke_at_space && first.is_some_and(|c| c.is_ascii_alphanumeric()))
        && !starts_record(msg)
        && !is_exception_line(msg)
}

/// Remember the shared libraries (and NCCL/NVSHMEM/DeepEP symbols) a backtrace line names.
fn note_libs(libs: &mut Vec<String>, msg: &str) {
    for tok in msg.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == '[' || c == ']') {
        let base = tok.rsplit('/').next().unwrap_or(tok);
        let lib = if let Some(i) = base.find(".so") {
            &base[..i + 3]
        } else if base.starts_with("nccl") || base.starts_with("nvshmem") || base.starts_with("deep_ep") {
            base.split('+').next().unwrap_or(base)
        } else {
            continue;
        };
        if !lib.is_empty() && libs.len() < 8 && !libs.iter().any(|l| l == lib) {
            libs.push(lib.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::prefix::strip_prefixes;
    use super::*;

    /// Feed `lines`; return every record (alone lines as one-part records) in order of closing.
    fn run(lines: &[&str]) -> Vec<Vec<Part>> {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let p = strip_prefixes(l);
            let fed = a.feed(i as u64 + 1, l, &p);
            out.extend(a.take_done());
            if fed == Fed::Alone {
                out.push(vec![Part {
                    line: i as u64 + 1,
                    raw: l.to_string(),
                    msg: p.rest.to_string(),
                    origin: Origin::of(&p),
                    role: Role::Match,
                    flags: Flags::default(),
                    detail: None,
                }]);
            }
        }
        a.finish();
        out.extend(a.take_done());
        out
    }

    fn matched(rec: &[Part]) -> Vec<(&str, &Flags)> {
        rec.iter().filter(|p| p.role != Role::Context).map(|p| (p.msg.as_str(), &p.flags)).collect()
    }

    #[test]
    fn traceback_is_one_record_with_its_innermost_frame() {
        let recs = run(&[
            "Traceback (most recent call last):",
            "  File \"train.py\", line 88, in <module>",
            "    main()",
            "  File \"train.py\", line 12, in main",
            "    x = torch.empty(n, device='cuda')",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1] next record",
        ]);
        assert_eq!(recs.len(), 2);
        let m = matched(&recs[0]);
        assert_eq!(m.len(), 1);
        assert!(m[0].0.starts_with("torch.OutOfMemoryError"));
        assert_eq!(recs[0][5].detail.as_deref(), Some("innermost frame: File \"train.py\", line 12, in main"));
    }

    #[test]
    fn chained_exceptions_keep_the_first_as_cause() {
        let recs = run(&[
            "Traceback (most recent call last):",
            "  File \"a.py\", line 1, in f",
            "RuntimeError: first",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            "  File \"a.py\", line 3, in g",
            "ValueError: second",
        ]);
        let m: Vec<_> = recs.iter().flat_map(|r| matched(r)).filter(|(m, _)| !m.is_empty()).collect();
        assert_eq!(m[0].0, "RuntimeError: first");
        assert!(!m[0].1.chained);
        let second = m.iter().find(|(t, _)| *t == "ValueError: second").unwrap();
        assert!(second.1.chained);
    }

    #[test]
    fn ignored_exception_at_exit() {
        let recs = run(&[
            "Exception ignored in: <function Buffer.__del__ at 0x7f>",
            "Traceback (most recent call last):",
            "  File \"buffer.py\", line 9, in __del__",
            "RuntimeError: DeepEP error: CPU recv timeout",
        ]);
        let m = matched(&recs[0]);
        assert_eq!(m.len(), 1);
        assert!(m[0].1.ignored);
    }

    #[test]
    fn interleaved_ranks_keep_their_own_records() {
        let recs = run(&[
            "[rank0]: Traceback (most recent call last):",
            "[rank1]: Traceback (most recent call last):",
            "[rank0]:   File \"t.py\", line 1, in f",
            "[rank1]:   File \"t.py\", line 2, in g",
            "[rank0]: RuntimeError: zero",
            "[rank1]: RuntimeError: one",
        ]);
        assert_eq!(recs.len(), 2);
        assert_eq!(matched(&recs[0])[0].0, "RuntimeError: zero");
        assert_eq!(matched(&recs[1])[0].0, "RuntimeError: one");
    }

    #[test]
    fn last_error_payload_is_matched_as_a_warn() {
        let recs = run(&[
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version 2.19.3",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
            "Last error:",
            "socketStartConnect: Connect to 10.0.0.2<35791> failed : Software caused connection abort",
        ]);
        // Not inside a traceback: the exception line stands alone, then the `Last error:` record.
        let all: Vec<&Part> = recs.iter().flatten().collect();
        let payload = all.iter().find(|p| p.role == Role::Payload).unwrap();
        assert!(payload.msg.starts_with("socketStartConnect"));
        assert!(payload.detail.as_deref().unwrap().contains("Last error:"));
    }

    #[test]
    fn last_error_inside_a_traceback_message() {
        let recs = run(&[
            "Traceback (most recent call last):",
            "  File \"t.py\", line 1, in f",
            "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error",
            "ncclSystemError: System call failed.",
            "Last error:",
            "socketProgress: Connection closed by remote peer node2<40123>",
        ]);
        assert_eq!(recs.len(), 1);
        let payload = recs[0].iter().find(|p| p.role == Role::Payload).unwrap();
        assert!(payload.msg.starts_with("socketProgress"));
    }

    #[test]
    fn terminate_joins_what() {
        let recs = run(&[
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: NCCL error",
            "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1617 (most recent call first):",
            "frame #0: c10::Error::Error() + 0x99 (0x7f in /usr/lib/python3/site-packages/torch/lib/libc10.so)",
            "Aborted (core dumped)",
        ]);
        let head = &recs[0][0];
        assert!(head.detail.as_deref().unwrap().starts_with("what(): [PG ID 0"), "{:?}", head.detail);
        // The what() line is matched on its own: it is the line that names the error.
        assert!(recs[0][1].msg.starts_with("what():") && recs[0][1].role == Role::Match);
        // An error by nature, listed when no rule reads it (the engine's unexplained-cause).
        assert_eq!(recs[0][1].origin.level, Some(Level::Error));
        assert!(!recs[0][1].flags.continuation);
        assert_eq!(recs.len(), 2);
    }

    #[test]
    fn crash_block_names_its_libraries() {
        let recs = run(&[
            "[node1:12345] *** Process received signal ***",
            "[node1:12345] Signal: Bus error (7)",
            "[node1:12345] Signal code: Non-existant physical address (2)",
            "[node1:12345] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x42520)[0x7f]",
            "[node1:12345] [ 1] /usr/lib/x86_64-linux-gnu/libnccl.so.2(+0x5f2a1)[0x7f]",
            "[node1:12345] *** End of error message ***",
        ]);
        assert_eq!(recs.len(), 1);
        let head = &recs[0][0];
        assert!(head.msg.contains("Signal: Bus error (7)"), "{}", head.msg);
        assert!(head.msg.contains("libnccl.so"), "{}", head.msg);
        assert_eq!(head.origin.pid, Some(12345));
    }

    #[test]
    fn wrapped_c10_header_joins_its_body() {
        let recs = run(&[
            "[W1129 13:54:38.758212116 ProcessGroupNCCL.cpp:1496] Warning:",
            "WARNING: destroy_process_group() was not called before program exit, which can leak resources.",
        ]);
        assert_eq!(recs.len(), 1);
        assert!(recs[0][0].msg.ends_with("which can leak resources."));
    }

    #[test]
    fn pasted_wrap_joins_the_rest_of_a_c10_message() {
        // torch's destructor warning (ProcessGroupNCCL.cpp, 2.4+) as a terminal paste wraps it.
        let recs = run(&[
            "[rank3]:[W0501 08:00:00.123456789 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called before program",
            "exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())",
            "[rank2]:[W0501 08:00:00.2 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called before program",
            "Something else entirely",
        ]);
        let m: Vec<_> = recs.iter().flat_map(|r| matched(r)).map(|(t, _)| t.to_string()).collect();
        assert!(m[0].ends_with("before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())"), "{m:?}");
        // A line that does not go on mid-sentence stays a message of its own.
        assert!(m[1].ends_with("was not called before program"), "{m:?}");
        assert_eq!(m[2], "Something else entirely", "{m:?}");
        assert_eq!(m.len(), 3, "{m:?}");
        // Broken at a space (the space kept), the rest may start in upper case.
        let recs = run(&[
            "[rank3]:[E909 09:55:46.1 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 7, last enqueued ",
            "NCCL work: 9, last completed NCCL work: 6.",
        ]);
        let m: Vec<_> = recs.iter().flat_map(|r| matched(r)).map(|(t, _)| t.to_string()).collect();
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].ends_with("last enqueued NCCL work: 9, last completed NCCL work: 6."), "{m:?}");
    }

    #[test]
    fn a_glibc_heap_abort_after_an_unfinished_c10_warning_stays_its_own_line() {
        // Falcon#12: the heartbeat monitor's warning ends in a word, then a process aborts.
        let recs = run(&[
            "[rank2]:[W724 19:26:07.252310287 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0(default_pg) Rank 2] Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: failed to recv, got 0 bytes",
            "malloc_consolidate(): unaligned fastbin chunk detected",
        ]);
        let m: Vec<_> = recs.iter().flat_map(|r| matched(r)).map(|(t, _)| t.to_string()).collect();
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[1], "malloc_consolidate(): unaligned fastbin chunk detected", "{m:?}");
    }

    #[test]
    fn pasted_wrap_inside_a_terminate_record() {
        let recs = run(&[
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making",
            "progress in monitoring enqueued collectives.",
            "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1234 (most recent call first):",
        ]);
        let m: Vec<_> = recs.iter().flat_map(|r| matched(r)).map(|(t, _)| t.to_string()).collect();
        assert!(m.iter().any(|t| t.ends_with("without making progress in monitoring enqueued collectives.")), "{m:?}");
    }

    #[test]
    fn cut_traceback_is_kept_as_incomplete() {
        let recs = run(&["Traceback (most recent call last):", "  File \"t.py\", line 1, in f"]);
        assert!(recs[0][0].flags.incomplete);
        assert_eq!(recs[0][0].role, Role::Match);
    }

    /// A paste cut after the innermost frame's `raise` (LLaMA-Factory #8323's log ends there): the
    /// raise line stands for the exception line it would have printed.
    #[test]
    fn cut_traceback_ending_in_a_raise_reads_the_raise() {
        let recs = run(&[
            "[rank0]: Traceback (most recent call last):",
            "[rank0]:   File \"/x/launcher.py\", line 23, in <module>",
            "[rank0]:     launch()",
            "[rank0]:   File \"/x/loader.py\", line 272, in _get_preprocessed_dataset",
            "[rank0]:     raise RuntimeError(\"Cannot find valid samples, check `data/README.md` for the data format.\")",
        ]);
        let head = recs[0].iter().find(|p| p.role == Role::Match).unwrap();
        assert_eq!(head.msg, "RuntimeError: Cannot find valid samples, check `data/README.md` for the data format.");
        assert!(head.raw.contains("raise RuntimeError(") && head.flags.uncaught && head.flags.incomplete);
        assert!(head.detail.as_deref().is_some_and(|d| d.contains("loader.py")), "{:?}", head.detail);
        assert_eq!(raised("raise ValueError(f'bad {x}')").as_deref(), Some("ValueError: bad {x}"));
        assert_eq!(raised("raise errors.DistError").as_deref(), Some("errors.DistError"));
        for not in ["raise", "raise exc", "raise RuntimeError(msg) from e", "return RuntimeError('x')"] {
            assert_eq!(raised(not), None, "{not}");
        }
    }
}
