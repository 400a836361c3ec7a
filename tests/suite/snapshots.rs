//! Snapshots of every output format of `explain`, of repro's report.md and report's document, on
//! fixed inputs and a fixed rule set (tests/fixtures/snap/), and of env's Markdown on a fixed
//! machine, with unstable parts (version, paths, times) filtered (tests/common/snap.rs).

use epdoctor::cli::Format;
use epdoctor::commands;
use epdoctor::env;
use epdoctor::model::env::{
    Container, EnvReport, Gpu, GpuInfo, GpuProcess, GpuStatus, Holder, Host, LibFile, Libraries, Limits, PythonInfo,
    PythonStatus, ScanSummary, ShmFile, ShmInfo, ShmState, SocketInfo, Var, ENV_SCHEMA_VERSION,
};

use crate::common;
use crate::common::snap::{assert_snapshot, version_filters, Filters};

fn explain(format: &str, extra: &[&str]) -> String {
    let out = common::epdoctor()
        .args(["explain", "--no-builtin-rules", "--rules", "tests/fixtures/snap/rules.toml", "--format", format])
        .args(extra)
        .arg("tests/fixtures/snap/two-ranks.log")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn text() {
    assert_snapshot("snapshots__text", &explain("text", &[]), &version_filters());
}

#[test]
fn markdown_redacted() {
    assert_snapshot("snapshots__markdown_redacted", &explain("md", &[]), &version_filters());
}

#[test]
fn json() {
    assert_snapshot("snapshots__json", &explain("json", &[]), &version_filters());
}

/// A repro run of tests/fixtures/snap/repro-cmd.sh under a two-value axis, with the snapshot rules.
fn repro_run(dir: &std::path::Path) -> std::path::PathBuf {
    let run = dir.join("run");
    let out = common::std_epdoctor()
        .env_remove("NCCL_DEBUG")
        .env_remove("NCCL_DEBUG_FILE")
        .args(["repro", "-q", "--no-builtin-rules", "--rules", "tests/fixtures/snap/rules.toml", "--out"])
        .arg(&run)
        .args(["--env", "MODE=ok,fail", "--", "sh", "tests/fixtures/snap/repro-cmd.sh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    run
}

/// Times, dates and the temporary folder vary from run to run.
fn repro_filters(tmp: &std::path::Path) -> Filters {
    let mut f = version_filters();
    for (re, rep) in [
        (regex_escape(&tmp.display().to_string()).as_str(), "[TMP]"),
        (r"\(rev [^)]+\)", "(rev [REV])"),
        (r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "started [DATE]"),
        (r"wall \d+\.\d s", "wall [S] s"),
        (r"\| \d+\.\d \|", "| [S] |"),
    ] {
        f.push((re.to_string(), rep.to_string()));
    }
    f
}

fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '/' { c.to_string() } else { format!("\\{c}") }).collect()
}

#[test]
fn repro_markdown() {
    let d = tempfile::tempdir().unwrap();
    let run = repro_run(d.path());
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert_snapshot("snapshots__repro_markdown", &md, &repro_filters(d.path()));
}

#[test]
fn report_markdown_up_to_the_environment() {
    let d = tempfile::tempdir().unwrap();
    let run = repro_run(d.path());
    // NCCL_DEBUG unset: its check warns, so the checks line is there on every machine.
    let out = common::epdoctor()
        .env_remove("NCCL_DEBUG")
        .args(["report", "--python-timeout", "5", "--no-builtin-rules", "--rules", "tests/fixtures/snap/rules.toml"])
        .arg("tests/fixtures/snap/two-ranks.log")
        .arg("--repro")
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8(out.stdout).unwrap();
    // The environment section describes the machine the test runs on; env's own snapshot covers it.
    let md = md.split("\n## Environment").next().unwrap().to_string();
    let mut f = repro_filters(d.path());
    f.push((
        r"- the machine `epdoctor report` ran on: .*".into(),
        "- the machine `epdoctor report` ran on: [MACHINE]".into(),
    ));
    f.push((
        r"- environment checks to look at \(that machine\): .*".into(),
        "- environment checks to look at (that machine): [CHECKS]".into(),
    ));
    assert_snapshot("snapshots__report_markdown_up_to_the_environment", &md, &f);
}

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

/// env's Markdown on a fixed machine (the checklist comes from env's checks, which the writers do
/// not see).
#[test]
fn env_markdown_redacted() {
    let md = commands::env::render(&machine(), Format::Md, true).unwrap();
    assert!(!md.contains("gpu-box-7") && !md.contains("alice"), "{md}");
    assert_snapshot("env_markdown_redacted", &md, &Filters::new());
}
