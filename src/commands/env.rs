//! `env` and `clean`: flags -> the environment model (or the stale-file sweep) -> a writer.
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::cli::{CleanArgs, EnvArgs, Format};
use crate::env;
use crate::error::Typed;
use crate::exit;
use crate::output;

pub fn run(args: &EnvArgs) -> Result<u8> {
    // The leftovers probe a Slurm cell runs on each of its nodes (repro --launcher slurm).
    if let (true, Some(cell)) = (args.leftovers, &args.cell) {
        return leftovers(cell, args);
    }
    // Its stack probe, at a hang's deadline.
    if let (true, Some(cell)) = (args.stacks, &args.cell) {
        return stacks(cell, args);
    }
    if args.cell.is_some() {
        crate::error::usage(vec!["--cell goes with --leftovers or --stacks".into()])?;
    }
    if !(args.python_timeout.is_finite() && args.python_timeout > 0.0) {
        crate::error::usage(vec![format!(
            "--python-timeout must be a positive number of seconds, got {}",
            args.python_timeout
        )])?;
    }
    let r = env::collect(&env::Sources::system(Duration::from_secs_f64(args.python_timeout)));
    let o = output::Options { redact: !args.no_redact, ..output::Options::new(args.format.output()) };
    output::print(&output::render(&r, &o)?)?;
    Ok(exit::OK)
}

/// `env --leftovers --cell TAG [--since T] [--kill] [-f json]`: this node's part of a cell's leftovers.
fn leftovers(cell: &str, args: &EnvArgs) -> Result<u8> {
    if cell.is_empty() {
        return Err(crate::error::usage_one(
            "--cell: the tag is empty (it is a cell folder, the EPDOCTOR_CELL_DIR value of the cell's processes)",
        ));
    }
    let n = crate::repro::launcher::slurm::probe_here(cell, args.since, args.kill);
    let text = match args.format {
        Format::Json => output::json(&n),
        Format::Text | Format::Md => {
            let mut l = crate::repro::leftovers::lines(&n.leftovers);
            if l.is_empty() {
                l.push(format!("nothing of cell {cell} on {}", n.node));
            }
            l.join("\n") + "\n"
        }
    };
    output::print(&text)?;
    Ok(exit::OK)
}

/// `env --stacks --cell TAG [-f json]`: the stacks of the cell's processes on this node.
fn stacks(cell: &str, args: &EnvArgs) -> Result<u8> {
    if cell.is_empty() || !Path::new(cell).is_dir() {
        return Err(crate::error::usage_one(format!(
            "--cell {cell:?}: not a folder (the tag is the cell folder, the EPDOCTOR_CELL_DIR value of the cell's processes)"
        )));
    }
    let n = crate::repro::launcher::slurm::stacks_here(cell);
    let text = match args.format {
        Format::Json => output::json(&n),
        Format::Text | Format::Md => {
            let mut l: Vec<String> = n.stacks.iter().flat_map(|s| s.lines.iter().cloned()).collect();
            l.extend(n.notes.iter().cloned());
            if n.stacks.is_empty() {
                l.push(format!("no process of cell {cell} on {}", n.node));
            }
            l.join("\n") + "\n"
        }
    };
    output::print(&text)?;
    Ok(exit::OK)
}

pub fn clean(args: &CleanArgs) -> Result<u8> {
    let o = env::clean::clean_dir(Path::new("/proc"), &args.dir, args.yes).input()?;
    output::print(&o.text)?;
    Ok(exit::of_clean(o.failed.len()))
}

/// env's Markdown on a fixed machine. Here rather than beside the writer (output/env.rs) because
/// the checklist comes from env's checks, which the writers do not see.
#[cfg(test)]
mod tests {
    use crate::model::env::{
        Container, EnvReport, Gpu, GpuInfo, GpuProcess, GpuStatus, Holder, Host, LibFile, Libraries, Limits,
        PythonInfo, PythonStatus, ScanSummary, ShmFile, ShmInfo, ShmState, SocketInfo, Var, ENV_SCHEMA_VERSION,
    };
    use crate::{env, output};

    /// A fixed machine: two H200s, one NCCL in a user's site-packages, a stale shm file, a job's
    /// socket, NCCL_DEBUG unset.
    fn machine() -> EnvReport {
        let holder = Holder { pid: 4242, comm: "python3".into() };
        let lib = LibFile {
            path: "/home/alice/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2".into(),
            real_path: "/home/alice/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2".into(),
            names: vec!["libnccl.so.2".into()],
            also_at: Vec::new(),
            found_via: vec!["python: nvidia/nccl".into()],
            size: 250_000_000,
            version: Some("2.28.3".into()),
            cuda: Some("12.9".into()),
            version_from: Some("rodata string".into()),
            nccl_support: None,
            loader_default: false,
            error: None,
        };
        let gpu = |index| Gpu {
            index,
            name: "NVIDIA H200".into(),
            compute_capability: "9.0".into(),
            memory_bytes: 150_000_000_000,
            pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + index)),
        };
        let mut r = EnvReport {
            schema_version: ENV_SCHEMA_VERSION,
            tool_version: "[VERSION]".into(),
            host: Host {
                hostname: Some("gpu-box-7".into()),
                os: Some("Ubuntu 24.04.1 LTS".into()),
                kernel: Some("6.8.0-45-generic".into()),
                arch: "x86_64".into(),
                container: Container { detected: true, evidence: vec!["/.dockerenv exists".into()], cgroup: vec![] },
                cpus_online: Some(64),
                cpus_available: Some(16),
                memory_total_bytes: Some(1 << 40),
                memory_available_bytes: Some(1 << 39),
                cgroup_memory_limit_bytes: None,
            },
            gpu: GpuInfo {
                status: GpuStatus::Ok,
                detail: None,
                driver_version: Some("580.95.05".into()),
                cuda_driver_version: Some("13.0".into()),
                devices: vec![gpu(0), gpu(1)],
                p2p: vec![vec![None, Some(true)], vec![Some(true), None]],
            },
            libraries: Libraries { nccl: vec![lib], nvshmem: vec![], searched: vec![] },
            python: PythonInfo {
                status: PythonStatus::Ok,
                python: Some("3.12.3".into()),
                torch: Some("2.11.0+cu130".into()),
                torch_nccl: Some("2.28.9".into()),
                ..Default::default()
            },
            variables: vec![Var { name: "CUDA_VISIBLE_DEVICES".into(), value: "0,1".into(), masked: false }],
            config_files: vec![],
            shm: ShmInfo {
                dir: "/dev/shm".into(),
                exists: true,
                fstype: Some("tmpfs".into()),
                size_bytes: Some(64 << 20),
                free_bytes: Some(60 << 20),
                files: vec![ShmFile {
                    path: "/dev/shm/nccl-AbC123".into(),
                    size: 9_637_888,
                    modified: Some(1_764_400_000),
                    uid: 1000,
                    holders: vec![],
                    creator_pid: None,
                    creator_alive: None,
                    state: ShmState::Stale,
                }],
                ..Default::default()
            },
            nccl_sockets: vec![SocketInfo {
                path: "@/tmp/nccl-socket-0-2a3f".into(),
                inode: 77,
                holders: vec![holder.clone()],
            }],
            sysv_segments: vec![],
            gpu_processes: vec![GpuProcess { pid: 4242, comm: "python3".into(), devices: vec!["nvidia0".into()] }],
            limits: Limits {
                memlock_soft_bytes: None,
                memlock_hard_bytes: None,
                ptrace_scope: Some(1),
                cap_sys_ptrace: Some(false),
            },
            process_scan: ScanSummary { processes: 120, unreadable: 3 },
            checks: vec![],
        };
        r.checks = env::checks::run(&r);
        r
    }

    #[test]
    fn markdown_redacted() {
        let md = output::render(&machine(), &output::Options::new(output::Format::Md)).unwrap();
        assert!(!md.contains("gpu-box-7") && !md.contains("alice"), "{md}");
        insta::assert_snapshot!(md);
    }
}
