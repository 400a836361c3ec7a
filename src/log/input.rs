//! Where lines come from: files, folders of per-rank logs, stdin, gzip and zstd (by magic bytes).
//! Everything is streamed; a line longer than `MAX_LINE` is cut and the cut is reported.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Longest line kept; the rest of a longer line is skipped (and noted).
pub const MAX_LINE: usize = 1 << 20;

/// One input to read: a file, stdin, or text held in memory (fixtures, tests), or raw bytes held
/// in memory (fuzzing, property tests: anything a file could hold, compressed or not).
#[derive(Debug, Clone)]
pub enum Input {
    File(PathBuf),
    Stdin,
    Memory { name: String, text: String },
    Bytes { name: String, bytes: std::sync::Arc<[u8]> },
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => printable(&p.display().to_string()),
            Input::Stdin => "<stdin>".into(),
            Input::Memory { name, .. } | Input::Bytes { name, .. } => name.clone(),
        }
    }
}

/// `s` with its control characters (a file name may hold ESC, BEL, newlines) written as `\u{1b}`,
/// so that a name can neither drive the terminal nor break a line of a report.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Expand the paths a user gave: `-` is stdin, a folder is every regular file below it (sorted,
/// links to folders not followed, so a link loop cannot trap us), none at all is stdin.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<Input>> {
    if paths.is_empty() {
        return Ok(vec![Input::Stdin]);
    }
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            out.push(Input::Stdin);
            continue;
        }
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            let before = out.len();
            walk(p, &mut out).with_context(|| format!("cannot read folder {}", p.display()))?;
            if out.len() == before {
                anyhow::bail!("folder {} holds no log files", p.display());
            }
        } else {
            File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            out.push(Input::File(p.clone()));
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<Input>) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let ft = e.file_type()?;
        let path = e.path();
        if ft.is_dir() {
            walk(&path, out)?;
        } else if ft.is_file() || (ft.is_symlink() && path.metadata().is_ok_and(|m| m.is_file())) {
            out.push(Input::File(path));
        }
    }
    Ok(())
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
    };
    let mut br = BufReader::with_capacity(256 * 1024, raw);
    let head = br.fill_buf().with_context(|| format!("cannot read {}", input.name()))?;
    let inner: Box<dyn BufRead + Send> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(256 * 1024, flate2::bufread::MultiGzDecoder::new(br)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let dec = zstd::stream::read::Decoder::with_buffer(br)
            .with_context(|| format!("cannot start zstd decoding of {}", input.name()))?;
        Box::new(BufReader::with_capacity(256 * 1024, dec))
    } else {
        Box::new(br)
    };
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

impl LineReader {
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
fn trim_eol(mut line: &[u8]) -> &[u8] {
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
}
