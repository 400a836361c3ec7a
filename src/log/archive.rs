//! Archives read as the files inside: tar (plain, gzip or zstd) and zip (stored or deflate), each
//! member named `archive.tgz!path/inside.log`, nested archives opened one level deep.
//!
//! Nothing is unpacked by name onto the disk and nothing is held in memory: a zip member is read
//! in place (its byte range in the archive); a tar member, reachable only by reading the stream
//! before it, is copied once into an unnamed temporary file (the spool, gone when the process
//! ends, however it ends) and read from there. Bounded: at most `Limits::entries` entries per
//! archive and `Limits::unpacked` unpacked bytes over all archives (a zip bomb stops there), a
//! member that unpacks to more than its header declares is cut there.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::input::{decoded, is_hidden, printable, skip_reason, sniff, Expander, Src, HEAD};

pub struct Limits {
    /// Entries looked at per archive (files, folders, links).
    pub entries: usize,
    /// Unpacked bytes over all archives of one `expand`.
    pub unpacked: u64,
}

pub const LIMITS: Limits = Limits { entries: 100_000, unpacked: 8 << 30 };

/// One file inside an archive: `len` bytes at `start` of `file` (the archive, or the spool),
/// deflate-compressed or stored, unpacking to at most `size` bytes.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    file: Arc<File>,
    start: u64,
    len: u64,
    deflated: bool,
    size: u64,
}

impl Member {
    /// About how many bytes it unpacks to.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its bytes, zip's deflate undone (gzip or zstd inside it are the reader's, as for a file).
    pub fn reader(&self) -> Box<dyn Read + Send> {
        let raw = Range { file: self.file.clone(), start: self.start, pos: 0, len: self.len };
        if !self.deflated {
            return Box::new(raw);
        }
        Box::new(Capped { inner: flate2::read::DeflateDecoder::new(raw), left: self.size, size: self.size })
    }
}

/// `len` bytes of a shared file from `start`, read by position (many readers at once).
struct Range {
    file: Arc<File>,
    start: u64,
    pos: u64,
    len: u64,
}

impl Read for Range {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(usize::try_from(self.len.saturating_sub(self.pos)).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.start + self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Range {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

/// A decoder that may give at most `size` bytes: more is an error (a zip bomb's lying header, or
/// what was left of the unpack limit when the member was admitted).
struct Capped<R> {
    inner: R,
    left: u64,
    size: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            return match self.inner.read(&mut [0u8; 1])? {
                0 => Ok(0),
                _ => Err(io::Error::other(format!(
                    "unpacks to more than {} bytes (its declared size, or what was left of the limit on unpacked archive bytes); read that far",
                    self.size
                ))),
            };
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// The unnamed temporary file tar members are copied into, appended to only.
pub struct Spool {
    file: Arc<File>,
    len: u64,
}

impl Expander<'_> {
    /// Unpacked bytes still allowed.
    fn room(&self) -> u64 {
        self.limits.unpacked.saturating_sub(self.unpacked)
    }

    /// Copy `head` and then the rest of `r` (at most what the limit leaves) into the spool: the
    /// member named `name`, or `None` (with a note) when the spool cannot be written.
    fn spool(&mut self, name: &str, head: &[u8], r: &mut dyn Read) -> Option<Member> {
        if self.spool.is_none() {
            match tempfile::tempfile() {
                Ok(f) => self.spool = Some(Spool { file: Arc::new(f), len: 0 }),
                Err(e) => {
                    self.unread(format!("{name}: not read: cannot create a temporary file to unpack into: {e}"));
                    return None;
                }
            }
        }
        let room = self.room();
        let sp = self.spool.as_mut()?;
        let start = sp.len;
        let mut w = io::BufWriter::with_capacity(256 * 1024, &*sp.file);
        let head = &head[..head.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        let copied = w.write_all(head).and_then(|()| io::copy(&mut r.take(room - head.len() as u64), &mut w));
        let flushed = w.flush();
        let len = match (copied, flushed) {
            (Ok(n), Ok(())) => head.len() as u64 + n,
            (Err(e), _) | (_, Err(e)) => {
                // Keep what was written (the spool's end is wherever the write stopped).
                let end = sp.file.metadata().map_or(start, |m| m.len());
                sp.len = end;
                let note = format!("{name}: read only in part: {e}");
                self.unread.push(note.clone());
                self.notes.push(note);
                let len = end.saturating_sub(start);
                self.unpacked += len;
                return Some(Member {
                    name: name.into(),
                    file: sp.file.clone(),
                    start,
                    len,
                    deflated: false,
                    size: len,
                });
            }
        };
        sp.len += len;
        let file = sp.file.clone();
        self.unpacked += len;
        if len == room {
            // Is there more? Then the limit cut it.
            if r.read(&mut [0u8; 1]).is_ok_and(|n| n > 0) {
                let note = format!(
                    "{name}: read only its first {len} bytes: the limit of {} unpacked archive bytes was reached",
                    self.limits.unpacked
                );
                self.unread.push(note.clone());
                self.notes.push(note);
            }
        }
        Some(Member { name: name.into(), file, start, len, deflated: false, size: len })
    }

    /// Add the members of the tar stream in `src` (gzip or zstd packed, or plain).
    pub(super) fn tar(&mut self, src: &Src, name: &str, depth: usize) {
        let stream = match src.raw().and_then(decoded) {
            Ok(s) => s,
            Err(e) => return self.unread(format!("{name}: cannot read this tar archive: {e}")),
        };
        let mut ar = tar::Archive::new(stream);
        let entries = match ar.entries() {
            Ok(e) => e,
            Err(e) => return self.unread(format!("{name}: cannot read this tar archive: {e}")),
        };
        for (n, entry) in entries.enumerate() {
            if n == self.limits.entries {
                self.unread(format!("{name}: only its first {n} entries were looked at"));
                break;
            }
            let mut e = match entry {
                Ok(e) => e,
                Err(e) => {
                    self.unread(format!("{name}: stopped reading its members after entry {n}: {e}"));
                    break;
                }
            };
            if !matches!(e.header().entry_type(), tar::EntryType::Regular | tar::EntryType::Continuous) {
                continue;
            }
            let path = printable(&String::from_utf8_lossy(&e.path_bytes()));
            let full = format!("{name}!{path}");
            if path.split('/').any(is_hidden) {
                self.skip(super::input::HIDDEN, full);
                continue;
            }
            let mut head = Vec::with_capacity(HEAD.min(usize::try_from(e.size()).unwrap_or(HEAD)));
            if let Err(err) = (&mut e).take(HEAD as u64).read_to_end(&mut head) {
                self.unread(format!("{full}: cannot read: {err}"));
                break;
            }
            // What it is, by its unpacked start when it is gzip or zstd itself.
            let content = match head_unpacked(&head) {
                Some(h) => sniff(&full, &h),
                None => sniff(&full, &head),
            };
            if let Some((why, what)) = skip_reason(&full, content, depth + 1, true) {
                self.skip(why, what);
                continue;
            }
            if self.room() == 0 {
                self.skip(super::input::BUDGET, full);
                continue;
            }
            let Some(m) = self.spool(&full, &head, &mut e) else { break };
            self.take(Src::Member(Arc::new(m)), full, content, depth + 1, true);
        }
    }

    /// Add the members of the zip archive in `src`.
    pub(super) fn zip(&mut self, src: Src, name: &str, depth: usize) {
        // In place when its bytes lie as they are in a file; else (deflated inside another zip)
        // spooled first.
        let range = match &src {
            Src::File(p) => match File::open(p).and_then(|f| Ok((f.metadata()?.len(), f))) {
                Ok((len, f)) => Range { file: Arc::new(f), start: 0, pos: 0, len },
                Err(e) => return self.unread(format!("{name}: cannot read: {e}")),
            },
            Src::Member(m) if !m.deflated => Range { file: m.file.clone(), start: m.start, pos: 0, len: m.len },
            Src::Member(m) => {
                let Ok(mut r) = src.raw() else { return };
                // Its bytes were counted against the limit when it was admitted.
                self.unpacked = self.unpacked.saturating_sub(m.size);
                let Some(s) = self.spool(name, &[], &mut r) else { return };
                Range { file: s.file, start: s.start, pos: 0, len: s.len }
            }
        };
        let (file, base, total) = (range.file.clone(), range.start, range.len);
        let mut za = match zip::ZipArchive::new(range) {
            Ok(z) => z,
            Err(e) => return self.unread(format!("{name}: not a readable zip archive: {e}")),
        };
        let count = za.len();
        if count > self.limits.entries {
            self.notes
                .push(format!("{name}: only its first {} of {count} entries were looked at", self.limits.entries));
        }
        for i in 0..count.min(self.limits.entries) {
            let f = match za.by_index_raw(i) {
                Ok(f) => f,
                Err(e) => {
                    self.unread(format!("{name}: entry {i} cannot be read: {e}"));
                    continue;
                }
            };
            if !f.is_file() {
                continue;
            }
            let path = printable(f.name());
            let full = format!("{name}!{path}");
            if path.split(['/', '\\']).any(is_hidden) {
                self.skip(super::input::HIDDEN, full);
                continue;
            }
            // (`DEFLATE` is the variant with or without zip's own deflate feature.)
            let deflated = match f.compression() {
                zip::CompressionMethod::Stored => false,
                zip::CompressionMethod::DEFLATE => true,
                other => {
                    self.notes
                        .push(format!("{full}: not read: compressed with {other:?}, which epdoctor does not unpack"));
                    continue;
                }
            };
            if f.encrypted() {
                self.unread(format!("{full}: not read: encrypted"));
                continue;
            }
            let (start, len) = (f.data_start().unwrap_or(u64::MAX), f.compressed_size());
            if start.checked_add(len).is_none_or(|end| end > total) {
                self.unread(format!("{full}: not read: its data lies past the end of the archive"));
                continue;
            }
            let room = self.room();
            if room == 0 {
                self.skip(super::input::BUDGET, full);
                continue;
            }
            let size = if deflated { f.size().min(room) } else { len.min(room) };
            if size < f.size() {
                self.unread(format!(
                    "{full}: read only its first {size} bytes: the limit of {} unpacked archive bytes was reached",
                    self.limits.unpacked
                ));
            }
            drop(f);
            self.unpacked += size;
            let len = if deflated { len } else { size };
            let m = Member { name: full, file: file.clone(), start: base + start, len, deflated, size };
            self.add(Src::Member(Arc::new(m)), depth + 1, true);
        }
    }
}

/// `head` unpacked when it starts a gzip or zstd stream (at most `HEAD` bytes; a cut stream
/// gives what it gave), else `None`.
fn head_unpacked(head: &[u8]) -> Option<Vec<u8>> {
    if !(head.starts_with(&[0x1f, 0x8b]) || head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])) {
        return None;
    }
    let mut out = Vec::new();
    let r = decoded(Box::new(io::Cursor::new(head.to_vec()))).ok()?;
    let _ = r.take(HEAD as u64).read_to_end(&mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::{Path, PathBuf};

    use super::super::input::{expand_with, open, Expanded, Input};
    use super::*;

    const LOG: &[u8] = b"vm:1:2 [0] NCCL INFO line one\nvm:1:2 [0] NCCL INFO line two\n";
    const ELF: &[u8] = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0";

    /// A tar with these members; names are written into the header as given (`..` too).
    fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut h = tar::Header::new_gnu();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zip_of(members: &[(&str, &[u8])], deflate: bool) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        let method = if deflate { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
        let opts = zip::write::SimpleFileOptions::default().compression_method(method);
        for (name, data) in members {
            w.start_file(*name, opts).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// Overwrite the uncompressed size in every local and central header of a one-member zip.
    fn declare_size(zip: &mut [u8], size: u32) {
        for (sig, off) in [(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)] {
            let at = zip.windows(4).position(|w| w == sig).unwrap() + off;
            zip[at..at + 4].copy_from_slice(&size.to_le_bytes());
        }
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn names(x: &Expanded) -> Vec<String> {
        x.inputs.iter().map(Input::name).collect()
    }

    /// Every line of `input`, or the read error's text as the last line.
    fn lines(input: &Input) -> Vec<String> {
        let mut r = open(input, None).unwrap();
        let mut v = Vec::new();
        loop {
            match r.next_line() {
                Ok(Some(l)) => v.push(String::from_utf8_lossy(l).into_owned()),
                Ok(None) => break,
                Err(e) => {
                    v.push(format!("error: {e}"));
                    break;
                }
            }
        }
        v
    }

    fn small(unpacked: u64) -> Limits {
        Limits { entries: 1000, unpacked }
    }

    #[test]
    fn every_archive_form_gives_its_files_by_inner_name() {
        let d = tempfile::tempdir().unwrap();
        let members: &[(&str, &[u8])] = &[
            ("job/rank0.log", LOG),
            ("job/rank1.log.gz", &gz(LOG)),
            ("job/.git/HEAD", b"ref: x\n"),
            ("job/bin/nccl-tests", ELF),
            ("job/empty.log", b""),
        ];
        let tar = tar_of(members);
        let paths = [
            write(d.path(), "a.tar", &tar),
            write(d.path(), "a.tgz", &gz(&tar)),
            write(d.path(), "a.tar.zst", &zstd::encode_all(&tar[..], 3).unwrap()),
            write(d.path(), "s.zip", &zip_of(members, false)),
            write(d.path(), "d.zip", &zip_of(members, true)),
        ];
        for p in &paths {
            let x = expand_with(std::slice::from_ref(p), &LIMITS).unwrap();
            let base = p.display().to_string();
            assert_eq!(
                names(&x),
                ["job/rank0.log", "job/rank1.log.gz", "job/empty.log"].map(|m| format!("{base}!{m}")),
                "{base}"
            );
            for i in &x.inputs[..2] {
                assert_eq!(
                    lines(i),
                    ["vm:1:2 [0] NCCL INFO line one", "vm:1:2 [0] NCCL INFO line two"],
                    "{}",
                    i.name()
                );
            }
            assert!(lines(&x.inputs[2]).is_empty());
            let notes = x.notes.join("\n");
            for want in [
                format!("hidden files and folders: {base}!job/.git/HEAD"),
                format!("{base}!job/bin/nccl-tests (ELF"),
                format!("empty (no lines: did that process write anything?): {base}!job/empty.log"),
            ] {
                assert!(notes.contains(&want), "{base}: {want} in\n{notes}");
            }
        }
        // Found in a folder, the same.
        let x = expand_with(&[d.path().to_path_buf()], &LIMITS).unwrap();
        assert_eq!(x.inputs.len(), 15);
    }

    #[test]
    fn nested_archives_are_opened_one_level_deep() {
        let d = tempfile::tempdir().unwrap();
        let deepest = gz(&tar_of(&[("c.log", LOG)]));
        let inner_zip = zip_of(&[("b.log", LOG), ("deeper.tgz", &deepest)], true);
        let inner_tgz = gz(&tar_of(&[("t.log", LOG)]));
        let outer = tar_of(&[("a.log", LOG), ("in.zip", &inner_zip), ("in.tgz", &inner_tgz)]);
        for (name, bytes) in
            [("o.tar", outer.clone()), ("o.zip", zip_of(&[("in.zip", &inner_zip), ("in.tgz", &inner_tgz)], true))]
        {
            let p = write(d.path(), name, &bytes);
            let x = expand_with(std::slice::from_ref(&p), &LIMITS).unwrap();
            let got = names(&x);
            let base = p.display().to_string();
            assert!(got.contains(&format!("{base}!in.zip!b.log")), "{got:?}");
            assert!(got.contains(&format!("{base}!in.tgz!t.log")), "{got:?}");
            assert!(x.notes.iter().any(|n| n.contains("archive inside an archive") && n.contains("in.zip!deeper.tgz")));
            for i in &x.inputs {
                assert_eq!(lines(i).len(), 2, "{}", i.name());
            }
        }
    }

    #[test]
    fn hostile_member_names_are_labels_only() {
        let d = tempfile::tempdir().unwrap();
        let inner = d.path().join("in");
        std::fs::create_dir(&inner).unwrap();
        let names_in = ["../../evil.log", "/etc/abs.log", "a/\u{1b}[31mred.log"];
        let members: Vec<(&str, &[u8])> = names_in.iter().map(|n| (*n, LOG)).collect();
        for (file, bytes) in [("t.tar", tar_of(&members)), ("z.zip", zip_of(&members, true))] {
            let p = write(&inner, file, &bytes);
            let x = expand_with(std::slice::from_ref(&p), &LIMITS).unwrap();
            let got = names(&x);
            assert_eq!(got.len(), 3, "{got:?}");
            assert!(got[0].ends_with("!../../evil.log") && got[1].ends_with("!/etc/abs.log"), "{got:?}");
            assert!(!got[2].contains('\u{1b}'), "control characters escaped: {got:?}");
            assert_eq!(lines(&x.inputs[0]).len(), 2);
        }
        // Nothing was written anywhere by those names.
        assert!(!d.path().join("evil.log").exists() && !inner.join("evil.log").exists());
        assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 2);
    }

    #[test]
    fn a_lying_zip_header_stops_the_member_there() {
        let d = tempfile::tempdir().unwrap();
        // 4 MiB of log lines (deflates to a few KiB) declared as 1000 bytes.
        let big = LOG.repeat(4 << 20 >> 6);
        let mut z = zip_of(&[("bomb.log", &big)], true);
        declare_size(&mut z, 1000);
        let p = write(d.path(), "bomb.zip", &z);
        let x = expand_with(&[p], &LIMITS).unwrap();
        let l = lines(&x.inputs[0]);
        assert!(l.last().unwrap().contains("unpacks to more than 1000 bytes"), "{:?}", l.last());
        assert!(l.len() < 40);
    }

    #[test]
    fn declared_sizes_beyond_the_limit_are_not_read_past_it() {
        let d = tempfile::tempdir().unwrap();
        // A member that declares 4 GiB: only what the limit allows is promised and read.
        let mut z = zip_of(&[("huge.log", &LOG.repeat(1000))], true);
        declare_size(&mut z, u32::MAX - 1);
        let p = write(d.path(), "huge.zip", &z);
        let x = expand_with(&[p], &small(1 << 20)).unwrap();
        assert_eq!(x.inputs.len(), 1);
        assert!(x.notes.iter().any(|n| n.contains("read only its first 1048576 bytes")), "{:?}", x.notes);
        assert_eq!(lines(&x.inputs[0]).len(), 2000);
        // A tar header that declares more than the stream holds: what is there is read, the cut is noted.
        let mut t = tar_of(&[("a.log", LOG), ("b.log", &LOG.repeat(100))]);
        t.truncate(512 + 512 + 512 + 100);
        let p = write(d.path(), "cut.tar", &t);
        let x = expand_with(std::slice::from_ref(&p), &LIMITS).unwrap();
        assert_eq!(names(&x)[0], format!("{}!a.log", p.display()));
        assert!(x.notes.iter().any(|n| n.contains("cut.tar")), "{:?}", x.notes);
    }

    #[test]
    fn the_unpack_limit_bounds_many_members() {
        let d = tempfile::tempdir().unwrap();
        let body = LOG.repeat(1600); // 100 KiB
        let members: Vec<(String, &[u8])> = (0..20).map(|i| (format!("rank{i}.log"), &body[..])).collect();
        let members: Vec<(&str, &[u8])> = members.iter().map(|(n, b)| (n.as_str(), *b)).collect();
        for (file, bytes) in [("m.tgz", gz(&tar_of(&members))), ("m.zip", zip_of(&members, true))] {
            let p = write(d.path(), file, &bytes);
            let x = expand_with(&[p], &small(512 << 10)).unwrap();
            let read: usize =
                x.inputs.iter().flat_map(lines).filter(|l| !l.starts_with("error: ")).map(|l| l.len() + 1).sum();
            assert!(x.inputs.len() <= 6, "{file}: {}", x.inputs.len());
            // (+1: the newline counted after the last line, which the limit cut.)
            assert!(read <= (512 << 10) + 1, "{file}: {read} bytes");
            assert!(x.notes.iter().any(|n| n.contains("past the limit on unpacked archive bytes")), "{:?}", x.notes);
        }
    }

    #[test]
    fn ten_thousand_members_and_the_entry_limit() {
        let d = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..10_000).map(|i| format!("r/rank{i:05}.log")).collect();
        let members: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x NCCL INFO ok\n"[..])).collect();
        let p = write(d.path(), "many.tgz", &gz(&tar_of(&members)));
        let x = expand_with(std::slice::from_ref(&p), &LIMITS).unwrap();
        assert_eq!(x.inputs.len(), 10_000);
        assert_eq!(lines(&x.inputs[9_999]), ["x NCCL INFO ok"]);
        let x = expand_with(&[p], &Limits { entries: 100, unpacked: 1 << 30 }).unwrap();
        assert_eq!(x.inputs.len(), 100);
        assert!(x.notes.iter().any(|n| n.contains("only its first 100 entries")), "{:?}", x.notes);
    }

    #[test]
    fn corrupt_archives_are_notes_naming_them() {
        let d = tempfile::tempdir().unwrap();
        let tgz = gz(&tar_of(&[("a.log", &LOG.repeat(2000)), ("b.log", &LOG.repeat(2000))]));
        let mut bad_sum = tar_of(&[("a.log", LOG)]);
        bad_sum[148] ^= 0x07;
        let mut flipped = zip_of(&[("a.log", &LOG.repeat(2000))], true);
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("cut.tgz", tgz[..tgz.len() / 2].to_vec()),
            ("badsum.tar", bad_sum),
            ("garbage.zip", b"PK\x03\x04 not really a zip at all".to_vec()),
            ("cut.zip", zip_of(&[("a.log", LOG)], true)[..40].to_vec()),
            ("flipped.zip", flipped),
        ];
        for (file, bytes) in &cases {
            let p = write(d.path(), file, bytes);
            match expand_with(&[p], &LIMITS) {
                Ok(x) => {
                    // A note that names the archive, or members whose reading says what broke.
                    let noted = x.notes.iter().any(|n| n.contains(file));
                    let errs = x.inputs.iter().any(|i| lines(i).last().is_some_and(|l| l.starts_with("error")));
                    assert!(noted || errs, "{file}: {:?} {:?}", x.notes, names(&x));
                }
                Err(e) => assert!(format!("{e:#}").contains(file), "{file}: {e:#}"),
            }
        }
    }
}
