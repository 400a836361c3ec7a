//! Which GPU libraries can be loaded, and making `--nccl-lib` win over the loader's choice.
//!
//! cudarc loads libnccl on first use with `dlopen("libnccl.so")` (then `.so.12`, ...; never
//! `.so.2`, NCCL's soname). A library dlopen'ed earlier under another name does not satisfy that
//! lookup, and `LD_LIBRARY_PATH` is read once at process start. So for `--nccl-lib` the worker
//! makes a folder holding a `libnccl.so` link to the requested file, puts it first on
//! `LD_LIBRARY_PATH` and re-executes itself (same pid, same arguments); after loading it checks in
//! /proc/self/maps that the mapped libnccl is the requested file.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::kernels;

const REEXEC_VAR: &str = "EPDOCTOR_WORKER_NCCL_LIB";

/// The `--nccl-lib` file, checked and made absolute.
pub fn requested_lib(path: &Path) -> Result<PathBuf> {
    let canon = std::fs::canonicalize(path).with_context(|| format!("--nccl-lib {}: cannot open", path.display()))?;
    if !canon.is_file() {
        bail!("--nccl-lib {}: not a file", path.display());
    }
    Ok(canon)
}

/// Re-execute with `lib` first on the loader path, unless that was already done. Returns only when
/// no re-exec is needed; an exec failure is an error.
pub fn ensure_nccl_lib(lib: &Path, scratch: &Path) -> Result<()> {
    if std::env::var_os(REEXEC_VAR).is_some_and(|v| Path::new(&v) == lib) {
        return Ok(());
    }
    let dir = scratch;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for name in ["libnccl.so", "libnccl.so.2"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib, &link)
            .with_context(|| format!("linking {} -> {}", link.display(), lib.display()))?;
    }
    let mut ld = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        ld.push(":");
        ld.push(old);
    }
    let exe = std::env::current_exe().context("locating the epdoctor binary to re-execute")?;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let err =
        std::process::Command::new(&exe).arg0(argv0).args(args).env("LD_LIBRARY_PATH", ld).env(REEXEC_VAR, lib).exec();
    Err(err).with_context(|| format!("re-executing {} with {} first on LD_LIBRARY_PATH", exe.display(), dir.display()))
}

/// Every mapped file of this process whose name starts with `libnccl`.
pub fn loaded_nccl_files() -> Vec<PathBuf> {
    let maps = crate::sys::procs::mapped_files(Path::new("/proc/self")).unwrap_or_default();
    let mut out: Vec<PathBuf> = Vec::new();
    for (_, _, _, p) in maps {
        if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libnccl")) && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// One line naming every missing library, or Ok.
pub fn check_present(need_nccl: bool) -> Result<()> {
    let cuda = crate::sys::cuda::present();
    let nvrtc = kernels::nvrtc_present();
    // SAFETY: only dlopen/dlclose of candidate names.
    let nccl = !need_nccl || unsafe { cudarc::nccl::sys::is_culib_present() };
    let mut missing = Vec::new();
    if !cuda {
        missing.push("libcuda.so.1 (the NVIDIA driver: no GPU or no driver on this machine)");
    }
    if !nvrtc {
        missing.push("libnvrtc (CUDA's runtime compiler: add the CUDA toolkit's lib64 or the nvidia-cuda-nvrtc wheel's lib folder to LD_LIBRARY_PATH)");
    }
    if !nccl {
        missing.push("libnccl.so (NCCL: install it, add its folder to LD_LIBRARY_PATH, or pass --nccl-lib PATH)");
    }
    if missing.is_empty() {
        return Ok(());
    }
    // What did load, so the one line also tells which NCCL a working setup would use.
    let mut found = Vec::new();
    if need_nccl && nccl {
        if let Ok(code) = super::nccl::version_code() {
            let at = loaded_nccl_files().first().map(|p| format!(" at {}", p.display())).unwrap_or_default();
            found.push(format!("libnccl {}{at}", super::nccl::version_of(code)));
        }
    }
    if nvrtc {
        if let Ok((a, b)) = kernels::nvrtc_version() {
            found.push(format!("libnvrtc {a}.{b}"));
        }
    }
    let found = if found.is_empty() { String::new() } else { format!(" (found: {})", found.join(", ")) };
    bail!(
        "the workload needs GPU libraries that cannot be loaded: {}{found}; `epdoctor explain` and `epdoctor env` work without them",
        missing.join("; ")
    )
}

/// Where `dlopen("libnccl.so.2")` resolves, for machines with NCCL's runtime package only (no
/// `libnccl.so` development link, which is the name cudarc asks for).
pub fn find_runtime_nccl() -> Option<PathBuf> {
    let name = c"libnccl.so.2";
    // SAFETY: dlopen/dlclose of a library name; no symbol is called.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return None;
        }
        let found = loaded_nccl_files().into_iter().next();
        libc::dlclose(h);
        found
    }
}
