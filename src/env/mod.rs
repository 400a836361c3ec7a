//! `env` and `clean`: the environment and leftovers a bug report needs.
//!
//! `collect` gathers one [`EnvReport`]; `checks` turns it into a checklist whose every line cites
//! its public source; `output::env` writes it as text, Markdown or JSON.

pub mod checks;
pub mod clean;
pub mod elf;
pub mod gpu;
pub mod libs;
pub mod python;
pub mod shm;
pub mod vars;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::model::env::{
    Container, EnvReport, GpuProcess, Host, Limits, ScanSummary, SocketInfo, ENV_SCHEMA_VERSION,
};
use crate::sys::procs::{self, ProcScan};

/// Where `collect` looks; tests point these at fixtures and temp folders.
#[derive(Debug, Clone)]
pub struct Sources {
    pub proc_root: PathBuf,
    pub shm_dir: PathBuf,
    pub etc: PathBuf,
    pub python_timeout: Duration,
    pub probe_gpu: bool,
}

impl Sources {
    pub fn system(python_timeout: Duration) -> Sources {
        Sources {
            proc_root: "/proc".into(),
            shm_dir: crate::sys::SHM_DIR.into(),
            etc: "/etc".into(),
            python_timeout,
            probe_gpu: true,
        }
    }
}

fn read(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

pub fn collect(src: &Sources) -> EnvReport {
    let proc_ = &src.proc_root;
    let env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect();
    let getenv = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());

    let scan = ProcScan::scan(proc_, &shm::map_prefixes(&src.shm_dir));
    let mounts = read(proc_.join("self/mounts")).map(|t| procs::parse_mounts(&t)).unwrap_or_default();

    let host = collect_host(src, &getenv);
    let gpu = if src.probe_gpu {
        gpu::probe()
    } else {
        gpu::GpuInfo {
            status: gpu::GpuStatus::NotProbed,
            detail: None,
            driver_version: None,
            cuda_driver_version: None,
            devices: vec![],
            p2p: vec![],
        }
    };
    let python = python::probe(src.python_timeout);

    let homes: Vec<(String, String)> = ["NCCL_HOME", "NVSHMEM_HOME", "CUDA_HOME"]
        .iter()
        .filter_map(|n| getenv(n).map(|v| (n.to_string(), v)))
        .collect();
    let dirs = libs::search_dirs(getenv("LD_LIBRARY_PATH").as_deref(), &python.site_packages, &homes);
    let cache = ldconfig_cache();
    let libraries = libs::find(&dirs, &cache);

    let variables = vars::collect(env.iter().cloned());
    let home = getenv("HOME").map(PathBuf::from);
    let config_files = vars::conf_files(getenv("NCCL_CONF_FILE").as_deref(), home.as_deref(), &src.etc);

    let shm = shm::collect(&src.shm_dir, &mounts, &scan);

    let nccl_sockets = read(proc_.join("net/unix"))
        .map(|t| procs::parse_net_unix(&t))
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.path.as_deref().is_some_and(crate::sys::names::is_nccl_socket))
        .map(|s| SocketInfo {
            path: s.path.clone().unwrap_or_default(),
            inode: s.inode,
            holders: scan.sockets.get(&s.inode).map(|h| h.iter().cloned().collect()).unwrap_or_default(),
        })
        .collect();

    let mut sysv_segments = read(proc_.join("sysvipc/shm")).map(|t| procs::parse_sysvipc_shm(&t)).unwrap_or_default();
    for s in &mut sysv_segments {
        s.creator_alive = Some(scan.alive(s.cpid));
    }

    let me = std::process::id() as i32;
    let gpu_processes = scan
        .nvidia_holders()
        .into_iter()
        .filter(|(h, _)| h.pid != me)
        .map(|(h, d)| GpuProcess { pid: h.pid, comm: h.comm, devices: d.into_iter().collect() })
        .collect();

    let limits = collect_limits(proc_);
    let process_scan = ScanSummary { processes: scan.pids.len(), unreadable: scan.unreadable.len() };

    let mut r = EnvReport {
        schema_version: ENV_SCHEMA_VERSION,
        tool_version: crate::meta::VERSION.to_string(),
        host,
        gpu,
        libraries,
        python,
        variables,
        config_files,
        shm,
        nccl_sockets,
        sysv_segments,
        gpu_processes,
        limits,
        process_scan,
        checks: Vec::new(),
    };
    r.checks = checks::run(&r);
    r
}

fn collect_host(src: &Sources, getenv: &dyn Fn(&str) -> Option<String>) -> Host {
    let p = &src.proc_root;
    let cgroup_text = read(p.join("self/cgroup")).unwrap_or_default();
    let cg = procs::parse_cgroup(&cgroup_text);
    let mut evidence = Vec::new();
    if Path::new("/.dockerenv").exists() {
        evidence.push("/.dockerenv exists".to_string());
    }
    if Path::new("/run/.containerenv").exists() {
        evidence.push("/run/.containerenv exists (podman)".to_string());
    }
    if let Some(h) = procs::container_hint_in_cgroup(&cg) {
        evidence.push(h);
    }
    if getenv("KUBERNETES_SERVICE_HOST").is_some() {
        evidence.push("KUBERNETES_SERVICE_HOST is set".to_string());
    }
    if let Some(c) = getenv("container") {
        evidence.push(format!("container={c} in the environment"));
    }
    let (total, avail) = read(p.join("meminfo")).map(|t| procs::parse_meminfo(&t)).unwrap_or((None, None));
    // cgroup v2 memory.max, else v1 memory.limit_in_bytes; huge v1 numbers mean "no limit".
    let cg_limit = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .and_then(|t| t.trim().parse::<u64>().ok())
        .filter(|&v| v < (1u64 << 60));
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    Host {
        hostname: crate::sys::hostname(),
        os: read(src.etc.join("os-release")).and_then(|t| procs::parse_os_release(&t)),
        kernel: read(p.join("sys/kernel/osrelease")).map(|s| s.trim().to_string()),
        arch: std::env::consts::ARCH.to_string(),
        container: Container {
            detected: !evidence.is_empty(),
            evidence,
            cgroup: cgroup_text.lines().map(str::to_string).collect(),
        },
        cpus_online: (online > 0).then_some(online as u64),
        cpus_available: std::thread::available_parallelism().ok().map(|n| n.get() as u64),
        memory_total_bytes: total,
        memory_available_bytes: avail,
        cgroup_memory_limit_bytes: cg_limit,
    }
}

fn collect_limits(proc_: &Path) -> Limits {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: rl is a valid out pointer.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } == 0;
    let lim = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Limits {
        memlock_soft_bytes: if ok { lim(rl.rlim_cur) } else { None },
        memlock_hard_bytes: if ok { lim(rl.rlim_max) } else { None },
        ptrace_scope: read(proc_.join("sys/kernel/yama/ptrace_scope")).and_then(|t| t.trim().parse().ok()),
        cap_sys_ptrace: read(proc_.join("self/status"))
            .and_then(|t| procs::parse_cap_eff(&t))
            .map(|c| c & (1 << procs::CAP_SYS_PTRACE) != 0),
    }
}

/// `ldconfig -p`, bounded in time; empty when ldconfig is missing.
fn ldconfig_cache() -> Vec<(String, String)> {
    for exe in ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"] {
        let Ok(out) = run_with_timeout(exe, &["-p"], Duration::from_secs(5)) else { continue };
        return libs::parse_ldconfig(&out);
    }
    Vec::new()
}

fn run_with_timeout(exe: &str, args: &[&str], timeout: Duration) -> std::io::Result<String> {
    use std::io::Read;
    let mut child = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut so = child.stdout.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let start = std::time::Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{exe} timed out")));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(t.join().unwrap_or_default())
}
