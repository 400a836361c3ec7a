//! The NCCL functions a library imports and the ones a libnccl exports, from their ELF dynamic
//! symbol tables (64-bit little-endian, as on x86-64 and aarch64 Linux).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::env::elf;

const SYM_SIZE: usize = 24;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;

/// (undefined, defined and visible) symbol names of `path` that start with `prefix`.
pub fn dynamic_symbols(path: &Path, prefix: &str) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let secs = elf::sections(path)
        .with_context(|| format!("reading {}", path.display()))?
        .ok_or_else(|| anyhow::anyhow!("{} is not an ELF file with a section table", path.display()))?;
    let Some(dynsym) = secs.iter().find(|s| s.name == ".dynsym") else {
        bail!("{} has no dynamic symbol table", path.display());
    };
    let Some(dynstr) = secs.get(dynsym.link as usize).filter(|s| s.name == ".dynstr") else {
        bail!("{}: the dynamic symbol table names no string table", path.display());
    };
    let syms = elf::section_bytes(path, &secs, ".dynsym")?.unwrap_or_default();
    let strs = elf::section_bytes(path, &secs, &dynstr.name)?.unwrap_or_default();
    if syms.len() % SYM_SIZE != 0 {
        bail!("{}: not a 64-bit ELF dynamic symbol table", path.display());
    }
    let (mut undef, mut def) = (BTreeSet::new(), BTreeSet::new());
    for e in syms.chunks_exact(SYM_SIZE) {
        let name_off = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as usize;
        let (info, other) = (e[4], e[5]);
        let shndx = u16::from_le_bytes([e[6], e[7]]);
        let Some(name) = strs.get(name_off..).and_then(|s| s.split(|b| *b == 0).next()) else { continue };
        let Ok(name) = std::str::from_utf8(name) else { continue };
        if name.is_empty() || !name.starts_with(prefix) {
            continue;
        }
        let bind = info >> 4;
        if shndx == 0 {
            undef.insert(name.to_string());
        } else if matches!(bind, STB_GLOBAL | STB_WEAK) && other & 3 == 0 {
            def.insert(name.to_string());
        }
    }
    Ok((undef, def))
}

/// The `nccl*` functions `user` imports that `lib` does not export.
pub fn missing(user: &Path, lib: &Path) -> Result<Vec<String>> {
    let (needs, _) = dynamic_symbols(user, "nccl")?;
    let (_, has) = dynamic_symbols(lib, "nccl")?;
    Ok(needs.difference(&has).cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library this test binary links: it exports `malloc`, and the binary imports it.
    #[test]
    fn reads_imports_and_exports_of_real_libraries() {
        let exe = std::env::current_exe().unwrap();
        let libc = crate::sys::procs::mapped_files(Path::new("/proc/self"))
            .unwrap()
            .into_iter()
            .map(|(.., p)| p)
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libc.so")))
            .expect("a glibc process maps libc.so.6");
        let (_, libc_def) = dynamic_symbols(&libc, "mall").unwrap();
        assert!(libc_def.contains("malloc"), "{libc_def:?}");
        let (exe_undef, _) = dynamic_symbols(&exe, "mall").unwrap();
        assert!(exe_undef.contains("malloc"), "{exe_undef:?}");
        let d = tempfile::tempdir().unwrap();
        let not_elf = d.path().join("x.so");
        std::fs::write(&not_elf, b"2.22.3\n").unwrap();
        assert!(dynamic_symbols(&not_elf, "nccl").unwrap_err().to_string().contains("not an ELF file"));
    }
}
