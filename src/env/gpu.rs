//! GPUs through the CUDA driver API (cudarc, loaded at run time). Without a driver this says so
//! and returns; it never panics (cudarc panics when asked for a library it cannot load).
use cudarc::driver::{result, sys};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub index: i32,
    pub name: String,
    pub compute_capability: String,
    pub memory_bytes: u64,
    pub pci_bus_id: Option<String>,
}

labelled! {
    /// What the CUDA driver probe found.
    pub enum GpuStatus {
        Ok => "ok",
        NoDriver => "no GPU driver",
        /// The driver loaded but a call failed (GpuInfo::detail says which).
        Error => "error",
        /// Not asked (tests, and callers that must not touch the GPU).
        NotProbed => "not probed",
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub status: GpuStatus,
    /// Why, when status is not "ok".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Kernel module version, from /proc/driver/nvidia/version.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports (cuDriverGetVersion), e.g. "13.0".
    pub cuda_driver_version: Option<String>,
    pub devices: Vec<Gpu>,
    /// p2p[i][j]: can device i access device j's memory (cuDeviceCanAccessPeer); None on the diagonal.
    pub p2p: Vec<Vec<Option<bool>>>,
}

pub fn probe() -> GpuInfo {
    let driver_version = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|t| super::procs::parse_nvidia_driver_version(&t));
    let mut info = GpuInfo {
        status: GpuStatus::NoDriver,
        detail: None,
        driver_version,
        cuda_driver_version: None,
        devices: Vec::new(),
        p2p: Vec::new(),
    };
    // SAFETY: only tries to dlopen libcuda; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        info.detail = Some("libcuda.so could not be loaded".into());
        return info;
    }
    // A missing symbol in an old driver makes cudarc panic; keep that from ending the command.
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let res = std::panic::catch_unwind(query);
    std::panic::set_hook(prev);
    match res {
        Ok(Ok((cuda, devices, p2p))) => {
            info.status = GpuStatus::Ok;
            info.cuda_driver_version = cuda;
            info.devices = devices;
            info.p2p = p2p;
        }
        Ok(Err(e)) => {
            info.status = GpuStatus::Error;
            info.detail = Some(e);
        }
        Err(p) => {
            info.status = GpuStatus::Error;
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the CUDA driver library misbehaved".into());
            info.detail = Some(msg);
        }
    }
    info
}

type Query = (Option<String>, Vec<Gpu>, Vec<Vec<Option<bool>>>);

fn query() -> Result<Query, String> {
    result::init().map_err(|e| format!("cuInit failed: {e}"))?;
    let mut v: std::ffi::c_int = 0;
    // SAFETY: v is a valid out pointer.
    let cuda = (unsafe { sys::cuDriverGetVersion(&mut v) } == sys::CUresult::CUDA_SUCCESS)
        .then(|| format!("{}.{}", v / 1000, (v % 1000) / 10));
    let n = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    let mut devs = Vec::new();
    let mut handles = Vec::new();
    for i in 0..n {
        let d = result::device::get(i).map_err(|e| format!("cuDeviceGet({i}) failed: {e}"))?;
        handles.push(d);
        let name = result::device::get_name(d).unwrap_or_else(|e| format!("(name unavailable: {e})"));
        // SAFETY: d is a device handle from cuDeviceGet.
        let attr = |a| unsafe { result::device::get_attribute(d, a) }.ok();
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        // SAFETY: as above.
        let mem = unsafe { result::device::total_mem(d) }.unwrap_or(0) as u64;
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer is 32 bytes and we pass its length.
        let pci = (unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, d) }
            == sys::CUresult::CUDA_SUCCESS)
            // SAFETY: the driver wrote a NUL-terminated string into the buffer.
            .then(|| unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned());
        devs.push(Gpu {
            index: i,
            name,
            compute_capability: match (major, minor) {
                (Some(a), Some(b)) => format!("{a}.{b}"),
                _ => "?".into(),
            },
            memory_bytes: mem,
            pci_bus_id: pci,
        });
    }
    let mut p2p = vec![vec![None; handles.len()]; handles.len()];
    for (i, &a) in handles.iter().enumerate() {
        for (j, &b) in handles.iter().enumerate() {
            if i == j {
                continue;
            }
            let mut can: std::ffi::c_int = 0;
            // SAFETY: valid out pointer and device handles.
            if unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) } == sys::CUresult::CUDA_SUCCESS {
                p2p[i][j] = Some(can != 0);
            }
        }
    }
    Ok((cuda, devs, p2p))
}
