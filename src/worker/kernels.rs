//! The workload's CUDA sources (embedded at build time), compiled to PTX by NVRTC and cached on
//! disk by source hash + architecture + NVRTC version.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudarc::nvrtc::sys as nv;
use sha2::{Digest, Sha256};

/// Bumped when the compile options or the cache format change.
const CACHE_SALT: &str = "epdoctor-kernels-v1";

/// `(path, content)` of every embedded `kernels/` file.
pub fn sources() -> impl Iterator<Item = (&'static str, &'static str)> {
    crate::meta::EMBEDDED.iter().copied().filter(|(p, _)| p.starts_with("kernels/"))
}

/// The compilation units (`kernels/*.cu`).
pub fn units() -> Vec<(&'static str, &'static str)> {
    sources().filter(|(p, _)| p.ends_with(".cu")).collect()
}

pub struct Compiled {
    pub ptx: String,
    pub entries: Vec<String>,
    /// Where the PTX came from: "cache" or "nvrtc".
    pub origin: &'static str,
    pub secs: f64,
}

/// Compute capabilities of NVIDIA GPUs from Volta on (the kernels need 7.0), as NVRTC of CUDA 12
/// and 13 names them; checked before NVRTC is loaded so a typo is a usage error on any machine.
const ARCHES: &[u32] = &[70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121];

/// `sm_90`, `compute_90`, `sm_90a`, `sm_100f`, ... (what NVRTC's --gpu-architecture takes).
pub fn check_arch(arch: &str) -> Result<()> {
    let Some(rest) = arch.strip_prefix("sm_").or_else(|| arch.strip_prefix("compute_")) else {
        bail!("--arch {arch}: expected sm_XY or compute_XY, e.g. sm_90");
    };
    let digits = rest.trim_end_matches(['a', 'f']);
    let suffix = &rest[digits.len()..];
    let Ok(n) = digits.parse::<u32>() else {
        bail!("--arch {arch}: expected sm_XY or compute_XY, e.g. sm_90");
    };
    if !digits.chars().all(|c| c.is_ascii_digit()) || suffix.len() > 1 {
        bail!("--arch {arch}: expected sm_XY or compute_XY, e.g. sm_90");
    }
    if n < 70 {
        bail!("--arch {arch}: the kernels need compute capability 7.0 or newer (sm_70+)");
    }
    if !ARCHES.contains(&n) || (!suffix.is_empty() && n < 90) {
        let known: Vec<String> = ARCHES.iter().map(|a| format!("sm_{a}")).collect();
        bail!(
            "--arch {arch}: not a compute capability NVRTC knows; one of {} (a or f suffix from sm_90)",
            known.join(", ")
        );
    }
    Ok(())
}

/// Whether libnvrtc can be loaded (cudarc panics on first use otherwise).
pub fn nvrtc_present() -> bool {
    // SAFETY: only dlopen/dlclose of candidate names.
    unsafe { nv::is_culib_present() }
}

pub fn nvrtc_missing_message() -> String {
    "libnvrtc (NVIDIA's runtime compiler) was not found: install the CUDA toolkit's NVRTC, or \
     `pip install nvidia-cuda-nvrtc-cu12` and put its nvidia/cuda_nvrtc/lib folder on LD_LIBRARY_PATH"
        .to_string()
}

pub fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters.
    let r = unsafe { nv::nvrtcVersion(&mut major, &mut minor) };
    if r != nv::nvrtcResult::NVRTC_SUCCESS {
        bail!("nvrtcVersion failed: {r:?}");
    }
    Ok((major, minor))
}

fn options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()]
}

fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("epdoctor").join("kernels"))
}

fn cache_key(unit: &str, arch: &str, nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(CACHE_SALT.as_bytes());
    h.update(format!("\0{unit}\0{arch}\0nvrtc {}.{}\0", nvrtc.0, nvrtc.1).as_bytes());
    for o in options(arch) {
        h.update(o.as_bytes());
        h.update(b"\0");
    }
    // Every kernel file, headers included: any edit invalidates the cache.
    let mut files: Vec<_> = sources().collect();
    files.sort();
    for (p, c) in files {
        h.update(p.as_bytes());
        h.update(b"\0");
        h.update(c.as_bytes());
        h.update(b"\0");
    }
    h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// Entry points declared in a PTX text (`.entry name(` / `.visible .entry name(`).
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let i = l.find(".entry ")?;
            let rest = l[i + 7..].trim_start();
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Compile one unit for `arch`, from the cache when possible.
pub fn compile(unit: &'static str, arch: &str, use_cache: bool) -> Result<Compiled> {
    check_arch(arch)?;
    if !nvrtc_present() {
        bail!(nvrtc_missing_message());
    }
    let src =
        sources().find(|(p, _)| *p == unit).map(|(_, c)| c).with_context(|| format!("no embedded kernel {unit}"))?;
    let ver = nvrtc_version()?;
    let start = Instant::now();
    let stem = Path::new(unit).file_stem().and_then(|s| s.to_str()).unwrap_or("kernel");
    let cache_file = cache_dir().map(|d| d.join(format!("{stem}-{arch}-{}.ptx", cache_key(unit, arch, ver))));
    if use_cache {
        if let Some(ptx) = cache_file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()) {
            if ptx.contains(".entry") {
                let entries = ptx_entries(&ptx);
                return Ok(Compiled { ptx, entries, origin: "cache", secs: start.elapsed().as_secs_f64() });
            }
        }
    }
    let ptx = nvrtc_compile(unit, src, arch)
        .with_context(|| format!("NVRTC {}.{} compiling {unit} for {arch}", ver.0, ver.1))?;
    if let Some(f) = &cache_file {
        // Best effort: a read-only home only costs a recompile next time.
        let _ = write_atomic(f, ptx.as_bytes());
    }
    let entries = ptx_entries(&ptx);
    Ok(Compiled { ptx, entries, origin: "nvrtc", secs: start.elapsed().as_secs_f64() })
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn nvrtc_compile(unit: &str, src: &str, arch: &str) -> Result<String> {
    // Headers are handed to NVRTC from the embedded copies, by their name relative to kernels/.
    let headers: Vec<(CString, CString)> = sources()
        .filter(|(p, _)| p.ends_with(".cuh"))
        .map(|(p, c)| Ok((CString::new(c)?, CString::new(p.trim_start_matches("kernels/"))?)))
        .collect::<Result<_>>()?;
    let hdr_src: Vec<*const c_char> = headers.iter().map(|(c, _)| c.as_ptr()).collect();
    let hdr_names: Vec<*const c_char> = headers.iter().map(|(_, n)| n.as_ptr()).collect();
    let csrc = CString::new(src)?;
    let cname = CString::new(unit)?;
    let opts: Vec<CString> = options(arch).into_iter().map(CString::new).collect::<std::result::Result<_, _>>()?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();

    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer outlives the program; counts match the vectors.
    unsafe {
        let r = nv::nvrtcCreateProgram(
            &mut prog,
            csrc.as_ptr(),
            cname.as_ptr(),
            hdr_src.len() as i32,
            hdr_src.as_ptr(),
            hdr_names.as_ptr(),
        );
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            bail!("nvrtcCreateProgram: {r:?}");
        }
        let r = nv::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let log = program_log(prog);
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            nv::nvrtcDestroyProgram(&mut prog);
            bail!("{r:?}\n{}", log.trim_end());
        }
        let mut size = 0usize;
        let r = nv::nvrtcGetPTXSize(prog, &mut size);
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            nv::nvrtcDestroyProgram(&mut prog);
            bail!("nvrtcGetPTXSize: {r:?}");
        }
        let mut buf = vec![0u8; size.max(1)];
        let r = nv::nvrtcGetPTX(prog, buf.as_mut_ptr() as *mut c_char);
        nv::nvrtcDestroyProgram(&mut prog);
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            bail!("nvrtcGetPTX: {r:?}");
        }
        let text = CStr::from_bytes_until_nul(&buf).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(text)
    }
}

unsafe fn program_log(prog: nv::nvrtcProgram) -> String {
    let mut size = 0usize;
    if nv::nvrtcGetProgramLogSize(prog, &mut size) != nv::nvrtcResult::NVRTC_SUCCESS || size <= 1 {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    if nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) != nv::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    CStr::from_bytes_until_nul(&buf).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_validation() {
        assert!(check_arch("sm_90").is_ok());
        assert!(check_arch("sm_90a").is_ok());
        assert!(check_arch("compute_80").is_ok());
        assert!(check_arch("sm_60").is_err());
        assert!(check_arch("banana").is_err());
        assert!(check_arch("sm_").is_err());
        assert!(check_arch("sm_9x0").is_err());
        assert!(check_arch("sm_100f").is_ok() && check_arch("sm_120a").is_ok());
        for bad in ["sm_9000", "sm_91", "sm_80a", "sm_90aa", "sm_+90"] {
            let e = check_arch(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn entries_from_ptx() {
        let ptx = ".version 8.0\n.target sm_90\n.visible .entry ep_notify(\n\t.param .u64 a\n)\n.visible .entry ep_barrier(\n";
        assert_eq!(ptx_entries(ptx), vec!["ep_notify", "ep_barrier"]);
    }

    #[test]
    fn units_are_embedded() {
        let u = units();
        assert!(u.iter().any(|(p, _)| *p == "kernels/intranode.cu"), "{:?}", u.iter().map(|x| x.0).collect::<Vec<_>>());
        assert!(sources().any(|(p, _)| p == "kernels/ep_common.cuh"));
    }

    #[test]
    fn cache_key_depends_on_arch() {
        assert_ne!(
            cache_key("kernels/intranode.cu", "sm_90", (12, 9)),
            cache_key("kernels/intranode.cu", "sm_80", (12, 9))
        );
        assert_ne!(
            cache_key("kernels/intranode.cu", "sm_90", (12, 9)),
            cache_key("kernels/intranode.cu", "sm_90", (13, 0))
        );
    }
}
