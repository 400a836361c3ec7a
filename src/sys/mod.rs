//! What epdoctor knows of the operating system, one copy each: the machine's name, /proc (through
//! procfs), the /dev/shm default, the NVIDIA driver's GPU list, the names NCCL and PyTorch leave
//! behind, the CUDA driver wrapper and the marker lines the worker prints and repro reads.

pub(crate) mod cuda;
pub mod markers;
pub mod names;
pub mod procs;

/// Where NCCL and PyTorch put their shared-memory files.
pub const SHM_DIR: &str = "/dev/shm";

/// This machine's name (of its UTS namespace), as /proc/sys/kernel/hostname gives it; None when
/// it cannot be read.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())
}
