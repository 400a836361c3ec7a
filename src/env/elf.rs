//! Just enough ELF to find a shared library's read-only data and its DT_NEEDED entries
//! without loading it (a libnccl.so is 250-350 MB; its `.rodata` is about 1 MB).
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub kind: u32,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
}

const SHT_NOBITS: u32 = 8;
const SHT_DYNAMIC: u32 = 6;
const DT_NEEDED: u64 = 1;
/// Refuse absurd tables rather than allocate them (a corrupt header is not our crash).
const MAX_SECTIONS: u64 = 65_536;
const MAX_TABLE_BYTES: u64 = 64 << 20;

struct Header {
    little: bool,
    wide: bool,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    shstrndx: u64,
}

fn u16_at(b: &[u8], o: usize, little: bool) -> Option<u16> {
    let s: [u8; 2] = b.get(o..o + 2)?.try_into().ok()?;
    Some(if little { u16::from_le_bytes(s) } else { u16::from_be_bytes(s) })
}
fn u32_at(b: &[u8], o: usize, little: bool) -> Option<u32> {
    let s: [u8; 4] = b.get(o..o + 4)?.try_into().ok()?;
    Some(if little { u32::from_le_bytes(s) } else { u32::from_be_bytes(s) })
}
fn u64_at(b: &[u8], o: usize, little: bool) -> Option<u64> {
    let s: [u8; 8] = b.get(o..o + 8)?.try_into().ok()?;
    Some(if little { u64::from_le_bytes(s) } else { u64::from_be_bytes(s) })
}
/// A 32- or 64-bit address/offset field.
fn word_at(b: &[u8], o: usize, h: &Header) -> Option<u64> {
    if h.wide {
        u64_at(b, o, h.little)
    } else {
        u32_at(b, o, h.little).map(u64::from)
    }
}

fn parse_header(b: &[u8]) -> Option<Header> {
    if b.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match b.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match b.get(5)? {
        1 => true,
        2 => false,
        _ => return None,
    };
    let (shoff, shentsize, shnum, shstrndx) = if wide {
        (u64_at(b, 0x28, little)?, u16_at(b, 0x3A, little)?, u16_at(b, 0x3C, little)?, u16_at(b, 0x3E, little)?)
    } else {
        (
            u64::from(u32_at(b, 0x20, little)?),
            u16_at(b, 0x2E, little)?,
            u16_at(b, 0x30, little)?,
            u16_at(b, 0x32, little)?,
        )
    };
    Some(Header { little, wide, shoff, shentsize: shentsize.into(), shnum: shnum.into(), shstrndx: shstrndx.into() })
}

fn read_range(f: &mut File, offset: u64, len: u64, file_len: u64) -> std::io::Result<Vec<u8>> {
    if offset.checked_add(len).is_none_or(|end| end > file_len) || len > MAX_TABLE_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "ELF range outside the file"));
    }
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0; len as usize];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// The section table of an ELF file, or `None` when the file is not ELF or has no usable table
/// (callers then fall back to scanning the whole file).
pub fn sections(path: &Path) -> std::io::Result<Option<Vec<Section>>> {
    let mut f = File::open(path)?;
    let file_len = f.metadata()?.len();
    let mut head = [0u8; 64];
    let n = f.read(&mut head)?;
    let Some(h) = parse_header(&head[..n]) else { return Ok(None) };
    let min_ent = if h.wide { 64 } else { 40 };
    if h.shnum == 0 || h.shnum > MAX_SECTIONS || h.shentsize < min_ent || h.shstrndx >= h.shnum {
        return Ok(None);
    }
    let Ok(table) = read_range(&mut f, h.shoff, h.shnum * h.shentsize, file_len) else { return Ok(None) };
    let mut raw = Vec::with_capacity(h.shnum as usize);
    for i in 0..h.shnum as usize {
        let e = &table[i * h.shentsize as usize..];
        let (name, kind) = (u32_at(e, 0, h.little), u32_at(e, 4, h.little));
        let (offset, size, link) = if h.wide {
            (word_at(e, 0x18, &h), word_at(e, 0x20, &h), u32_at(e, 0x28, h.little))
        } else {
            (word_at(e, 0x10, &h), word_at(e, 0x14, &h), u32_at(e, 0x18, h.little))
        };
        match (name, kind, offset, size, link) {
            (Some(a), Some(b), Some(c), Some(d), Some(l)) => raw.push((a, b, c, d, l)),
            _ => return Ok(None),
        }
    }
    let (_, _, str_off, str_size, _) = raw[h.shstrndx as usize];
    let Ok(names) = read_range(&mut f, str_off, str_size, file_len) else { return Ok(None) };
    let out = raw
        .into_iter()
        .map(|(name, kind, offset, size, link)| Section {
            name: cstr_at(&names, name as usize),
            kind,
            offset,
            size,
            link,
        })
        .collect();
    Ok(Some(out))
}

fn cstr_at(b: &[u8], o: usize) -> String {
    let tail = b.get(o..).unwrap_or_default();
    let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
    String::from_utf8_lossy(&tail[..end]).into_owned()
}

/// The bytes of one named section (none for NOBITS or when absent).
pub fn section_bytes(path: &Path, secs: &[Section], name: &str) -> std::io::Result<Option<Vec<u8>>> {
    let Some(s) = secs.iter().find(|s| s.name == name && s.kind != SHT_NOBITS) else { return Ok(None) };
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    Ok(read_range(&mut f, s.offset, s.size, len).ok())
}

/// DT_NEEDED names: the libraries the loader must bring in with this one.
pub fn needed(path: &Path) -> std::io::Result<Vec<String>> {
    let Some(secs) = sections(path)? else { return Ok(Vec::new()) };
    let Some(dynamic) = secs.iter().find(|s| s.kind == SHT_DYNAMIC) else { return Ok(Vec::new()) };
    let Some(strtab) = secs.get(dynamic.link as usize) else { return Ok(Vec::new()) };
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut head = [0u8; 64];
    let n = f.read(&mut head)?;
    let Some(h) = parse_header(&head[..n]) else { return Ok(Vec::new()) };
    let (Ok(dyn_bytes), Ok(strs)) =
        (read_range(&mut f, dynamic.offset, dynamic.size, len), read_range(&mut f, strtab.offset, strtab.size, len))
    else {
        return Ok(Vec::new());
    };
    let ent = if h.wide { 16 } else { 8 };
    let mut out = Vec::new();
    for e in dyn_bytes.chunks_exact(ent) {
        let (tag, val) = (word_at(e, 0, &h).unwrap_or(0), word_at(e, ent / 2, &h).unwrap_or(0));
        match tag {
            0 => break,
            DT_NEEDED => out.push(cstr_at(&strs, val as usize)),
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_elf_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, b"hello, not an ELF file at all").unwrap();
        assert_eq!(sections(&p).unwrap(), None);
        assert!(needed(&p).unwrap().is_empty());
    }

    #[test]
    fn truncated_elf_is_none_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        let mut b = b"\x7fELF\x02\x01\x01".to_vec();
        b.resize(64, 0);
        // A section table far beyond the end of the file.
        b[0x28..0x30].copy_from_slice(&(1u64 << 40).to_le_bytes());
        b[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        b[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
        assert_eq!(sections(&p).unwrap(), None);
    }

    #[test]
    fn reads_own_executable() {
        // The test binary is an ELF file with .rodata and DT_NEEDED libc.
        let exe = std::env::current_exe().unwrap();
        let secs = sections(&exe).unwrap().expect("the test binary is ELF");
        assert!(secs.iter().any(|s| s.name == ".rodata"), "{secs:?}");
        let ro = section_bytes(&exe, &secs, ".rodata").unwrap().unwrap();
        assert!(!ro.is_empty());
        let needed = needed(&exe).unwrap();
        assert!(needed.iter().any(|n| n.starts_with("libc.so")), "{needed:?}");
    }
}
