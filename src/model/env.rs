//! The environment report of `env` and `report`: what `env::collect` gathers and the env writers
//! print. Its JSON is the public contract (docs/json-contract.md); the collectors live in `env`.

use serde::{Deserialize, Serialize};

/// An enum whose JSON (and text) is a fixed label per variant: the strings env's JSON contract has
/// always had (docs: "status": "no GPU driver", "state": "in use").
macro_rules! labelled {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vm])* #[serde(rename = $s)] $v,)+
        }
        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s,)+
                }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

// The report and the host.

pub const ENV_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
pub struct EnvReport {
    pub schema_version: u32,
    pub tool_version: String,
    pub host: Host,
    pub gpu: GpuInfo,
    pub libraries: Libraries,
    pub python: PythonInfo,
    pub variables: Vec<Var>,
    pub config_files: Vec<ConfFile>,
    pub shm: ShmInfo,
    pub nccl_sockets: Vec<SocketInfo>,
    pub sysv_segments: Vec<SysvSegment>,
    pub gpu_processes: Vec<GpuProcess>,
    pub limits: Limits,
    pub process_scan: ScanSummary,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Host {
    pub hostname: Option<String>,
    pub os: Option<String>,
    pub kernel: Option<String>,
    pub arch: String,
    pub container: Container,
    pub cpus_online: Option<u64>,
    /// What this process may use (affinity and cgroup quota).
    pub cpus_available: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub memory_available_bytes: Option<u64>,
    /// cgroup memory limit, when one is set.
    pub cgroup_memory_limit_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Container {
    pub detected: bool,
    pub evidence: Vec<String>,
    pub cgroup: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SocketInfo {
    pub path: String,
    pub inode: u64,
    pub holders: Vec<Holder>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuProcess {
    pub pid: i32,
    pub comm: String,
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Limits {
    /// RLIMIT_MEMLOCK in bytes; null means unlimited.
    pub memlock_soft_bytes: Option<u64>,
    pub memlock_hard_bytes: Option<u64>,
    /// /proc/sys/kernel/yama/ptrace_scope; null when Yama is absent.
    pub ptrace_scope: Option<u32>,
    pub cap_sys_ptrace: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct ScanSummary {
    pub processes: usize,
    /// Processes whose open files could not be read (run as root to see them).
    pub unreadable: usize,
}

// GPUs (collected by env/gpu.rs).

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

// NCCL and NVSHMEM libraries (env/libs.rs).

/// One library file (symlinks folded into their target).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LibFile {
    /// The first path it was found under.
    pub path: String,
    /// Where the symlinks lead.
    pub real_path: String,
    /// Every name it was seen under.
    pub names: Vec<String>,
    /// The paths in other folders it was also found under (a folder reached through a link, such
    /// as a venv's lib64 -> lib): the same file, listed once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_at: Vec<String>,
    /// How it was found: "LD_LIBRARY_PATH", "loader cache", "system dir", "python: nvidia/nccl" ...
    pub found_via: Vec<String>,
    pub size: u64,
    pub version: Option<String>,
    /// CUDA version the library was built for, when its version string says.
    pub cuda: Option<String>,
    /// Where the version came from: "rodata string", "file scan", "file name".
    pub version_from: Option<String>,
    /// NVSHMEM only: whether it was built with NCCL support.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_support: Option<NcclSupport>,
    /// True for the copy the dynamic loader gives a program that asks for `libnccl.so.2`
    /// (or `libnvshmem_host.so.3`) and has no RPATH of its own.
    pub loader_default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NcclSupport {
    /// Some(true/false) when known.
    pub built_with_nccl: Option<bool>,
    /// How we know, in words.
    pub evidence: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Libraries {
    pub nccl: Vec<LibFile>,
    pub nvshmem: Vec<LibFile>,
    /// Folders searched, in order, with the reason each was searched.
    pub searched: Vec<Searched>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Searched {
    pub dir: String,
    pub via: String,
}

// python3 and torch (env/python.rs).

labelled! {
    /// How the python3 probe ended.
    #[derive(Default)]
    pub enum PythonStatus {
        Ok => "ok",
        NotFound => "not found",
        TimedOut => "timed out",
        /// Also the probe's own answer before it is judged (it carries no status).
        #[default]
        Error => "error",
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PythonInfo {
    #[serde(default)]
    pub status: PythonStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
    #[serde(default)]
    pub executable: Option<String>,
    #[serde(default)]
    pub site_packages: Vec<String>,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub torch_path: Option<String>,
    #[serde(default)]
    pub torch_cuda: Option<String>,
    /// torch.cuda.nccl.version(): the NCCL torch was built with (and, for wheels, bundles).
    #[serde(default)]
    pub torch_nccl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_error: Option<String>,
}

// Variables and NCCL config files (env/vars.rs).

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Var {
    pub name: String,
    pub value: String,
    /// The value was replaced because the name looks secret.
    pub masked: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfFile {
    pub path: String,
    /// Why NCCL reads it: "NCCL_CONF_FILE", "~/.nccl.conf", "/etc/nccl.conf".
    pub role: String,
    pub present: bool,
    pub entries: Vec<Var>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// /dev/shm (env/shm.rs).

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ShmFile {
    pub path: String,
    pub size: u64,
    /// Seconds since the epoch.
    pub modified: Option<u64>,
    pub uid: u32,
    pub holders: Vec<Holder>,
    /// From a `torch_<pid>_...` name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creator_pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creator_alive: Option<bool>,
    pub state: ShmState,
}

labelled! {
    /// Whether a /dev/shm file is still someone's (env/shm.rs says how this is told).
    pub enum ShmState {
        InUse => "in use",
        Stale => "stale",
        Unknown => "unknown",
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct ShmInfo {
    pub dir: String,
    pub exists: bool,
    pub fstype: Option<String>,
    pub mount_options: Option<String>,
    pub size_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub files: Vec<ShmFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// Processes and SysV segments (from /proc: sys/procs.rs).

/// One SysV shared-memory segment from /proc/sysvipc/shm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SysvSegment {
    pub key: i64,
    pub shmid: u64,
    /// As the kernel prints it (octal).
    pub perms: String,
    pub size: u64,
    pub cpid: i32,
    pub nattch: u64,
    pub uid: u64,
    /// Filled in by the caller: is the creator pid alive in our pid namespace?
    pub creator_alive: Option<bool>,
}

/// A live process that holds something we asked about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Holder {
    pub pid: i32,
    pub comm: String,
}

// The checklist (env/checks.rs) and the byte sizes every writer prints.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub id: String,
    pub status: Status,
    pub title: String,
    pub detail: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<String>,
}

/// A byte count in binary units, one decimal below 100 (`64 MiB`, `1.5 GiB`, `12 B`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_keep_the_labels_of_the_json_contract() {
        let json = |v: serde_json::Value| v.as_str().unwrap().to_string();
        for (s, label) in [
            (GpuStatus::Ok, "ok"),
            (GpuStatus::NoDriver, "no GPU driver"),
            (GpuStatus::Error, "error"),
            (GpuStatus::NotProbed, "not probed"),
        ] {
            assert_eq!(json(serde_json::to_value(s).unwrap()), label);
        }
        for (s, label) in [
            (PythonStatus::Ok, "ok"),
            (PythonStatus::NotFound, "not found"),
            (PythonStatus::TimedOut, "timed out"),
            (PythonStatus::Error, "error"),
        ] {
            assert_eq!(json(serde_json::to_value(s).unwrap()), label);
        }
        for (s, label) in [(ShmState::InUse, "in use"), (ShmState::Stale, "stale"), (ShmState::Unknown, "unknown")] {
            assert_eq!(json(serde_json::to_value(s).unwrap()), label);
            assert_eq!(s.to_string(), label);
        }
        // `clean` lines them up as it did the strings.
        assert_eq!(format!("[{:<7}]", ShmState::Stale), "[stale  ]");
    }

    #[test]
    fn bytes() {
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
