//! Where lines come from: files, folders of per-rank logs, stdin, gzip and zstd (by magic bytes),
//! tar and zip archives (the files inside, see `archive`).
//! Everything is streamed; a line longer than `MAX_LINE` is cut and the cut is reported.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use super::archive::{Limits, Member, Spool, LIMITS};
use crate::model::headings;

/// Longest line kept; the rest of a longer line is skipped (and noted).
pub const MAX_LINE: usize = 1 << 20;

/// One input to read: a file, stdin, or text held in memory (fixtures, tests), or raw bytes held
/// in memory (fuzzing, property tests: anything a file could hold, compressed or not), or a file
/// inside an archive.
#[derive(Debug, Clone)]
pub enum Input {
    File(PathBuf),
    Stdin,
    Memory { name: String, text: String },
    Bytes { name: String, bytes: std::sync::Arc<[u8]> },
    Member(Arc<Member>),
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => printable(&p.display().to_string()),
            Input::Stdin => "<stdin>".into(),
            Input::Memory { name, .. } | Input::Bytes { name, .. } => name.clone(),
            Input::Member(m) => m.name.clone(),
        }
    }
}

/// `s` with its control characters (a file name may hold ESC, BEL, newlines) written as `\u{1b}`,
/// so that a name can neither drive the terminal nor break a line of a report.
pub(super) fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// What `expand` found: the inputs to read, and notes on what it skipped or could not read (for
/// `Analysis::notes`).
#[derive(Debug, Default)]
pub struct Expanded {
    pub inputs: Vec<Input>,
    pub notes: Vec<String>,
    /// Parts of what was given that could not be read whole (a cut archive, a member not read,
    /// a binary file): a verdict cannot be `clean` or `benign` past them.
    pub unread: Vec<String>,
    /// Paths given that could not be read at all (missing, unreadable, a folder without logs),
    /// each with why; only `expand_all` returns any.
    pub failed: Vec<String>,
}

/// Bytes of an input's (unpacked) start that `sniff` looks at.
pub const HEAD: usize = 8192;

/// What an input is, from its name and first bytes (after gzip or zstd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    Text,
    Empty,
    /// Mostly NUL or non-text bytes in no known format: a zero-filled log after a crash, or junk.
    /// Read anyway (NUL bytes are dropped), with a note.
    NotText,
    Tar,
    Zip,
    /// A Python pickle (PyTorch Flight Recorder dumps are pickles). Not a log.
    Pickle,
    /// A known binary format, by its magic number: not read.
    Binary(&'static str),
    /// A document epdoctor wrote (a report, repro's cells.json): not read again.
    Own(&'static str),
}

/// Magic numbers of binary files found next to logs.
const MAGIC: &[(&[u8], &str)] = &[
    (b"\x7fELF", "ELF binary or core dump"),
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"\x93NUMPY", "NumPy array"),
    (b"\x89HDF\r\n\x1a\n", "HDF5 file"),
    (b"SQLite format 3\0", "SQLite database"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"\xfd7zXZ\0", "xz data"),
    (b"BZh91AY&SY", "bzip2 data"),
    (b"PK\x03\x04", "zip data (a PyTorch checkpoint, a wheel?)"),
    (b"\x50\xed\x55\xba", "CUDA fat binary"),
];

/// What `head` (an input's first unpacked bytes) and its `name` say it is. One place to teach a
/// new format. A pickle is passed on: `explain` reads Flight Recorder dumps (src/flight).
pub fn sniff(name: &str, head: &[u8]) -> Content {
    if head.is_empty() {
        return Content::Empty;
    }
    if head.len() >= 262 && &head[257..262] == b"ustar" {
        return Content::Tar;
    }
    if (head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06"))
        && name.to_ascii_lowercase().ends_with(".zip")
    {
        return Content::Zip;
    }
    if let [0x80, 2..=5, ..] = head {
        return Content::Pickle;
    }
    if let Some((_, kind)) = MAGIC.iter().find(|(m, _)| head.starts_with(m)) {
        return Content::Binary(kind);
    }
    if let Some(kind) = own_output(head) {
        return Content::Own(kind);
    }
    // Bytes no log holds: NUL and other controls (tab, newline, CR, ESC, form feed are fine), and
    // invalid UTF-8.
    let odd_controls =
        head.iter().filter(|&&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x1b | 0x0c) || b == 0x7f).count();
    let invalid: usize = head.utf8_chunks().map(|c| c.invalid().len()).sum();
    // The head may end inside a character: at most 3 bytes of that are not a sign of binary.
    if (odd_controls + invalid.saturating_sub(3)) * 10 > head.len() {
        return Content::NotText;
    }
    Content::Text
}

/// Which of epdoctor's own documents `head` starts, if any (its first line or JSON keys).
fn own_output(head: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(&head[..head.len().min(512)]);
    let first = text.lines().next().unwrap_or("");
    if first == headings::REPRO_MD {
        Some("epdoctor repro's report.md")
    } else if first == headings::REPORT_MD {
        Some("an epdoctor report")
    } else if first.starts_with(headings::EXPLAIN_MD) {
        Some("epdoctor explain's Markdown")
    } else if first
        .strip_prefix("verdict: ")
        .is_some_and(|v| ["clean ", "benign ", "actionable ", "unknown "].iter().any(|w| v.starts_with(w)))
    {
        Some("epdoctor explain's text")
    } else if OWN_JSON.is_match(&text) {
        // serde writes the model's and the repro run's first two fields in this order.
        Some(if text.contains("\"verdict\"") { "epdoctor explain's JSON" } else { "epdoctor repro's cells.json" })
    } else {
        None
    }
}

static OWN_JSON: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"^\s*\{\s*"schema_version":\s*\d+,\s*"tool_version":\s*""#).unwrap()
});

/// Expand the paths a user gave: `-` is stdin, a folder is every regular file below it (sorted,
/// links to folders not followed, so a link loop cannot trap us; hidden files and folders, and
/// documents epdoctor wrote, skipped), an archive is the files inside it, none at all is stdin.
/// Binary files are skipped and empty ones noted.
/// The first path that cannot be read is an error.
pub fn expand(paths: &[PathBuf]) -> Result<Expanded> {
    let x = expand_with(paths, &LIMITS)?;
    if !x.failed.is_empty() {
        anyhow::bail!("{}", x.failed.join("; "));
    }
    Ok(x)
}

/// `expand`, going on past paths that cannot be read: they are listed in `failed` (an error only
/// when nothing at all can be read), as ripgrep goes on past a missing file.
pub fn expand_all(paths: &[PathBuf]) -> Result<Expanded> {
    expand_with(paths, &LIMITS)
}

pub(super) fn expand_with(paths: &[PathBuf], limits: &Limits) -> Result<Expanded> {
    if paths.is_empty() {
        return Ok(Expanded { inputs: vec![Input::Stdin], ..Default::default() });
    }
    let mut x = Expander::new(limits);
    let mut failed = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            x.out.push(Input::Stdin);
        } else if let Err(e) = x.expand_path(p) {
            failed.push(format!("{e:#}"));
        }
    }
    let mut x = x.finish();
    if x.inputs.is_empty() {
        let why = failed.iter().chain(&x.notes).cloned().collect::<Vec<_>>().join("; ");
        if failed.is_empty() {
            anyhow::bail!("nothing to read: {why}");
        }
        anyhow::bail!("{why}");
    }
    x.failed = failed;
    Ok(x)
}

/// Where a file's bytes come from while `expand` looks at it.
pub(super) enum Src {
    File(PathBuf),
    Member(Arc<Member>),
}

impl Src {
    fn name(&self) -> String {
        match self {
            Src::File(p) => printable(&p.display().to_string()),
            Src::Member(m) => m.name.clone(),
        }
    }

    /// Its bytes, as stored (gzip, zstd still packed).
    pub(super) fn raw(&self) -> io::Result<Box<dyn Read + Send>> {
        Ok(match self {
            Src::File(p) => Box::new(File::open(p)?),
            Src::Member(m) => m.reader(),
        })
    }

    fn into_input(self) -> Input {
        match self {
            Src::File(p) => Input::File(p),
            Src::Member(m) => Input::Member(m),
        }
    }
}

/// Why something was not read, as the notes group it.
pub(super) const HIDDEN: &str = "skipped hidden files and folders";
const OWN: &str = "skipped what epdoctor wrote itself";
const BINARY: &str = "not read, not a log";
const EMPTY: &str = "empty (no lines: did that process write anything?)";
const NOT_TEXT: &str = "read, though it does not look like text (mostly NUL or binary bytes; NUL bytes dropped)";
const NESTED: &str = "not opened, an archive inside an archive inside an archive";
pub(super) const BUDGET: &str = "not read, past the limit on unpacked archive bytes";

/// The state of one `expand`: inputs so far, what was skipped, the spool of unpacked members.
pub(super) struct Expander<'l> {
    pub(super) limits: &'l Limits,
    pub(super) out: Vec<Input>,
    /// Why -> what, for the notes.
    pub(super) skipped: BTreeMap<&'static str, Vec<String>>,
    pub(super) notes: Vec<String>,
    pub(super) unread: Vec<String>,
    pub(super) spool: Option<Spool>,
    /// Unpacked archive bytes promised so far (spooled or read later from a zip).
    pub(super) unpacked: u64,
}

impl<'l> Expander<'l> {
    fn new(limits: &'l Limits) -> Self {
        Expander {
            limits,
            out: Vec::new(),
            skipped: BTreeMap::new(),
            notes: Vec::new(),
            unread: Vec::new(),
            spool: None,
            unpacked: 0,
        }
    }

    pub(super) fn skip(&mut self, why: &'static str, what: String) {
        self.skipped.entry(why).or_default().push(what);
    }

    fn walk(&mut self, dir: &Path) -> io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<io::Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let ft = e.file_type()?;
            let path = e.path();
            if is_hidden(&e.file_name().to_string_lossy()) {
                self.skip(HIDDEN, printable(&path.display().to_string()));
            } else if ft.is_dir() {
                self.walk(&path)?;
            } else if ft.is_file() || (ft.is_symlink() && path.metadata().is_ok_and(|m| m.is_file())) {
                self.add(Src::File(path), 0, true);
            }
        }
        Ok(())
    }

    /// Look at one file (`depth`: how many archives it is inside; `found`: met in a folder or an
    /// archive, not named by the user) and keep it, open it as an archive, or skip it.
    pub(super) fn add(&mut self, src: Src, depth: usize, found: bool) {
        let name = src.name();
        // A pipe (`<(cmd)`, /dev/stdin) or a device: looking at its start would consume it.
        if let Src::File(p) = &src {
            if !std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
                return self.out.push(src.into_input());
            }
        }
        let head = match head_of(&src) {
            Ok(h) => h,
            // Unreadable or corrupt from the start: the engine reads it and says what is wrong.
            Err(_) => return self.out.push(src.into_input()),
        };
        let content = sniff(&name, &head);
        self.take(src, name, content, depth, found);
    }

    /// A note on a part of the input that was not read: it also keeps the verdict from `clean`.
    pub(super) fn unread(&mut self, note: String) {
        self.unread.push(note.clone());
        self.notes.push(note);
    }

    /// Act on what `sniff` said of `src`.
    pub(super) fn take(&mut self, src: Src, name: String, content: Content, depth: usize, found: bool) {
        if let Some((why, what)) = skip_reason(&name, content, depth, found) {
            return self.skip(why, what);
        }
        match content {
            Content::Tar => self.tar(&src, &name, depth),
            Content::Zip => self.zip(src, &name, depth),
            _ => {
                match content {
                    Content::Empty => self.skip(EMPTY, name),
                    Content::NotText => {
                        self.unread.push(format!("{name}: does not look like text"));
                        self.skip(NOT_TEXT, name)
                    }
                    _ => {}
                }
                self.out.push(src.into_input());
            }
        }
    }

    /// One path the user gave (not `-`).
    fn expand_path(&mut self, p: &Path) -> Result<()> {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            let before = (self.out.len(), self.skipped.values().map(Vec::len).sum::<usize>());
            self.walk(p).with_context(|| format!("cannot read folder {}", p.display()))?;
            if (self.out.len(), self.skipped.values().map(Vec::len).sum::<usize>()) == before {
                anyhow::bail!("folder {} holds no log files", p.display());
            }
        } else {
            // (Not a pipe: opening one and closing it again would lose its writer.)
            if meta.is_file() {
                File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            }
            self.add(Src::File(p.to_path_buf()), 0, false);
        }
        Ok(())
    }

    fn finish(self) -> Expanded {
        let mut notes = Vec::new();
        for (why, what) in &self.skipped {
            const SHOWN: usize = 10;
            let mut list = what.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
            if what.len() > SHOWN {
                list += &format!(" and {} more", what.len() - SHOWN);
            }
            notes.push(format!("{why}: {list}"));
        }
        notes.extend(self.notes);
        Expanded { inputs: self.out, notes, unread: self.unread, failed: Vec::new() }
    }
}

/// Why `content` (of `name`, inside `depth` archives, `found` in a folder or an archive rather than
/// named by the user) is not read, if it is not: the note's group and the entry in it.
pub(super) fn skip_reason(name: &str, content: Content, depth: usize, found: bool) -> Option<(&'static str, String)> {
    Some(match content {
        Content::Tar | Content::Zip if depth > 1 => (NESTED, name.to_string()),
        Content::Binary(kind) => (BINARY, format!("{name} ({kind})")),
        // Named by the user: read as they asked.
        Content::Own(kind) if found => (OWN, format!("{name} ({kind})")),
        _ => return None,
    })
}

/// `.git`, `.venv`, `.DS_Store`, macOS's `__MACOSX` in zips; not `.` and `..` themselves.
pub(super) fn is_hidden(part: &str) -> bool {
    (part.starts_with('.') && part != "." && part != "..") || part == "__MACOSX"
}

/// The first `HEAD` unpacked bytes of `src`.
fn head_of(src: &Src) -> io::Result<Vec<u8>> {
    let mut r = decoded(src.raw()?)?;
    let mut head = Vec::with_capacity(HEAD);
    (&mut r).take(HEAD as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// `raw` unpacked, gzip or zstd chosen by magic bytes; anything else as it is.
pub(super) fn decoded(raw: Box<dyn Read + Send>) -> io::Result<Box<dyn BufRead + Send>> {
    let mut br = BufReader::with_capacity(256 * 1024, raw);
    let head = loop {
        match br.fill_buf() {
            Ok(h) => break h,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(256 * 1024, flate2::bufread::MultiGzDecoder::new(br)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let dec = zstd::stream::read::Decoder::with_buffer(br)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start zstd decoding: {e}")))?;
        Box::new(BufReader::with_capacity(256 * 1024, dec))
    } else {
        Box::new(br)
    })
}

/// A byte-line reader over any input, with decompression chosen by magic bytes.
pub struct LineReader {
    inner: Box<dyn BufRead + Send>,
    buf: Vec<u8>,
    /// Bytes of `inner`'s buffer handed out by the last `next_line` and consumed on the next call.
    pending: usize,
    pub bytes_read: u64,
    limit: Option<u64>,
    pub cut_lines: u64,
    pub hit_limit: bool,
}

pub fn open(input: &Input, limit: Option<u64>) -> Result<LineReader> {
    let raw: Box<dyn Read + Send> = match input {
        Input::File(p) => Box::new(File::open(p).with_context(|| format!("cannot open {}", p.display()))?),
        Input::Stdin => Box::new(io::stdin()),
        Input::Memory { text, .. } => Box::new(io::Cursor::new(text.clone().into_bytes())),
        Input::Bytes { bytes, .. } => Box::new(io::Cursor::new(bytes.clone())),
        Input::Member(m) => m.reader(),
    };
    let inner = decoded(raw).with_context(|| format!("cannot read {}", input.name()))?;
    Ok(LineReader {
        inner,
        buf: Vec::with_capacity(4096),
        pending: 0,
        bytes_read: 0,
        limit,
        cut_lines: 0,
        hit_limit: false,
    })
}

/// What reading one input came to, beside its lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadStats {
    pub bytes_read: u64,
    pub cut_lines: u64,
    pub hit_limit: bool,
}

impl LineReader {
    pub fn stats(&self) -> ReadStats {
        ReadStats { bytes_read: self.bytes_read, cut_lines: self.cut_lines, hit_limit: self.hit_limit }
    }

    /// Bytes that may still be read under `limit`.
    fn remaining(&self) -> usize {
        self.limit.map_or(usize::MAX, |l| usize::try_from(l.saturating_sub(self.bytes_read)).unwrap_or(usize::MAX))
    }

    /// The next line without its terminator; `None` at the end. A line over `MAX_LINE` bytes is
    /// returned cut, and the remainder is skipped without being held in memory.
    pub fn next_line(&mut self) -> io::Result<Option<&[u8]>> {
        if self.pending > 0 {
            self.inner.consume(self.pending);
            self.pending = 0;
        }
        self.buf.clear();
        if let Some(limit) = self.limit {
            if self.bytes_read >= limit {
                self.hit_limit = true;
                return Ok(None);
            }
        }
        // Fast path: the whole line, terminator included, is in the reader's buffer. Hand out a
        // slice of that buffer (no copy) and consume it on the next call.
        let rem = self.remaining();
        let found = loop {
            match self.inner.fill_buf() {
                Ok(avail) => break memchr::memchr(b'\n', &avail[..avail.len().min(rem)]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if let Some(i) = found.filter(|&i| i < MAX_LINE) {
            self.pending = i + 1;
            self.bytes_read += (i + 1) as u64;
            // The same buffer again: `fill_buf` reads nothing while it holds unconsumed bytes.
            let avail = self.inner.fill_buf()?;
            return Ok(Some(trim_eol(&avail[..i])));
        }
        // A line that spans buffer refills (or the last line, without a terminator): gather it.
        let mut cut = false;
        loop {
            let rem = self.remaining();
            if rem == 0 {
                // The limit falls inside this line (say, a stdin that never sends a newline): stop
                // there, without the partial line and without reading on.
                self.hit_limit = true;
                self.buf.clear();
                return Ok(None);
            }
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if self.buf.is_empty() && !cut {
                    return Ok(None);
                }
                break;
            }
            let avail = &avail[..avail.len().min(rem)];
            let (take, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            let room = MAX_LINE.saturating_sub(self.buf.len());
            if !cut {
                let keep = take.min(room);
                self.buf.extend_from_slice(&avail[..keep]);
                if keep < take {
                    cut = true;
                }
            }
            self.inner.consume(take);
            self.bytes_read += take as u64;
            if done {
                break;
            }
        }
        if cut {
            self.cut_lines += 1;
        }
        Ok(Some(trim_eol(&self.buf)))
    }
}

/// `line` without its trailing `\n` and `\r` bytes.
pub(super) fn trim_eol(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    line
}

/// Whether `bytes` is printable ASCII and tabs only, i.e. its own `clean_line`. Branch-free over
/// the whole line so that it vectorizes: most log lines are clean and take this test.
pub fn is_clean(bytes: &[u8]) -> bool {
    // Printable is 0x20..=0x7e: `b - 0x20` (wrapping) below 0x5f.
    bytes.iter().fold(0u8, |acc, &b| acc | u8::from(b.wrapping_sub(0x20) >= 0x5f && b != b'\t')) == 0
}

/// Lossy UTF-8, with ANSI escape sequences, other control characters and stray CRs removed.
pub fn clean_line(bytes: &[u8]) -> String {
    if is_clean(bytes) {
        // Plain printable ASCII: no copy through the lossy decoder needed.
        return String::from_utf8(bytes.to_vec()).unwrap_or_default();
    }
    let s = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ params final-byte; OSC: ESC ] ... BEL or ESC \ ; otherwise drop ESC + one char.
            match chars.peek() {
                Some('[') => {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    chars.next();
                    while let Some(d) = chars.next() {
                        if d == '\u{7}' {
                            break;
                        }
                        if d == '\u{1b}' {
                            chars.next();
                            break;
                        }
                    }
                }
                Some(_) => {
                    chars.next();
                }
                None => {}
            }
        } else if c == '\t' || !c.is_control() {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(bytes: Vec<u8>) -> (Vec<String>, u64) {
        let mut r = LineReader {
            inner: Box::new(io::Cursor::new(bytes)),
            buf: Vec::new(),
            pending: 0,
            bytes_read: 0,
            limit: None,
            cut_lines: 0,
            hit_limit: false,
        };
        let mut v = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            v.push(clean_line(l));
        }
        (v, r.cut_lines)
    }

    fn lines_with_capacity(bytes: &[u8], cap: usize, limit: Option<u64>) -> (Vec<Vec<u8>>, u64, u64, bool) {
        let mut r = LineReader {
            inner: Box::new(io::BufReader::with_capacity(cap, io::Cursor::new(bytes.to_vec()))),
            buf: Vec::new(),
            pending: 0,
            bytes_read: 0,
            limit,
            cut_lines: 0,
            hit_limit: false,
        };
        let mut v = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            v.push(l.to_vec());
        }
        (v, r.cut_lines, r.bytes_read, r.hit_limit)
    }

    #[test]
    fn same_lines_whatever_the_buffer_size() {
        // Lines inside one buffer are handed out as slices, lines across refills are gathered:
        // both must give the same lines, byte counts and limit behaviour.
        let text = b"a\r\n\r\nbb\n\n\rccc\r\r\nd\x1b[0m\nlast without newline".repeat(5);
        let want = lines_with_capacity(&text, 1 << 16, None);
        assert_eq!(want.0.len(), 31);
        assert_eq!(want.0[..7], [&b"a"[..], b"", b"bb", b"", b"\rccc", b"d\x1b[0m", b"last without newlinea"]);
        assert_eq!(want.2, text.len() as u64);
        for cap in [1, 2, 3, 5, 8, 13] {
            assert_eq!(lines_with_capacity(&text, cap, None), want, "capacity {cap}");
            for limit in [0, 1, 7, 40] {
                assert_eq!(
                    lines_with_capacity(&text, cap, Some(limit)),
                    lines_with_capacity(&text, 1 << 16, Some(limit)),
                    "capacity {cap}, limit {limit}"
                );
            }
        }
    }

    #[test]
    fn is_clean_is_printable_ascii_and_tab() {
        for b in 0..=255u8 {
            let old = !(b < 0x20 && b != b'\t' || b >= 0x80 || b == 0x7f);
            assert_eq!(is_clean(&[b]), old, "byte {b:#x}");
            assert_eq!(is_clean(&[b'x'; 40].iter().copied().chain([b]).collect::<Vec<_>>()), old);
        }
        assert!(is_clean(b""));
    }

    #[test]
    fn strips_crlf_and_ansi() {
        let (v, _) = lines_of(b"\x1b[31mred\x1b[0m line\r\nplain\n\nlast".to_vec());
        assert_eq!(v, vec!["red line", "plain", "", "last"]);
    }

    #[test]
    fn invalid_utf8_is_lossy() {
        let (v, _) = lines_of(b"ok \xff\xfe end\n".to_vec());
        assert_eq!(v[0], "ok \u{fffd}\u{fffd} end");
    }

    #[test]
    fn huge_line_is_cut_and_counted() {
        let mut b = vec![b'a'; MAX_LINE + 10];
        b.extend_from_slice(b"\nnext\n");
        let (v, cut) = lines_of(b);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].len(), MAX_LINE);
        assert_eq!(v[1], "next");
        assert_eq!(cut, 1);
    }

    #[test]
    fn sniff_tells_logs_from_binaries() {
        assert_eq!(sniff("x", b""), Content::Empty);
        assert_eq!(sniff("x", b"\x1b[31mNCCL WARN\x1b[0m \xe2\x9c\x93 ok\r\n\tnext\n"), Content::Text);
        assert_eq!(sniff("libnccl.so.2", b"\x7fELF\x02\x01\x01\0\0\0"), Content::Binary("ELF binary or core dump"));
        assert_eq!(sniff("a.png", b"\x89PNG\r\n\x1a\n\0\0"), Content::Binary("PNG image"));
        assert_eq!(sniff("fr_trace_0", b"\x80\x04\x95\x10\0\0\0"), Content::Pickle);
        assert_eq!(
            sniff("model.pt", b"PK\x03\x04\x14\0"),
            Content::Binary("zip data (a PyTorch checkpoint, a wheel?)")
        );
        assert_eq!(sniff("logs.ZIP", b"PK\x03\x04\x14\0"), Content::Zip);
        let mut tar = vec![0u8; 512];
        tar[257..263].copy_from_slice(b"ustar\0");
        assert_eq!(sniff("x", &tar), Content::Tar);
        assert_eq!(sniff("x", &[0u8; 4096]), Content::NotText);
        assert_eq!(sniff("x", &(0..=255u8).cycle().take(4096).collect::<Vec<_>>()), Content::NotText);
        // A head cut inside a UTF-8 character is still text.
        assert_eq!(sniff("x", "ok \u{2713}".as_bytes().split_last().unwrap().1), Content::Text);
    }

    #[test]
    fn folders_skip_hidden_and_own_files_and_say_so() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        for dir in [".git/objects", ".venv/lib", "run/cells/c0"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join(".git/objects/ab"), "NCCL WARN in git\n").unwrap();
        std::fs::write(root.join(".venv/lib/x.py"), "NCCL WARN in venv\n").unwrap();
        std::fs::write(root.join(".nccl.conf"), "NCCL_DEBUG=INFO\n").unwrap();
        std::fs::write(root.join("run/report.md"), format!("{}\n\nNCCL WARN quoted\n", headings::REPRO_MD)).unwrap();
        std::fs::write(root.join("run/cells/c0/rank0.log"), "vm:1:2 [0] NCCL INFO hi\n").unwrap();
        std::fs::write(root.join("rank1.log"), "").unwrap();
        let x = expand(&[root.to_path_buf()]).unwrap();
        let names: Vec<String> = x.inputs.iter().map(Input::name).collect();
        let p = |s: &str| root.join(s).display().to_string();
        assert_eq!(names, [p("rank1.log"), p("run/cells/c0/rank0.log")]);
        let notes = x.notes.join("\n");
        assert!(
            notes.contains(&format!("hidden files and folders: {}, {}, {}", p(".git"), p(".nccl.conf"), p(".venv"))),
            "{notes}"
        );
        assert!(
            notes.contains(&format!("epdoctor wrote itself: {} (epdoctor repro's report.md)", p("run/report.md"))),
            "{notes}"
        );
        assert!(
            notes.contains(&format!("empty (no lines: did that process write anything?): {}", p("rank1.log"))),
            "{notes}"
        );
        // Named directly, a hidden file or a report is read; a binary is not, and alone it is an error.
        let x = expand(&[root.join(".nccl.conf"), root.join("run/report.md")]).unwrap();
        assert_eq!(x.inputs.len(), 2);
        std::fs::write(root.join("core"), b"\x7fELF\x02\x01\x01\0").unwrap();
        let e = expand(&[root.join("core")]).unwrap_err().to_string();
        assert!(e.contains("nothing to read") && e.contains(&p("core")) && e.contains("ELF"), "{e}");
    }
}
