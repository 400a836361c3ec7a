//! GPUs through the CUDA driver API (crate::sys::cuda, libcuda loaded at run time). Without a driver
//! this says so and returns; it never panics (cudarc panics when asked for a library it cannot load).
pub use crate::model::env::{Gpu, GpuInfo, GpuStatus};
use crate::sys::cuda as cu;
use cudarc::driver::sys::CUdevice_attribute as Attr;

pub fn probe() -> GpuInfo {
    let driver_version = crate::sys::procs::nvidia_driver_version();
    let mut info = GpuInfo {
        status: GpuStatus::NoDriver,
        detail: None,
        driver_version,
        cuda_driver_version: None,
        devices: Vec::new(),
        p2p: Vec::new(),
    };
    if !cu::present() {
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
    let fail = |e: cu::CuError| e.to_string();
    cu::init().map_err(fail)?;
    let cuda = cu::driver_version().ok().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    let n = cu::device_count().map_err(fail)?;
    let mut devs = Vec::new();
    let mut handles = Vec::new();
    for i in 0..n {
        let d = cu::device(i).map_err(|e| format!("device {i}: {e}"))?;
        handles.push(d);
        let name = cu::device_name(d).unwrap_or_else(|e| format!("(name unavailable: {e})"));
        let attr = |a| cu::attribute(d, a).ok();
        let major = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        let minor = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        devs.push(Gpu {
            index: i,
            name,
            compute_capability: match (major, minor) {
                (Some(a), Some(b)) => format!("{a}.{b}"),
                _ => "?".into(),
            },
            memory_bytes: cu::total_mem(d).unwrap_or(0) as u64,
            pci_bus_id: cu::pci_bus_id(d).ok(),
        });
    }
    let mut p2p = vec![vec![None; handles.len()]; handles.len()];
    for (i, &a) in handles.iter().enumerate() {
        for (j, &b) in handles.iter().enumerate() {
            if i != j {
                p2p[i][j] = cu::can_access_peer(a, b).ok();
            }
        }
    }
    Ok((cuda, devs, p2p))
}
