//! What epdoctor knows of the operating system, one copy each: the machine's name, /proc (through
//! procfs), the /dev/shm default, the NVIDIA driver's GPU list, the names NCCL and PyTorch leave
//! behind, the CUDA driver wrapper and the marker lines the worker prints and repro reads.

pub(crate) mod cuda;
pub mod markers;
pub mod names;
pub mod procs;

/// Where NCCL and PyTorch put their shared-memory files.
pub const SHM_DIR: &str = "/dev/shm";

/// Make this process the subreaper of its descendants (PR_SET_CHILD_SUBREAPER): an orphan below it
/// (a rank's child that called setsid and whose parent exited) is reparented here instead of to
/// init, so it can still be found and ended. False where the kernel refused (before Linux 3.4).
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) == 0 }
}

/// This machine's name (of its UTS namespace), as /proc/sys/kernel/hostname gives it; None when
/// it cannot be read.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())
}
