//! /dev/shm: its size, and the NCCL (`nccl-*`) and PyTorch (`torch_*`) files in it, each with
//! the live processes that hold it.
//!
//! How "creator is alive" is decided: NCCL's file names carry no pid (mkstemp `nccl-XXXXXX`), so a
//! file counts as in use when any live process has it open (/proc/*/fd) or mapped (/proc/*/maps,
//! matched by device and inode). The creator keeps it mapped for the communicator's life, so an
//! unheld file's creator is gone. PyTorch's names (`torch_<pid>_...`) do carry the creator's pid,
//! which is checked too.
//!
//! /proc cannot see everything (another pid namespace sharing /dev/shm, a process whose maps are
//! unreadable), so the kernel is asked as well: a write lease (F_SETLEASE F_WRLCK) is granted only
//! when no other open file description of the inode exists, and a mapping keeps its file open even
//! after its fd is closed. Lease granted and no holder seen: "stale". Lease refused: "in use". Lease
//! impossible (not the owner, leases disabled): "stale" only if /proc could be read completely,
//! else "unknown", never "stale".
use std::path::{Path, PathBuf};

use crate::model::env::Holder;
pub use crate::model::env::{ShmFile, ShmInfo, ShmState};
use crate::sys::procs::{self, ProcScan};

fn torch_creator(name: &str) -> Option<i32> {
    name.strip_prefix("torch_")?.split('_').next()?.parse().ok()
}

/// Size and free space of the file system holding `dir`.
pub fn fs_space(dir: &Path) -> Option<(u64, u64)> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    let frag = s.fragment_size() as u64;
    Some((s.blocks() as u64 * frag, s.blocks_available() as u64 * frag))
}

/// The files of `dir` that `keep` selects, with holders and state.
pub fn list(dir: &Path, scan: &ProcScan, keep: impl Fn(&str) -> bool) -> std::io::Result<Vec<ShmFile>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if !keep(&name) {
            continue;
        }
        let Ok(md) = e.path().symlink_metadata() else { continue };
        if !md.is_file() {
            continue;
        }
        let holders: Vec<Holder> = scan.holders_of(&e.path()).into_iter().collect();
        let creator_pid = torch_creator(&name);
        let creator_alive = creator_pid.map(|p| scan.alive(p));
        let state = if !holders.is_empty() || creator_alive == Some(true) {
            ShmState::InUse
        } else {
            match open_elsewhere(&e.path()) {
                Some(true) => ShmState::InUse,
                Some(false) => ShmState::Stale,
                None if scan.unreadable.is_empty() => ShmState::Stale,
                None => ShmState::Unknown,
            }
        };
        out.push(ShmFile {
            path: e.path().display().to_string(),
            size: md.len(),
            modified: md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
            uid: md.uid(),
            holders,
            creator_pid,
            creator_alive,
            state,
        });
    }
    Ok(out)
}

/// A lease break would signal us with SIGIO, whose default action ends the process.
fn ignore_sigio() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: SIG_IGN installs no handler code.
        let _ =
            unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGIO, nix::sys::signal::SigHandler::SigIgn) };
    });
}

/// Take a write lease on `path` (opened read-only): granted only if no other process has the
/// file open or mapped. Returns the fd holding the lease, Err(true) when refused because it is
/// open elsewhere, Err(false) when a lease cannot be had at all.
fn take_lease(path: &Path) -> Result<std::fs::File, bool> {
    use std::os::fd::AsRawFd;
    ignore_sigio();
    use std::os::unix::fs::OpenOptionsExt;
    // Never block on a FIFO or follow a link swapped in since the listing.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|_| false)?;
    if !f.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(false);
    }
    // SAFETY: fcntl on an fd we own.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    if rc == 0 {
        return Ok(f);
    }
    let err = std::io::Error::last_os_error();
    Err(matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)))
}

fn release_lease(f: std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: as above; closing the fd would drop the lease anyway.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
}

/// Some(true): another process has it open or mapped. Some(false): nobody. None: cannot tell.
pub fn open_elsewhere(path: &Path) -> Option<bool> {
    match take_lease(path) {
        Ok(f) => {
            release_lease(f);
            Some(false)
        }
        Err(true) => Some(true),
        Err(false) => None,
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Unlink {
    Deleted,
    /// Open or mapped by someone (seen by the lease).
    Held,
    /// The lease could not be had and `fallback_ok` was false.
    Unsure,
}

/// Unlink `path` while holding a write lease, so nobody can have it open at that moment. Without
/// lease support, unlink only when `fallback_ok` (a complete /proc scan found no holder).
pub fn unlink_if_unheld(path: &Path, fallback_ok: bool) -> std::io::Result<Unlink> {
    match take_lease(path) {
        Ok(f) => {
            let r = std::fs::remove_file(path);
            release_lease(f);
            r.map(|_| Unlink::Deleted)
        }
        Err(true) => Ok(Unlink::Held),
        Err(false) if fallback_ok => std::fs::remove_file(path).map(|_| Unlink::Deleted),
        Err(false) => Ok(Unlink::Unsure),
    }
}

/// Everything about `dir` (normally /dev/shm).
pub fn collect(dir: &Path, mounts: &[procs::Mount], scan: &ProcScan) -> ShmInfo {
    let mut info = ShmInfo { dir: dir.display().to_string(), exists: dir.is_dir(), ..Default::default() };
    if !info.exists {
        info.error = Some(format!("{} does not exist", dir.display()));
        return info;
    }
    if let Some(m) = procs::mount_of(mounts, &info.dir) {
        info.fstype = Some(m.fstype.clone());
        info.mount_options = Some(m.options.clone());
    }
    if let Some((size, free)) = fs_space(dir) {
        info.size_bytes = Some(size);
        info.free_bytes = Some(free);
    }
    match list(dir, scan, |n| crate::sys::names::is_nccl_shm(n) || crate::sys::names::is_torch_shm(n)) {
        Ok(f) => info.files = f,
        Err(e) => info.error = Some(format!("cannot list {}: {e}", dir.display())),
    }
    info
}

/// Paths worth recording in a mapping scan for `dir`.
pub fn map_prefixes(dir: &Path) -> Vec<PathBuf> {
    let mut v = vec![dir.to_path_buf()];
    if let Ok(c) = std::fs::canonicalize(dir) {
        if c != dir {
            v.push(c);
        }
    }
    v
}
