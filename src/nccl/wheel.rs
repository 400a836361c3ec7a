//! libnccl.so.2 out of an `nvidia-nccl-cu<major>` wheel (a zip), checked three ways: the wheel's
//! METADATA names the package and release asked for, the library matches the wheel's RECORD
//! (sha256 and size), and the library reports that NCCL version.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};

/// Where the wheels keep it.
pub const LIB_PATH: &str = "nvidia/nccl/lib/libnccl.so.2";

#[derive(Debug, Clone)]
pub struct Extracted {
    pub lib_sha256: String,
    pub lib_bytes: u64,
    /// METADATA's Name and Version.
    pub name: String,
    pub version: String,
}

/// Write the wheel's libnccl.so.2 to `dest` (created new).
pub fn extract(wheel: &Path, dest: &Path) -> Result<Extracted> {
    let f = File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut za =
        zip::ZipArchive::new(f).with_context(|| format!("{} is not a readable wheel (zip)", wheel.display()))?;
    let mut lib = None;
    let mut meta = None;
    let mut record = None;
    for i in 0..za.len() {
        let e = za.by_index_raw(i).with_context(|| format!("{}: entry {i}", wheel.display()))?;
        let name = e.name().to_string();
        let is_dist = |file: &str| name.split_once('/').is_some_and(|(d, f)| d.ends_with(".dist-info") && f == file);
        if name == LIB_PATH {
            lib = Some(i);
        } else if is_dist("METADATA") {
            meta = Some(i);
        } else if is_dist("RECORD") {
            record = Some(i);
        }
    }
    let lib = lib.ok_or_else(|| anyhow!("{} holds no {LIB_PATH}", wheel.display()))?;
    let meta = meta.ok_or_else(|| anyhow!("{} holds no *.dist-info/METADATA", wheel.display()))?;
    let meta = String::from_utf8_lossy(&read_member(&mut za, wheel, meta, 1 << 20)?).into_owned();
    let field = |k: &str| {
        meta.lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_string()))
    };
    let (name, version) = match (field("Name"), field("Version")) {
        (Some(n), Some(v)) => (n, v),
        _ => bail!("{}: METADATA has no Name or Version", wheel.display()),
    };
    let record = match record {
        Some(i) => Some(String::from_utf8_lossy(&read_member(&mut za, wheel, i, 16 << 20)?).into_owned()),
        None => None,
    };
    let mut out = File::create_new(dest).with_context(|| format!("creating {}", dest.display()))?;
    let mut h = Sha256::new();
    let bytes = {
        let mut sink = |b: &[u8]| -> std::io::Result<()> {
            h.update(b);
            out.write_all(b)
        };
        stream_member(&mut za, wheel, lib, &mut sink)?
    };
    out.sync_all().with_context(|| format!("writing {}", dest.display()))?;
    let digest = h.finalize();
    if let Some(rec) = record {
        let want = rec.lines().find_map(|l| {
            let mut it = l.splitn(3, ',');
            (it.next()? == LIB_PATH).then(|| (it.next().unwrap_or("").to_string(), it.next().unwrap_or("").to_string()))
        });
        if let Some((hash, size)) = want {
            let got = format!("sha256={}", b64url(&digest));
            if !hash.is_empty() && hash != got {
                bail!("{}: {LIB_PATH} does not match the wheel's RECORD ({hash}, got {got})", wheel.display());
            }
            if size.trim().parse::<u64>().is_ok_and(|s| s != bytes) {
                bail!("{}: {LIB_PATH} is {bytes} bytes, the wheel's RECORD says {size}", wheel.display());
            }
        }
    }
    Ok(Extracted { lib_sha256: super::http::hex(&digest), lib_bytes: bytes, name, version })
}

fn read_member(za: &mut zip::ZipArchive<File>, wheel: &Path, i: usize, limit: u64) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    let mut sink = |b: &[u8]| -> std::io::Result<()> {
        if v.len() as u64 + b.len() as u64 > limit {
            return Err(std::io::Error::other(format!("larger than {limit} bytes")));
        }
        v.extend_from_slice(b);
        Ok(())
    };
    stream_member(za, wheel, i, &mut sink)?;
    Ok(v)
}

/// Feed member `i`'s bytes (stored or deflated; zip's deflate undone with flate2) to `sink`.
fn stream_member(
    za: &mut zip::ZipArchive<File>,
    wheel: &Path,
    i: usize,
    sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<u64> {
    let (name, start, csize, size, deflated) = {
        let e = za.by_index_raw(i)?;
        let deflated = match e.compression() {
            zip::CompressionMethod::Stored => false,
            zip::CompressionMethod::DEFLATE => true,
            other => {
                bail!("{}: {} is compressed with {other:?}, which epdoctor does not unpack", wheel.display(), e.name())
            }
        };
        let start = e.data_start().ok_or_else(|| anyhow!("{}: {} has no data offset", wheel.display(), e.name()))?;
        (e.name().to_string(), start, e.compressed_size(), e.size(), deflated)
    };
    let mut f = File::open(wheel)?;
    f.seek(SeekFrom::Start(start))?;
    let raw = f.take(csize);
    let mut r: Box<dyn Read> = if deflated { Box::new(flate2::read::DeflateDecoder::new(raw)) } else { Box::new(raw) };
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => bail!("{}: {name}: {e}", wheel.display()),
        };
        n += k as u64;
        if n > size {
            bail!("{}: {name} unpacks to more than the {size} bytes its header says", wheel.display());
        }
        sink(&buf[..k]).with_context(|| format!("{}: {name}", wheel.display()))?;
    }
    if n != size {
        bail!("{}: {name} unpacks to {n} bytes, its header says {size}", wheel.display());
    }
    Ok(n)
}

/// URL-safe base64 without padding (the RECORD file's hash form).
fn b64url(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..=c.len() {
            s.push(T[(n >> (18 - 6 * k) & 63) as usize] as char);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_hash_form() {
        // sha256("") in a RECORD file.
        let d = Sha256::digest(b"");
        assert_eq!(b64url(&d), "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
        assert_eq!(b64url(b"f"), "Zg");
        assert_eq!(b64url(b"fo"), "Zm8");
        assert_eq!(b64url(b"foo"), "Zm9v");
    }
}
