//! One large plain file read as chunks at line boundaries, so that several threads can scan it
//! (`Engine::scan_chunked`). Chunk `i` holds the lines that start in bytes `[i * size, (i + 1) *
//! size)`; a line that crosses the end is read on to its newline. Its lines are the ones
//! `LineReader::next_line` returns for the same bytes: the terminator and trailing CRs trimmed, a
//! line over `MAX_LINE` bytes cut (and counted) the same way.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::input::{trim_eol, Input, MAX_LINE};

/// Bytes read per step while looking for the end of a chunk's last line.
const STEP: usize = 64 * 1024;

/// Where the bytes come from: a file (read with `pread`, shared by the threads) or memory.
pub enum Source {
    File(File),
    Memory(std::sync::Arc<[u8]>),
}

impl Source {
    /// `input` if it can be read in chunks: a plain (not gzip or zstd) file or memory input, and
    /// its length. Anything else (stdin, archives, compressed files) is read by `LineReader`.
    pub fn of(input: &Input) -> Option<(Source, u64)> {
        let (src, len) = match input {
            Input::File(p) => {
                let f = File::open(p).ok()?;
                let len = f.metadata().ok().filter(|m| m.is_file())?.len();
                (Source::File(f), len)
            }
            Input::Memory { text, .. } => (Source::Memory(text.as_bytes().into()), text.len() as u64),
            Input::Bytes { bytes, .. } => (Source::Memory(bytes.clone()), bytes.len() as u64),
            Input::Stdin | Input::Member(_) => return None,
        };
        let mut head = [0u8; 4];
        let n = src.read_at(0, &mut head).ok()?;
        let head = &head[..n];
        // What `input::decoded` would unpack.
        let packed = head.starts_with(&[0x1f, 0x8b]) || head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
        (!packed).then_some((src, len))
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::File(f) => loop {
                match f.read_at(buf, off) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => return r,
                }
            },
            Source::Memory(m) => {
                let start = usize::try_from(off).unwrap_or(usize::MAX).min(m.len());
                let n = buf.len().min(m.len() - start);
                buf[..n].copy_from_slice(&m[start..start + n]);
                Ok(n)
            }
        }
    }

    /// `buf` made bytes `[off, off + n)` (fewer at the end of the file). A recycled buffer
    /// already that long is not zeroed first: over a large file the zeroing cost as much as the
    /// first stage of the prefilter.
    fn overwrite(&self, off: u64, n: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        if buf.len() < n {
            buf.resize(n, 0);
        }
        let mut got = 0;
        while got < n {
            let k = self.read_at(off + got as u64, &mut buf[got..n])?;
            if k == 0 {
                break;
            }
            got += k;
        }
        buf.truncate(got);
        Ok(())
    }

    /// Append bytes `[off, off + n)` (fewer at the end of the file) to `buf`; how many were read.
    fn append(&self, off: u64, n: usize, buf: &mut Vec<u8>) -> io::Result<usize> {
        let at = buf.len();
        buf.resize(at + n, 0);
        let mut got = 0;
        while got < n {
            let k = self.read_at(off + got as u64, &mut buf[at + got..])?;
            if k == 0 {
                break;
            }
            got += k;
        }
        buf.truncate(at + got);
        Ok(got)
    }
}

/// The lines of one chunk.
#[derive(Default)]
pub struct Chunk {
    buf: Vec<u8>,
    /// Each line as kept (terminator trimmed): start and length in `buf`.
    lines: Vec<(u32, u32)>,
    /// Lines over `MAX_LINE` bytes, cut.
    pub cut: u64,
}

impl Chunk {
    /// Its buffer, for the next chunk read (a buffer used before costs no page faults).
    pub fn into_buf(self) -> Vec<u8> {
        self.buf
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Line `j` of the chunk, as `LineReader::next_line` returns it.
    pub fn line(&self, j: usize) -> &[u8] {
        let (s, n) = self.lines[j];
        trim_eol(&self.buf[s as usize..(s + n) as usize])
    }
}

/// Chunk `i` of `size` bytes of a source of `len` bytes.
pub fn read(src: &Source, len: u64, i: u64, size: u64, buf: Vec<u8>) -> io::Result<Chunk> {
    let start = i * size;
    let end = (start + size).min(len);
    let mut ch = Chunk { buf, ..Chunk::default() };
    if start >= len {
        ch.buf.clear();
        return Ok(ch);
    }
    // The byte before the chunk says whether a line starts at its first byte.
    let from = start.saturating_sub(1);
    src.overwrite(from, (end - from) as usize, &mut ch.buf)?;
    let mut pos = if i == 0 {
        0
    } else {
        match memchr::memchr(b'\n', &ch.buf) {
            Some(k) => k + 1,
            // No line starts in this chunk: a long line crosses it whole.
            None => {
                ch.buf.clear();
                return Ok(ch);
            }
        }
    };
    let limit = ch.buf.len();
    let mut file_off = from + ch.buf.len() as u64;
    while pos < limit {
        let (kept, whole, last) = match memchr::memchr(b'\n', &ch.buf[pos..]) {
            Some(k) => (k + 1, k + 1, false),
            None => {
                let (kept, whole) = finish_last(src, &mut ch.buf, pos, &mut file_off)?;
                (kept, whole, true)
            }
        };
        if whole > MAX_LINE {
            ch.cut += 1;
        }
        ch.lines.push((pos as u32, kept.min(MAX_LINE) as u32));
        if last {
            break;
        }
        pos += kept;
    }
    Ok(ch)
}

/// The chunk's last line, which runs past the chunk: read on to its newline or the end of the
/// file, keeping at most `MAX_LINE + 1` of its bytes. Returns the bytes of it in `buf` (from
/// `pos`, terminator included when kept) and its whole length.
fn finish_last(src: &Source, buf: &mut Vec<u8>, pos: usize, file_off: &mut u64) -> io::Result<(usize, usize)> {
    let mut whole = buf.len() - pos;
    loop {
        let at = buf.len();
        let got = src.append(*file_off, STEP, buf)?;
        *file_off += got as u64;
        if got == 0 {
            return Ok((buf.len() - pos, whole));
        }
        let nl = memchr::memchr(b'\n', &buf[at..]);
        whole += nl.map_or(got, |k| k + 1);
        let held = buf.len() - pos;
        if let Some(k) = nl {
            buf.truncate(at + k + 1);
            let kept = (buf.len() - pos).min(MAX_LINE + 1);
            buf.truncate(pos + kept);
            return Ok((kept, whole));
        }
        if held > MAX_LINE + 1 {
            // Keep only what a cut line shows; read on for its end.
            buf.truncate(pos + MAX_LINE + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk size gives the lines (and cuts) that `LineReader` gives.
    fn same_as_reader(bytes: &[u8], size: u64) {
        let input = Input::Bytes { name: "t".into(), bytes: bytes.into() };
        let mut r = super::super::open(&input, None).unwrap();
        let mut want = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            want.push(l.to_vec());
        }
        let (src, len) = Source::of(&input).unwrap();
        let (mut got, mut cut) = (Vec::new(), 0);
        // Each chunk read into the buffer of the one before, with stale bytes after its end.
        let mut buf = Vec::new();
        for i in 0..len.div_ceil(size).max(1) {
            let ch = read(&src, len, i, size, buf).unwrap();
            cut += ch.cut;
            got.extend((0..ch.len()).map(|j| ch.line(j).to_vec()));
            buf = ch.into_buf();
            buf.extend(b"stale\nbytes\n".repeat(i as usize % 3));
        }
        assert_eq!(got.len(), want.len(), "chunk size {size}");
        assert!(got == want, "chunk size {size}");
        assert_eq!(cut, r.cut_lines, "chunk size {size}");
    }

    #[test]
    fn chunks_hold_the_readers_lines_whatever_the_size() {
        let mut text = Vec::new();
        for i in 0..300 {
            text.extend(format!("host:{i}:{i} [0] NCCL INFO line {i}{}\r\n", "x".repeat(i % 37)).as_bytes());
            if i % 50 == 0 {
                text.extend(b"\n\n");
            }
        }
        text.extend(b"no newline at the end");
        for size in [1, 2, 7, 64, 100, 333, 4096, 1 << 20] {
            same_as_reader(&text, size);
        }
        same_as_reader(b"", 10);
        same_as_reader(b"\n", 1);
    }

    #[test]
    fn a_line_over_max_line_is_cut_as_the_reader_cuts_it() {
        for extra in [0usize, 1, 2, 5000] {
            let mut text = b"first\n".to_vec();
            text.extend(vec![b'a'; MAX_LINE - 1 + extra]);
            text.extend(b"\nlast\n");
            for size in [1000, 1 << 19, 3 << 20] {
                same_as_reader(&text, size);
            }
            let mut open_end = b"first\n".to_vec();
            open_end.extend(vec![b'b'; MAX_LINE + extra]);
            same_as_reader(&open_end, 1 << 18);
        }
    }

    #[test]
    fn compressed_input_is_left_to_the_reader() {
        let gz = Input::Bytes { name: "t.gz".into(), bytes: vec![0x1f, 0x8b, 8, 0].into() };
        assert!(Source::of(&gz).is_none());
        assert!(Source::of(&Input::Stdin).is_none());
    }
}
