//! The checklist: one verdict per line, each citing the public source it rests on (NCCL, PyTorch,
//! NVSHMEM or DeepEP source and threads) or our own runs in docs/results/. Nothing here claims
//! more than those sources support.
use super::vars;
pub use crate::model::env::{human_bytes, Check, Status};
use crate::model::env::{EnvReport, GpuStatus, PythonStatus, ShmState};
use crate::model::version::{boundary, Version};

fn check(id: &str, status: Status, title: impl Into<String>, detail: impl Into<String>, refs: &[&str]) -> Check {
    Check {
        id: id.into(),
        status,
        title: title.into(),
        detail: detail.into(),
        refs: refs.iter().map(|s| s.to_string()).collect(),
    }
}

pub const GIB: u64 = 1 << 30;

/// What an NCCL version means for teardown warnings (NCCL src/proxy.cc history; docs/results/ for 2.31+).
pub fn nccl_teardown(v: Version) -> (Status, String) {
    if v < boundary::NCCL_ABORT_PAIR_SILENCED {
        (
            Status::Warn,
            "ncclCommAbort prints the WARN trio \"[Service thread] Accept failed ...\", \"Could not receive type from \
             localRank N, res=3, closed=0\", \"Failed to execute operation Close from rank N, retcode 3\" (deepseek-ai/DeepEP#41); \
             harmless after a run that worked. 2.23.4 silenced the pair, 2.30.3 demoted Accept failed to INFO (NCCL src/proxy.cc at v2.23.4-1 and v2.30.3-1)."
                .into(),
        )
    } else if v < boundary::NCCL_ACCEPT_FAILED_INFO {
        (
            Status::Info,
            "the abort-path pair is silenced (since 2.23.4), but \"[Service thread] Accept failed\" is still a WARN \
             until 2.30.3; warnings with res=6 / \"Connection closed by remote peer\" mean a peer really exited early \
             (NCCL src/proxy.cc at v2.23.4-1 and v2.30.3-1)."
                .into(),
        )
    } else if v < boundary::NCCL_DESTROY_HANG {
        (
            Status::Ok,
            "normal teardown is quiet: the abort pair is silenced and Accept failed is INFO; peer-gone warnings \
             (res=6, \"Connection closed by remote peer\") remain real (NCCL src/misc/socket.cc)."
                .into(),
        )
    } else {
        (
            Status::Warn,
            "a local rank that exits without destroying its communicator can make the others' \
             ncclCommFinalize/Destroy hang instead of warn (reproduced with 2.32.3, see epdoctor docs/results; pytorch/pytorch#194679 reports it \
             from 2.31.2): call destroy_process_group() on every rank before exit."
                .into(),
        )
    }
}

pub fn run(r: &EnvReport) -> Vec<Check> {
    let mut out = Vec::new();
    for part in [gpus, variables, nccl_libraries, torch, shm, ipc, nvshmem, gpu_processes, limits] {
        part(r, &mut out);
    }
    out
}

/// A variable's value and where it was set (the environment or an NCCL config file).
fn eff<'a>(r: &'a EnvReport, name: &str) -> Option<(&'a str, &'a str)> {
    vars::effective(name, &r.variables, &r.config_files)
}

/// The GPUs, peer access between them, NVLS.
fn gpus(r: &EnvReport, out: &mut Vec<Check>) {
    match r.gpu.status {
        GpuStatus::Ok if r.gpu.devices.is_empty() => out.push(check(
            "gpu",
            Status::Warn,
            "driver present, no GPU visible",
            "check CUDA_VISIBLE_DEVICES and the container's --gpus",
            &[],
        )),
        GpuStatus::Ok => {
            let names: Vec<String> =
                r.gpu.devices.iter().map(|g| format!("{} (sm {})", g.name, g.compute_capability)).collect();
            out.push(check("gpu", Status::Ok, format!("{} GPU(s)", r.gpu.devices.len()), names.join(", "), &[]));
        }
        GpuStatus::NoDriver => out.push(check(
            "gpu",
            Status::Info,
            "no GPU driver",
            "libcuda could not be loaded: GPU checks are skipped; explain, rules and clean still work",
            &[],
        )),
        GpuStatus::NotProbed => {}
        GpuStatus::Error => out.push(check(
            "gpu",
            Status::Warn,
            "the CUDA driver is present but failed",
            r.gpu.detail.clone().unwrap_or_default(),
            &[],
        )),
    }
    let n = r.gpu.devices.len();
    if n >= 2 {
        let mut missing = Vec::new();
        for i in 0..n {
            for j in 0..n {
                if i != j && r.gpu.p2p[i][j] != Some(true) {
                    missing.push(format!("{i}->{j}"));
                }
            }
        }
        if missing.is_empty() {
            out.push(check(
                "p2p",
                Status::Ok,
                "every GPU pair has peer access",
                "NCCL can use its P2P transport between all local GPUs",
                &[],
            ));
        } else {
            out.push(check(
                "p2p",
                Status::Warn,
                format!("no peer access for {}", missing.join(", ")),
                "between these GPUs NCCL cannot use P2P; intranode traffic goes through SHM (host memory, still proxied) (NCCL src/graph/paths.cc, NCCL_P2P_DISABLE)",
                &[],
            ));
        }
        match eff(r, "NCCL_NVLS_ENABLE") {
            Some(("0", _)) => {}
            other => out.push(check(
                "nvls",
                Status::Info,
                "NCCL_NVLS_ENABLE is not 0 on a multi-GPU host",
                format!(
                    "{} (default 2 = auto). NVLink SHARP uses fd exchange over the UDS service; on shared multi-GPU hosts keep NCCL_NVLS_ENABLE=0 (NCCL src/transport/nvls.cc)",
                    other.map_or("unset".to_string(), |(v, from)| format!("set to {v} ({from})"))
                ),
                &[],
            )),
        }
    }
}

/// Variables that decide what a job's log can show, or that do nothing.
fn variables(r: &EnvReport, out: &mut Vec<Check>) {
    match eff(r, "NCCL_DEBUG") {
        None => out.push(check(
            "nccl-debug",
            Status::Warn,
            "NCCL_DEBUG is not set where epdoctor ran",
            "NCCL prints nothing, not even WARN, without NCCL_DEBUG, so a job started from this environment cannot show teardown warnings. Set NCCL_DEBUG=WARN (or INFO with NCCL_DEBUG_SUBSYS=INIT,PROXY,NET) to see them; if the job ran elsewhere (a batch script, another node), look at the job's own environment instead (NCCL src/debug.cc)",
            &[],
        )),
        Some((v, from)) => out.push(check("nccl-debug", Status::Ok, format!("NCCL_DEBUG={v}"), format!("from {from}"), &[])),
    }
    if let Some((v, from)) = eff(r, "NCCL_ABORT_ON_ERROR") {
        out.push(check(
            "unknown-variable",
            Status::Warn,
            "NCCL_ABORT_ON_ERROR does nothing",
            format!("set to {v} ({from}), but no NCCL release has such a parameter; the nearest knobs are PyTorch's TORCH_NCCL_ASYNC_ERROR_HANDLING and TORCH_NCCL_ENABLE_MONITORING (NCCL's source and its environment-variable documentation have no such name)"),
            &[],
        ));
    }
}

/// The libnccl copies and what each version means for teardown.
fn nccl_libraries(r: &EnvReport, out: &mut Vec<Check>) {
    let nccl = &r.libraries.nccl;
    let mut versions: Vec<String> = nccl.iter().filter_map(|l| l.version.clone()).collect();
    versions.sort();
    versions.dedup();
    if nccl.is_empty() {
        out.push(check("nccl-libraries", Status::Info, "no libnccl found", "none on the loader path, LD_LIBRARY_PATH or in Python's site-packages; torch builds that link NCCL statically carry their own", &[]));
    } else if versions.len() > 1 {
        out.push(check(
            "nccl-libraries",
            Status::Warn,
            format!("{} libnccl copies, versions {}", nccl.len(), versions.join(", ")),
            "which one a process loads depends on LD_LIBRARY_PATH and the program's RPATH (torch wheels load nvidia/nccl from site-packages). The log's \"NCCL version\" line (NCCL_DEBUG=VERSION or INFO) says which one ran",
            &[],
        ));
    } else {
        out.push(check(
            "nccl-libraries",
            Status::Ok,
            format!("{} libnccl copy/copies, version {}", nccl.len(), versions.first().map_or("unknown", |s| s)),
            "",
            &[],
        ));
    }
    let mut seen = Vec::new();
    let mut vlist: Vec<(String, String)> =
        nccl.iter().filter_map(|l| l.version.clone().map(|v| (v, l.path.clone()))).collect();
    if let Some(v) = &r.python.torch_nccl {
        vlist.push((v.clone(), format!("torch {}", r.python.torch.clone().unwrap_or_default())));
    }
    for (v, whose) in vlist {
        if seen.contains(&v) {
            continue;
        }
        seen.push(v.clone());
        if let Some(pv) = Version::parse(&v) {
            let (status, text) = nccl_teardown(pv);
            out.push(check(
                "nccl-version",
                status,
                format!("NCCL {v} ({whose})"),
                text,
                &["https://github.com/deepseek-ai/DeepEP/issues/41"],
            ));
        }
    }
}

/// torch's teardown path, and whether it brings its own NCCL.
fn torch(r: &EnvReport, out: &mut Vec<Check>) {
    let nccl = &r.libraries.nccl;
    match (&r.python.torch, r.python.status) {
        (Some(t), _) => {
            if let Some(tv) = Version::parse(t) {
                let (status, text) = if tv < boundary::TORCH_NOT_DESTROYED_WARNING {
                    (Status::Info, "destroy_process_group() and the destructor both abort the communicators (ncclCommAbort); the \"not destroyed\" warning does not exist before 2.4 (PyTorch ProcessGroupNCCL.cpp; pytorch/pytorch#119250)")
                } else if tv < boundary::TORCH_DESTROY_FINALIZES {
                    (Status::Warn, "destroy_process_group() itself calls ncclCommAbort, so with NCCL < 2.23.4 adding it does not silence the abort warnings; upgrade torch (>= 2.6 finalizes and destroys) or NCCL (pytorch/pytorch#119250 and pytorch/pytorch#141510)")
                } else {
                    (Status::Ok, "destroy_process_group() finalizes and destroys the communicators (the clean path); without it the destructor prints \"destroy_process_group() was not called before program exit\" and aborts (pytorch/pytorch#141510; 2.6 inferred from its date)")
                };
                out.push(check(
                    "torch-teardown",
                    status,
                    format!("torch {t}"),
                    text,
                    &["https://github.com/pytorch/pytorch/pull/141510"],
                ));
            }
            if let (Some(tn), Some(sys)) =
                (&r.python.torch_nccl, nccl.iter().find(|l| l.loader_default).and_then(|l| l.version.clone()))
            {
                if Version::parse(tn) != Version::parse(&sys) {
                    out.push(check(
                        "torch-nccl",
                        Status::Info,
                        format!("torch uses NCCL {tn}, the loader's libnccl.so.2 is {sys}"),
                        "torch loads its own NCCL; the loader's copy is what other programs (epdoctor's workload, DeepEP V2) get. Compare against the version the failing log states",
                        &[],
                    ));
                }
            }
        }
        (None, PythonStatus::Ok) => out.push(check(
            "torch",
            Status::Info,
            "no torch in this python3",
            r.python.torch_error.clone().unwrap_or_default(),
            &[],
        )),
        (None, st) => out.push(check(
            "torch",
            Status::Info,
            format!("python3 probe: {st}"),
            r.python.detail.clone().unwrap_or_default(),
            &[],
        )),
    }
}

/// /dev/shm: its size and the NCCL and torch files left in it.
fn shm(r: &EnvReport, out: &mut Vec<Check>) {
    let container = r.host.container.detected;
    match (r.shm.exists, r.shm.size_bytes) {
        (false, _) => out.push(check("shm-size", Status::Fail, format!("{} is missing", r.shm.dir), "NCCL's SHM transport and proxy pool create files there; without it intranode NCCL fails", &[])),
        (true, Some(sz)) if sz < GIB => out.push(check(
            "shm-size",
            if container { Status::Fail } else { Status::Warn },
            format!("{} is only {}{}", r.shm.dir, human_bytes(sz), if container { " in a container" } else { "" }),
            "NCCL maps /dev/shm files for its SHM transport and proxy pool; Docker's 64 MiB default made NCCL crash in ncclShmOpen. Give the container --shm-size=1g or more (or --ipc=host)",
            &["https://github.com/pytorch/tutorials/pull/2475"],
        )),
        (true, Some(sz)) => out.push(check("shm-size", Status::Ok, format!("{} is {}", r.shm.dir, human_bytes(sz)), r.shm.free_bytes.map(|f| format!("{} free", human_bytes(f))).unwrap_or_default(), &[])),
        (true, None) => out.push(check("shm-size", Status::Info, format!("size of {} unknown", r.shm.dir), r.shm.error.clone().unwrap_or_default(), &[])),
    }

    // /dev/shm leftovers.
    let nccl_files: Vec<_> =
        r.shm.files.iter().filter(|f| crate::sys::names::is_nccl_shm(file_name(&f.path))).collect();
    let torch_files: Vec<_> =
        r.shm.files.iter().filter(|f| crate::sys::names::is_torch_shm(file_name(&f.path))).collect();
    let count = |v: &[&super::shm::ShmFile], s: ShmState| v.iter().filter(|f| f.state == s).count();
    let (stale, in_use, unknown) = (
        count(&nccl_files, ShmState::Stale),
        count(&nccl_files, ShmState::InUse),
        count(&nccl_files, ShmState::Unknown),
    );
    if nccl_files.is_empty() {
        out.push(check(
            "shm-leftovers",
            Status::Ok,
            "no /dev/shm/nccl-* files",
            "NCCL unlinks its /dev/shm files as soon as every peer has attached, so even an exit without destroy_process_group leaves none; only a crash between creation and the last attach can (NCCL src/misc/shmutils.cc)",
            &[],
        ));
    } else if stale > 0 {
        out.push(check(
            "shm-leftovers",
            Status::Warn,
            format!("{stale} /dev/shm/nccl-* file(s) that no live process holds"),
            "left by a process that died between creating a segment and its last peer attaching (NCCL src/misc/shmutils.cc). They only take memory; `epdoctor clean` lists them and `--yes` deletes them",
            &[],
        ));
    } else if unknown > 0 {
        out.push(check(
            "shm-leftovers",
            Status::Info,
            format!("{unknown} /dev/shm/nccl-* file(s) of unknown state"),
            format!(
                "{} processes could not be inspected; run as root to tell stale files from live ones",
                r.process_scan.unreadable
            ),
            &[],
        ));
    } else {
        out.push(check(
            "shm-leftovers",
            Status::Info,
            format!("{in_use} /dev/shm/nccl-* file(s) in use"),
            "held by a live NCCL job",
            &[],
        ));
    }
    let torch_stale = count(&torch_files, ShmState::Stale);
    if torch_stale > 0 {
        out.push(check(
            "torch-shm",
            Status::Info,
            format!("{torch_stale} /dev/shm/torch_* file(s) whose creator is gone"),
            "PyTorch CPU-tensor sharing files (torch.multiprocessing); not NCCL's, and not touched by `epdoctor clean`",
            &[],
        ));
    }
}

/// SysV segments and NCCL's abstract sockets.
fn ipc(r: &EnvReport, out: &mut Vec<Check>) {
    out.push(check(
        "sysv-shm",
        Status::Ok,
        format!("{} SysV shared-memory segment(s); none is NCCL's", r.sysv_segments.len()),
        "NCCL never uses SysV shared memory (no shmget in its source), so `ipcs -m` cannot show NCCL leftovers; look at /dev/shm/nccl-* files and @/tmp/nccl-socket-* in /proc/net/unix instead (NCCL src/misc/shmutils.cc, src/misc/ipcsocket.cc)",
        &[],
    ));

    // Abstract sockets.
    if r.nccl_sockets.is_empty() {
        out.push(check("nccl-sockets", Status::Ok, "no NCCL UDS sockets", "abstract sockets (@/tmp/nccl-socket-*) vanish with the last process holding them; they cannot outlive a job (NCCL src/misc/ipcsocket.cc)", &[]));
    } else {
        let mut pids: Vec<String> =
            r.nccl_sockets.iter().flat_map(|s| s.holders.iter().map(|h| format!("{} ({})", h.pid, h.comm))).collect();
        pids.sort();
        pids.dedup();
        out.push(check(
            "nccl-sockets",
            Status::Info,
            format!("{} NCCL UDS socket(s) live", r.nccl_sockets.len()),
            format!(
                "a running NCCL job ({}); abstract sockets go away with their process, nothing to clean (NCCL src/misc/ipcsocket.cc)",
                if pids.is_empty() { "holders not visible".into() } else { pids.join(", ") }
            ),
            &[],
        ));
    }
}

/// NVSHMEM's library and its NCCL settings.
fn nvshmem(r: &EnvReport, out: &mut Vec<Check>) {
    if r.libraries.nvshmem.is_empty() {
        out.push(check(
            "nvshmem",
            Status::Info,
            "no NVSHMEM host library found",
            "DeepEP's intranode kernels use CUDA IPC and never initialise NVSHMEM (num_rdma_bytes = 0), so it plays no part in intranode teardown warnings (DeepEP deep_ep/buffer.py: NVSHMEM is set up only when num_rdma_bytes > 0)",
            &[],
        ));
    }
    for l in &r.libraries.nvshmem {
        let sup = l.nccl_support.as_ref();
        let built = sup.and_then(|s| s.built_with_nccl);
        let what = match built {
            Some(true) => "built with NCCL support",
            Some(false) => "built without NCCL support",
            None => "NCCL support unknown",
        };
        out.push(check(
            "nvshmem",
            Status::Info,
            format!("NVSHMEM {} ({}): {what}", l.version.as_deref().unwrap_or("?"), l.path),
            format!(
                "{}. NVSHMEM_USE_NCCL is a build option; at run time NVSHMEM_DISABLE_NCCL=1 keeps a library built with NCCL from loading libnccl at nvshmem_init. Neither touches the torch.distributed communicators that print the teardown warnings (NVSHMEM cmake_config/NVSHMEMEnv.cmake; NVSHMEM_DISABLE_NCCL in NVSHMEM's environment-variable documentation)",
                sup.map_or("", |s| s.evidence.as_str())
            ),
            &[],
        ));
    }
    if let Some((v, from)) = eff(r, "NVSHMEM_USE_NCCL") {
        out.push(check(
            "nvshmem-use-nccl",
            Status::Warn,
            "NVSHMEM_USE_NCCL is set at run time",
            format!("set to {v} ({from}), but it is read by NVSHMEM's CMake when building NVSHMEM, not by the library; to keep NVSHMEM from using NCCL at run time set NVSHMEM_DISABLE_NCCL=1. It does not remove the NCCL teardown warnings either (NVSHMEM cmake_config/NVSHMEMEnv.cmake)"),
            &[],
        ));
    }
}

/// Other processes holding the GPUs.
fn gpu_processes(r: &EnvReport, out: &mut Vec<Check>) {
    let compute: Vec<_> = r
        .gpu_processes
        .iter()
        .filter(|p| {
            p.devices.iter().any(|d| {
                d.trim_start_matches("nvidia").chars().next().is_some_and(|c| c.is_ascii_digit()) || d == "nvidia-uvm"
            })
        })
        .collect();
    if !compute.is_empty() {
        let list: Vec<String> = compute.iter().map(|p| format!("{} ({})", p.pid, p.comm)).collect();
        out.push(check(
            "gpu-processes",
            Status::Info,
            format!("{} other process(es) hold GPU devices", compute.len()),
            format!(
                "{}: a rank left from an earlier run keeps its GPU memory and contexts until it exits",
                list.join(", ")
            ),
            &[],
        ));
    }
}

/// memlock and ptrace limits.
fn limits(r: &EnvReport, out: &mut Vec<Check>) {
    let memlock = match r.limits.memlock_soft_bytes {
        None => "unlimited".to_string(),
        Some(b) => human_bytes(b),
    };
    out.push(check(
        "memlock",
        Status::Info,
        format!("memlock limit {memlock}"),
        "pinned-memory registration for network transports (InfiniBand, GPUDirect RDMA) counts against it; intranode runs and their teardown do not depend on it",
        &[],
    ));
    let scope = r.limits.ptrace_scope.map_or("absent (no Yama)".to_string(), |s| s.to_string());
    let cap = match r.limits.cap_sys_ptrace {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    out.push(check(
        "ptrace",
        Status::Info,
        format!("ptrace_scope {scope}, CAP_SYS_PTRACE {cap}"),
        "NCCL (>= 2.19) passes cuMem handles as file descriptors over its UDS service, which needs no ptrace rights (NCCL src/proxy.cc, ncclProxyServiceUDS, 2.19+); tools that fetch a peer's fd with pidfd_getfd (e.g. PyTorch IPC of expandable segments) need ptrace_scope 0 or CAP_SYS_PTRACE",
        &["https://github.com/pytorch/pytorch/pull/130890"],
    ));
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_torch_and_nccl_as_env_sees_them() {
        assert_eq!(Version::parse("2.28.3"), Some(Version(2, 28, 3)));
        assert_eq!(Version::parse("2.11.0+cu130"), Some(Version(2, 11, 0)));
        assert_eq!(Version::parse("2.6.0a0+git1234"), Some(Version(2, 6, 0)));
        assert_eq!(Version::parse("2.7.0.dev20250101+cu126"), Some(Version(2, 7, 0)));
        assert_eq!(Version::parse("x"), None);
    }

    #[test]
    fn nccl_boundaries_follow_the_facts() {
        assert_eq!(nccl_teardown(Version(2, 22, 3)).0, Status::Warn);
        assert_eq!(nccl_teardown(Version(2, 23, 4)).0, Status::Info);
        assert_eq!(nccl_teardown(Version(2, 28, 9)).0, Status::Info);
        assert_eq!(nccl_teardown(Version(2, 30, 3)).0, Status::Ok);
        assert_eq!(nccl_teardown(Version(2, 32, 3)).0, Status::Warn);
        assert!(nccl_teardown(Version(2, 32, 3)).1.contains("hang"));
    }
}
