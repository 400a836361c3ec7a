//! The one way the integration tests start the binary: no inherited `EPDOCTOR_*` setting (each
//! would change what a test sees) and no colour. Each test binary uses what it needs.
#![allow(dead_code)]

pub mod cmd;
pub mod snap;

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// Every variable the binary reads as a flag's twin or a test hook.
const INHERITED: &[&str] = &[
    "EPDOCTOR_COLOR",
    "EPDOCTOR_FORMAT",
    "EPDOCTOR_RULES",
    "EPDOCTOR_NO_REDACT",
    "EPDOCTOR_EVIDENCE",
    "EPDOCTOR_MAX_BYTES",
    "EPDOCTOR_RANKS",
    "EPDOCTOR_TIMEOUT",
    "EPDOCTOR_BLESS",
    "EPDOCTOR_BARRIER_TIMEOUT",
    "EPDOCTOR_WORKER_CMD",
    "EPDOCTOR_SHM_DIR",
    "EPDOCTOR_TORCH",
    "EPDOCTOR_LINT_FORMAT",
    "EPDOCTOR_PIP",
];

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_epdoctor"))
}

/// The binary, to run and assert on.
pub fn epdoctor() -> cmd::Command {
    std_epdoctor().into()
}

/// The binary as a plain process (to spawn, signal or wait on it).
pub fn std_epdoctor() -> std::process::Command {
    let mut c = std::process::Command::new(bin());
    for v in INHERITED {
        c.env_remove(v);
    }
    c.env("NO_COLOR", "1");
    c
}

/// Wait for `child`, returning its exit code and peak resident set in KiB (from `wait4`'s rusage,
/// i.e. the kernel's own high-water mark for that one process).
pub fn wait_with_peak_rss(child: &mut Child) -> (i32, i64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for the out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: plain FFI call with valid pointers; `pid` is our own unreaped child.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "epdoctor did not exit normally (status {status:#x})");
    (libc::WEXITSTATUS(status), ru.ru_maxrss)
}

/// Kill `child` if it is still running when `limit` runs out (a hang guard for spawned children).
pub fn guard(child: &Child, limit: Duration) -> std::sync::mpsc::Sender<()> {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            // SAFETY: kill(2) on a pid we spawned and have not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    tx
}

/// NCCL <= 2.22's abort-path line (DeepEP #41) and a finished test's summary after it: benign
/// (alone, the line says nothing of how the run ended and reads `unknown`).
pub const ABORT_PAIR: &str = "gpu-node-17:2374:2994 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0\nall tests passed\n";

/// torch 2.6-2.15's exit notice, benign on its own:
/// harmless by nature, whether the log shows the run's end or not.
pub const TEARDOWN: &str = "[rank0]:[W303 23:03:18.079178563 ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())\n";

pub fn tgz(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// The log of a job of `nranks` ranks, 8 a host, interleaved as one stream (issue 38, point 7):
/// every rank's `ncclCommInitRank` line, then rank `culprit`'s `Cuda failure 'out of memory'`,
/// then `peers` other ranks' `socketProgress: Connection closed by remote peer` (the formats of
/// NCCL 2.19+'s init line, include/alloc.h's CUDACHECK and misc/socket.cc's socketProgress).
pub fn big_job_log(nranks: u32, culprit: u32, peers: u32, mut out: impl std::io::Write) {
    let host = |r: u32| format!("gpu-{:06}", r / 8);
    let pid = |r: u32| 10_000 + r % 8;
    for r in 0..nranks {
        writeln!(
            out,
            "{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55d0c3a0 rank {r} nranks {nranks} cudaDev {d} \
             nvmlDev {d} busId 18000 commId 0x5c2a1f3e - Init START",
            h = host(r),
            p = pid(r),
            d = r % 8
        )
        .unwrap();
    }
    writeln!(
        out,
        "{h}:{p}:{q} [{d}] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
        h = host(culprit),
        p = pid(culprit),
        q = pid(culprit) + 77,
        d = culprit % 8
    )
    .unwrap();
    for i in 0..peers {
        let r = (culprit + 1 + i * (nranks / peers.max(1))) % nranks;
        writeln!(
            out,
            "{h}:{p}:{q} [{d}] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer {c}<48122>",
            h = host(r),
            p = pid(r),
            q = pid(r) + 5,
            d = r % 8,
            c = host(culprit)
        )
        .unwrap();
    }
}
