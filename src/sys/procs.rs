//! Parsers of /proc text files (pure, tested on fixtures), the readers of one process's entries
//! (stat, environ, cmdline, fd, maps: through the procfs crate) and the scan of live processes'
//! open files, mappings and sockets: the one copy of /proc for `env`, `clean` and repro's
//! leftovers and stacks. /proc/net/unix is parsed here: procfs drops the whole table on one line
//! it cannot read and cuts paths at a space.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use crate::model::env::{Holder, SysvSegment};

/// One line of /proc/net/unix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnixSocket {
    pub inode: u64,
    /// `@name` for abstract sockets, a file path for bound ones, None for unbound.
    pub path: Option<String>,
    /// 1 stream, 2 dgram, 5 seqpacket.
    pub kind: u16,
    /// 1 unconnected, 3 connected ...
    pub state: u8,
}

/// /proc/net/unix. Lines that do not parse are skipped (one bad line must not hide the rest);
/// the path is the rest of the line, so names with spaces survive.
pub fn parse_net_unix(text: &str) -> Vec<UnixSocket> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let mut rest = line.trim_start();
        let mut fields = Vec::with_capacity(7);
        for _ in 0..7 {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            fields.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
        if fields.len() < 7 {
            continue;
        }
        let (Ok(kind), Ok(state), Ok(inode)) =
            (u16::from_str_radix(fields[4], 16), u8::from_str_radix(fields[5], 16), fields[6].parse::<u64>())
        else {
            continue;
        };
        let path = (!rest.is_empty()).then(|| rest.trim_end().to_string());
        out.push(UnixSocket { inode, path, kind, state });
    }
    out
}

/// /proc/sysvipc/shm, by header names so that a kernel with extra columns still parses.
pub fn parse_sysvipc_shm(text: &str) -> Vec<SysvSegment> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let idx = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(ik), Some(iid), Some(ip), Some(is), Some(ic), Some(ina), Some(iu)) =
        (idx("key"), idx("shmid"), idx("perms"), idx("size"), idx("cpid"), idx("nattch"), idx("uid"))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        let get = |i: usize| f.get(i).copied();
        let parsed = (|| {
            Some(SysvSegment {
                key: get(ik)?.parse().ok()?,
                shmid: get(iid)?.parse().ok()?,
                perms: get(ip)?.to_string(),
                size: get(is)?.parse().ok()?,
                cpid: get(ic)?.parse().ok()?,
                nattch: get(ina)?.parse().ok()?,
                uid: get(iu)?.parse().ok()?,
                creator_alive: None,
            })
        })();
        if let Some(s) = parsed {
            out.push(s);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    pub source: String,
    pub target: String,
    pub fstype: String,
    pub options: String,
}

/// /proc/mounts (or /proc/self/mounts); `\040`-style escapes are decoded.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(Mount {
                source: unescape_octal(f.next()?),
                target: unescape_octal(f.next()?),
                fstype: f.next()?.to_string(),
                options: f.next()?.to_string(),
            })
        })
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `path` (longest matching mount point; later mounts shadow earlier ones).
pub fn mount_of<'a>(mounts: &'a [Mount], path: &str) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        let t = m.target.trim_end_matches('/');
        let inside = path == m.target || path.starts_with(&format!("{t}/")) || m.target == "/";
        if inside && best.is_none_or(|b| m.target.len() >= b.target.len()) {
            best = Some(m);
        }
    }
    best
}

/// /proc/self/cgroup lines: (hierarchy id, controllers, path).
pub fn parse_cgroup(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            Some((it.next()?.to_string(), it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect()
}

/// Container runtimes whose names show up in cgroup paths.
pub fn container_hint_in_cgroup(lines: &[(String, String, String)]) -> Option<String> {
    const MARKERS: [&str; 7] = ["docker", "kubepods", "containerd", "libpod", "lxc", "crio", "garden"];
    for (_, _, path) in lines {
        for m in MARKERS {
            if path.contains(m) {
                return Some(format!("cgroup path {path} names {m}"));
            }
        }
    }
    None
}

/// MemTotal and MemAvailable in bytes.
pub fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let mut it = rest.split_whitespace();
            let n: u64 = it.next()?.parse().ok()?;
            Some(if it.next() == Some("kB") { n * 1024 } else { n })
        })
    };
    (field("MemTotal"), field("MemAvailable"))
}

/// CapEff from /proc/<pid>/status.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

pub const CAP_SYS_PTRACE: u32 = 19;

/// The kernel module version from /proc/driver/nvidia/version.
pub fn parse_nvidia_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string)
}

/// The NVIDIA kernel module's version (None without the driver).
pub fn nvidia_driver_version() -> Option<String> {
    std::fs::read_to_string("/proc/driver/nvidia/version").ok().and_then(|t| parse_nvidia_driver_version(&t))
}

/// How many GPUs the NVIDIA driver lists (one folder each under /proc/driver/nvidia/gpus; 0
/// without the driver).
pub fn nvidia_gpu_count() -> usize {
    std::fs::read_dir("/proc/driver/nvidia/gpus").map(|rd| rd.flatten().count()).unwrap_or(0)
}

/// PRETTY_NAME from /etc/os-release.
pub fn parse_os_release(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim().trim_matches('"').to_string())
}

/// The processes under `proc_root` (normally /proc): its numeric entries, with their folders.
pub fn pids(proc_root: &Path) -> Vec<(i32, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(proc_root) else { return Vec::new() };
    rd.flatten().filter_map(|e| Some((e.file_name().to_str()?.parse::<i32>().ok()?, e.path()))).collect()
}

/// The fields of /proc/<pid>/stat used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    /// R, S, D, Z (zombie), X (dead), ...
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
}

impl Stat {
    /// Neither a zombie nor dead (`x` is the dead state of kernels 2.6.33 to 3.13).
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Whether `pid` is a live process (not a zombie) of our pid namespace.
pub fn alive(pid: i32) -> bool {
    stat(Path::new(&format!("/proc/{pid}"))).is_some_and(|s| s.is_live())
}

/// The process folder `dir` (`/proc/<pid>`, or a copy of one), opened through procfs.
fn process(dir: &Path) -> std::io::Result<procfs::process::Process> {
    procfs::process::Process::new_with_root(dir.to_path_buf()).map_err(io_error)
}

/// procfs's error as the io::Error the callers tell apart (a process that exited: NotFound).
fn io_error(e: procfs::ProcError) -> std::io::Error {
    use std::io::{Error, ErrorKind};
    match e {
        procfs::ProcError::NotFound(_) => Error::new(ErrorKind::NotFound, e.to_string()),
        procfs::ProcError::PermissionDenied(_) => Error::new(ErrorKind::PermissionDenied, e.to_string()),
        procfs::ProcError::Io(io, _) => io,
        other => Error::other(other.to_string()),
    }
}

/// /proc/<pid>/stat of the process folder `dir`.
pub fn stat(dir: &Path) -> Option<Stat> {
    let s = process(dir).ok()?.stat().ok()?;
    Some(Stat { comm: s.comm, state: s.state, ppid: s.ppid, pgrp: s.pgrp })
}

/// One variable of the environment the process started with (None: unset, or not readable).
pub fn environ_var(dir: &Path, name: &str) -> Option<String> {
    let env = process(dir).ok()?.environ().ok()?;
    env.get(std::ffi::OsStr::new(name)).map(|v| v.to_string_lossy().into_owned())
}

/// The process's arguments (none for kernel threads and zombies).
pub fn cmdline(dir: &Path) -> Vec<String> {
    process(dir).ok().and_then(|p| p.cmdline().ok()).unwrap_or_default()
}

/// What one of a process's fds points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdTarget {
    Path(PathBuf),
    /// `socket:[inode]`
    Socket(u64),
    /// pipes, anon inodes, ...
    Other,
}

/// The targets of the open fds of the process folder `dir`.
pub fn fd_targets(dir: &Path) -> std::io::Result<Vec<FdTarget>> {
    use procfs::process::FDTarget as T;
    let fds = process(dir)?.fd().map_err(io_error)?;
    Ok(fds
        .flatten()
        .map(|fd| match fd.target {
            T::Socket(ino) => FdTarget::Socket(ino),
            T::Path(p) if p.is_absolute() => FdTarget::Path(p),
            _ => FdTarget::Other,
        })
        .collect())
}

/// The file mappings of the process folder `dir` (`/proc/self`: this process): (dev major, dev
/// minor, inode, path).
pub fn mapped_files(dir: &Path) -> std::io::Result<Vec<(u32, u32, u64, PathBuf)>> {
    let maps = process(dir)?.maps().map_err(io_error)?;
    Ok(maps
        .into_iter()
        .filter_map(|m| match m.pathname {
            procfs::process::MMapPath::Path(p) if m.inode != 0 => Some((m.dev.0 as u32, m.dev.1 as u32, m.inode, p)),
            _ => None,
        })
        .collect())
}

/// What one pass over /proc/*/fd and /proc/*/maps saw.
#[derive(Debug, Default)]
pub struct ProcScan {
    /// fd target path -> holders
    pub fd_paths: HashMap<PathBuf, BTreeSet<Holder>>,
    /// socket inode -> holders
    pub sockets: HashMap<u64, BTreeSet<Holder>>,
    /// (dev major, dev minor, inode) of mapped files -> holders
    pub mapped: HashMap<(u32, u32, u64), BTreeSet<Holder>>,
    pub pids: BTreeSet<i32>,
    /// Processes whose fd or maps could not be read (not ours, without root).
    pub unreadable: BTreeMap<i32, String>,
}

impl ProcScan {
    /// Scan every process under `proc_root` (normally /proc). Mappings are recorded only for
    /// paths under one of `map_prefixes`, to keep the scan small.
    pub fn scan(proc_root: &Path, map_prefixes: &[PathBuf]) -> ProcScan {
        let mut s = ProcScan::default();
        let me = std::process::id() as i32;
        for (pid, dir) in pids(proc_root) {
            let comm = std::fs::read_to_string(dir.join("comm")).map(|c| c.trim().to_string()).unwrap_or_default();
            let holder = Holder { pid, comm };
            s.pids.insert(pid);
            match fd_targets(&dir) {
                Ok(fds) => {
                    for fd in fds {
                        match fd {
                            FdTarget::Socket(ino) => {
                                s.sockets.entry(ino).or_default().insert(holder.clone());
                            }
                            FdTarget::Path(p) => {
                                s.fd_paths.entry(p).or_default().insert(holder.clone());
                            }
                            FdTarget::Other => {}
                        }
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    s.pids.remove(&pid); // it exited while we looked
                    continue;
                }
                Err(err) => {
                    if pid != me {
                        s.unreadable.insert(pid, format!("fd: {err}"));
                    }
                }
            }
            match mapped_files(&dir) {
                Ok(maps) => {
                    for (maj, min, ino, path) in maps {
                        if map_prefixes.iter().any(|p| path.starts_with(p)) {
                            s.mapped.entry((maj, min, ino)).or_default().insert(holder.clone());
                        }
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    s.unreadable.entry(pid).or_insert_with(|| format!("maps: {err}"));
                }
            }
        }
        s
    }

    /// Live processes that have `path` open or mapped (matched by path for fds, by device and
    /// inode for mappings, so a renamed or bind-mounted view still counts).
    pub fn holders_of(&self, path: &Path) -> BTreeSet<Holder> {
        use std::os::unix::fs::MetadataExt;
        let mut out = BTreeSet::new();
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        for p in [path, canon.as_path()] {
            if let Some(h) = self.fd_paths.get(p) {
                out.extend(h.iter().cloned());
            }
        }
        if let Ok(md) = std::fs::metadata(path) {
            let dev = md.dev();
            let key = (libc_major(dev), libc_minor(dev), md.ino());
            if let Some(h) = self.mapped.get(&key) {
                out.extend(h.iter().cloned());
            }
        }
        out
    }

    pub fn alive(&self, pid: i32) -> bool {
        self.pids.contains(&pid)
    }

    /// Processes with a /dev/nvidia* device open: pid -> device names.
    pub fn nvidia_holders(&self) -> BTreeMap<Holder, BTreeSet<String>> {
        let mut out: BTreeMap<Holder, BTreeSet<String>> = BTreeMap::new();
        for (path, holders) in &self.fd_paths {
            let p = path.to_string_lossy();
            if let Some(dev) = p.strip_prefix("/dev/") {
                if super::names::is_nvidia_node(&p) {
                    for h in holders {
                        out.entry(h.clone()).or_default().insert(dev.to_string());
                    }
                }
            }
        }
        out
    }
}

fn libc_major(dev: u64) -> u32 {
    ((dev >> 8) & 0xfff) as u32 | ((dev >> 32) & !0xfff) as u32
}
fn libc_minor(dev: u64) -> u32 {
    (dev & 0xff) as u32 | ((dev >> 12) & !0xff) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_entries_from_a_fake_proc_folder() {
        // procfs takes the pid from the folder's name.
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("4242");
        std::fs::create_dir(&d).unwrap();
        let d = Dir(d);
        std::fs::write(d.path().join("stat"), "4242 (python3 (rank 0)) S 1 4240 4240 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 17 0 0 0 0 0 0\n").unwrap();
        std::fs::write(d.path().join("environ"), b"A=1\0RANK=3\0RANKS=x\0").unwrap();
        std::fs::write(d.path().join("cmdline"), b"python3\0-c\0print(1)\0").unwrap();
        std::fs::create_dir(d.path().join("fd")).unwrap();
        std::os::unix::fs::symlink("socket:[99]", d.path().join("fd/3")).unwrap();
        std::os::unix::fs::symlink("/dev/nvidia0", d.path().join("fd/4")).unwrap();
        std::os::unix::fs::symlink("pipe:[5]", d.path().join("fd/5")).unwrap();
        assert_eq!(environ_var(d.path(), "RANK").as_deref(), Some("3"));
        assert_eq!(environ_var(d.path(), "RAN"), None);
        assert_eq!(cmdline(d.path()), ["python3", "-c", "print(1)"]);
        let mut fds = fd_targets(d.path()).unwrap();
        fds.sort_by_key(|f| format!("{f:?}"));
        assert_eq!(fds, [FdTarget::Other, FdTarget::Path("/dev/nvidia0".into()), FdTarget::Socket(99)]);
        assert!(cmdline(&root.path().join("4243")).is_empty());
        // The command name may hold spaces and parentheses.
        assert_eq!(stat(d.path()), Some(Stat { comm: "python3 (rank 0)".into(), state: 'S', ppid: 1, pgrp: 4240 }));
    }

    #[test]
    fn own_process_is_alive_and_a_bogus_pid_is_not() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }

    #[test]
    fn own_mappings_name_the_test_binary() {
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let maps = mapped_files(Path::new("/proc/self")).unwrap();
        assert!(maps.iter().any(|(.., p)| *p == exe), "{exe:?} not in {maps:?}");
    }

    struct Dir(PathBuf);
    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    #[test]
    fn unix_socket_path_with_spaces_and_unbound() {
        let t = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                 0000000099ac2404: 00000003 00000000 00000000 0001 03  1501\n\
                 00000000e85f52a3: 00000002 00000000 00010000 0001 01  77 @/tmp/nccl-socket-0-2a3f\n\
                 00000000e85f52a4: 00000002 00000000 00010000 0001 01  78 /run/my sock\n\
                 garbage line\n";
        let v = parse_net_unix(t);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].path, None);
        assert_eq!(v[1].path.as_deref(), Some("@/tmp/nccl-socket-0-2a3f"));
        assert!(crate::sys::names::is_nccl_socket(v[1].path.as_deref().unwrap()));
        assert_eq!(v[2].path.as_deref(), Some("/run/my sock"));
    }

    #[test]
    fn mount_lookup_and_escapes() {
        let m = parse_mounts(
            "overlay / overlay rw 0 0\nshm /dev/shm tmpfs rw,size=65536k 0 0\n/dev/sda1 /mnt/my\\040disk ext4 rw 0 0\n",
        );
        assert_eq!(mount_of(&m, "/dev/shm").unwrap().fstype, "tmpfs");
        assert_eq!(mount_of(&m, "/dev/shm/nccl-x").unwrap().fstype, "tmpfs");
        assert_eq!(mount_of(&m, "/dev/shmx").unwrap().fstype, "overlay");
        assert_eq!(m[2].target, "/mnt/my disk");
    }

    #[test]
    fn driver_version_both_module_flavours() {
        let closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\nGCC version:  gcc 12";
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:48:16 UTC 2025";
        assert_eq!(parse_nvidia_driver_version(closed).as_deref(), Some("535.183.01"));
        assert_eq!(parse_nvidia_driver_version(open).as_deref(), Some("580.95.05"));
        assert_eq!(parse_nvidia_driver_version("GCC version: 12"), None);
    }

    #[test]
    fn cap_eff_bit() {
        let caps = parse_cap_eff("Name:\tbash\nCapEff:\t00000000a80425fb\n").unwrap();
        assert_eq!(caps & (1 << CAP_SYS_PTRACE), 0);
        let root = parse_cap_eff("CapEff:\t000001ffffffffff\n").unwrap();
        assert_ne!(root & (1 << CAP_SYS_PTRACE), 0);
    }

    #[test]
    fn dev_split_matches_libc() {
        let d = libc::makedev(259, 70000);
        assert_eq!((libc_major(d), libc_minor(d)), (259, 70000));
    }
}
