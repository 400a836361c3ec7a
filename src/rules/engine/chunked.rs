//! One large file on every core: its chunks (`log::chunks`) are read, prefiltered and matched by
//! one thread each, and the lines that can matter are then filed in file order by this thread,
//! through the same steps as `scan` (records, phases, ranks, versions), so the state is the one
//! reading the file in turn builds. A record open at the end of a chunk takes the next chunk's lines
//! here, as `scan` would give them to it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use super::scan::Want;
use super::state::{SourceState, State};
use super::Engine;

/// Chunks read per thread ahead of the one being filed: bounds the memory of buffers held.
const CHUNKS_AHEAD: usize = 2;
use crate::log::chunks::{self, Chunk, Source};
use crate::log::{self, Input, ReadStats};

/// What a chunk's worker found for one line that can matter.
enum Pre {
    /// The patterns that match its message: the line is filed without matching it again.
    Matched(Vec<usize>),
    /// Not printable ASCII: cleaned and matched here, as `scan` does.
    Whole,
}

/// A chunk and, by line index, what its worker found (lines not listed cannot matter).
struct Scanned {
    chunk: Chunk,
    pre: Vec<(u32, Pre)>,
}

struct Queue {
    /// The chunk this thread files next; workers stay within `window` chunks of it.
    next: u64,
    done: BTreeMap<u64, std::io::Result<Scanned>>,
    stop: bool,
}

/// Tells the workers to stop if this thread leaves early (an error, a panic).
struct StopOnDrop<'a>(&'a Mutex<Queue>, &'a Condvar);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.1.notify_all();
    }
}

impl Engine {
    /// The chunked reading of `input` if it applies: the prefilter is on (`big`), no byte budget,
    /// more than one thread, a plain file of at least four chunks.
    pub(crate) fn chunked_source(&self, input: &Input, big: bool, budget: Option<u64>) -> Option<(Source, u64)> {
        if !big || budget.is_some() || self.chunk_threads() < 2 {
            return None;
        }
        let size = match input {
            Input::File(p) => std::fs::metadata(p).ok()?.len(),
            _ => super::size_hint(input),
        };
        if size < 4 * self.chunk_size {
            return None;
        }
        Source::of(input).filter(|(_, len)| *len >= 4 * self.chunk_size)
    }

    pub(crate) fn chunk_threads(&self) -> usize {
        self.chunk_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Read input `si` (`src`, `len` bytes) in chunks on every core into `st`.
    pub(crate) fn scan_chunked(&self, st: &mut State, si: usize, input: &Input, src: &Source, len: u64) {
        let size = self.chunk_size;
        let n = len.div_ceil(size);
        let threads = self.chunk_threads();
        let window = (threads * CHUNKS_AHEAD) as u64;
        let claim = AtomicU64::new(0);
        let queue = Mutex::new(Queue { next: 0, done: BTreeMap::new(), stop: false });
        let cv = Condvar::new();
        let lock = || queue.lock().unwrap_or_else(|e| e.into_inner());
        // Buffers of filed chunks, for the next ones read.
        let pool: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
        let take_buf = || pool.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        let name = input.name();
        let mut s = SourceState::new(si);
        let mut stats = ReadStats::default();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = claim.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    {
                        let mut q = lock();
                        while i >= q.next + window && !q.stop {
                            q = cv.wait(q).unwrap_or_else(|e| e.into_inner());
                        }
                        if q.stop {
                            break;
                        }
                    }
                    let r = chunks::read(src, len, i, size, take_buf()).map(|chunk| {
                        let pre = self.pre_scan(&chunk);
                        Scanned { chunk, pre }
                    });
                    lock().done.insert(i, r);
                    cv.notify_all();
                });
            }
            let _stop = StopOnDrop(&queue, &cv);
            for i in 0..n {
                let r = {
                    let mut q = lock();
                    loop {
                        if let Some(r) = q.done.remove(&i) {
                            break r;
                        }
                        q = cv.wait(q).unwrap_or_else(|e| e.into_inner());
                    }
                };
                lock().next = i + 1;
                cv.notify_all();
                match r {
                    Ok(sc) => {
                        stats.cut_lines += sc.chunk.cut;
                        let buf = self.file_chunk(st, &mut s, sc);
                        pool.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
                        stats.bytes_read = ((i + 1) * size).min(len);
                    }
                    Err(e) => {
                        st.cut_short(si, &name, s.lines, &e);
                        break;
                    }
                }
            }
        });
        self.end_records(st, &mut s);
        st.end_source(s, name, stats, &mut None);
    }

    /// A worker's part: which lines of `ch` can matter, and the patterns that match them.
    fn pre_scan(&self, ch: &Chunk) -> Vec<(u32, Pre)> {
        let mut reach = Vec::new();
        let mut out = Vec::new();
        for j in 0..ch.len() {
            let raw = ch.line(j);
            if raw.is_empty() {
                continue;
            }
            if !log::is_clean(raw) {
                out.push((j as u32, Pre::Whole));
                continue;
            }
            // SAFETY: `is_clean` holds only for ASCII bytes, which are valid UTF-8.
            let line = unsafe { std::str::from_utf8_unchecked(raw) };
            let p = log::strip_prefixes(line);
            let rest = p.rest;
            // A logger head's warning matters whatever its message holds.
            let r = if super::scan::head_warns(&p) {
                self.prefilter().warns(rest, &mut reach)
            } else {
                self.prefilter().reach(rest, &mut reach)
            };
            let m = match r {
                log::Reach::Nothing => continue,
                log::Reach::Some | log::Reach::Warns => self.matches_among(rest, &reach),
                log::Reach::Any => self.matches(rest),
            };
            out.push((j as u32, Pre::Matched(m)));
        }
        out
    }

    /// File the lines of one chunk in order: those its worker listed, and while a record is open
    /// every line, as `scan` does. Returns the chunk's buffer.
    fn file_chunk(&self, st: &mut State, s: &mut SourceState, sc: Scanned) -> Vec<u8> {
        let Scanned { chunk, pre } = sc;
        let base = s.lines;
        let mut reach = Vec::new();
        let mut pre = pre.into_iter().peekable();
        let mut j = 0usize;
        loop {
            if s.records.is_open() {
                if j >= chunk.len() {
                    break;
                }
                s.lines = base + j as u64 + 1;
                self.raw_line(st, s, chunk.line(j), true, &mut reach);
                j += 1;
                continue;
            }
            while pre.next_if(|(k, _)| (*k as usize) < j).is_some() {}
            let Some((k, p)) = pre.next() else { break };
            let k = k as usize;
            s.lines = base + k as u64 + 1;
            let raw = chunk.line(k);
            match p {
                Pre::Matched(m) => {
                    // SAFETY: the worker found the line printable ASCII.
                    let line = unsafe { std::str::from_utf8_unchecked(raw) };
                    self.prefixed_line(st, s, line, log::strip_prefixes(line), Want::Known(m));
                }
                Pre::Whole => self.raw_line(st, s, raw, true, &mut reach),
            }
            j = k + 1;
        }
        s.lines = base + chunk.len() as u64;
        chunk.into_buf()
    }
}
