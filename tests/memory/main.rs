//! The tests that bound a child's peak memory (its `ru_maxrss`, as `wait4` gives it), in a test
//! process of their own: on Linux a child's peak counts the memory of the process that spawned it
//! (the mapping it ran on until its `exec`), so beside the suite's rule engines and catalogue a
//! 20 MiB `explain` read as 170 MiB. Nothing else runs in this process.

#[path = "../common/mod.rs"]
mod common;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::{ChildStdin, Stdio};
use std::time::{Duration, Instant};

use common::{guard, std_epdoctor, tgz, wait_with_peak_rss, ABORT_PAIR, TEARDOWN};

/// The bound every test here holds the peak to.
const BOUND_KIB: i64 = 64 * 1024;

/// Run `epdoctor ARGS` with `feed` writing its standard input (on a thread of its own; the pipe
/// closes when it returns): the exit code, the peak RSS in KiB (`wait4`) and what it printed.
/// Killed past 10 minutes (a hang guard, not a measurement).
fn peak_of<S: AsRef<OsStr>>(args: &[S], feed: impl FnOnce(&mut ChildStdin) + Send + 'static) -> (i32, i64, String) {
    let mut child =
        std_epdoctor().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let stop = guard(&child, Duration::from_secs(600));
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || feed(&mut stdin));
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    writer.join().unwrap();
    let (code, peak) = wait_with_peak_rss(&mut child);
    let _ = stop.send(());
    (code, peak, reader.join().unwrap())
}

// One 1 GB line, streamed through a pipe: memory stays bounded and the next line is still read.

fn giant_line_peak(total: u64, tail: &'static str) -> (i32, i64, String) {
    peak_of(&["explain", "-", "--format", "json"], move |stdin| {
        let chunk = vec![b'x'; 1 << 20];
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            stdin.write_all(&chunk[..n]).unwrap();
            left -= n as u64;
        }
        stdin.write_all(b"\n").unwrap();
        stdin.write_all(tail.as_bytes()).unwrap();
    })
}

#[test]
fn one_gigabyte_line_is_streamed_in_bounded_memory() {
    let started = Instant::now();
    let (code, peak_kib, out) = giant_line_peak(1 << 30, ABORT_PAIR);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, 0, "{out}");
    // The line after the giant one is read and explained.
    assert_eq!(v["verdict"], "benign", "{out}");
    assert_eq!(v["primary"]["evidence"][0]["line"], 2);
    assert_eq!(v["inputs"][0]["bytes"], (1u64 << 30) + 1 + ABORT_PAIR.len() as u64);
    assert!(out.contains("longer than 1 MiB were cut"), "{out}");
    // 1 GiB went through; the process never held more than a few MiB of it.
    assert!(peak_kib < BOUND_KIB, "peak RSS {peak_kib} KiB for a 1 GiB line");
    eprintln!("1 GiB line: peak RSS {peak_kib} KiB, {:.1?}", started.elapsed());
}

#[test]
fn many_huge_warning_lines_keep_memory_bounded() {
    // 96 distinct 1 MiB warning lines no rule explains: each is kept as evidence only in part.
    let (code, peak_kib, md) = peak_of(&["explain", "-", "--format", "md", "--unexplained"], |stdin| {
        let body = vec![b'y'; (1 << 20) - 200];
        for i in 0..96 {
            write!(stdin, "node{i}:1:2 [0] misc/x.cc:{i} NCCL WARN unknown failure {i} ").unwrap();
            stdin.write_all(&body).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
    });
    assert_eq!(code, 3, "unknown");
    assert!(md.contains("Unexplained warning/error lines (96)"), "every line is seen");
    assert!(md.len() < 8 << 20, "the report is not the log: {} bytes", md.len());
    assert!(peak_kib < BOUND_KIB, "peak RSS {peak_kib} KiB for 96 MiB of warning lines");
    eprintln!("96 x 1 MiB warning lines: peak RSS {peak_kib} KiB, report {} bytes", md.len());
}

#[test]
fn big_archives_keep_memory_bounded() {
    let d = tempfile::tempdir().unwrap();
    // 10 000 members in one tgz.
    let names: Vec<String> = (0..10_000).map(|i| format!("job/rank{i:05}.log")).collect();
    let body = "gpu-node-1:11:12 [0] NCCL INFO ok\n";
    let members: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), body.as_bytes())).collect();
    let many = d.path().join("many.tgz");
    std::fs::write(&many, tgz(&members)).unwrap();
    // One honest member of 128 MiB of log lines (twice the bound) in a zip of under 1 MiB.
    let mut w = zip::ZipWriter::new(std::fs::File::create(d.path().join("big.zip")).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated).large_file(true);
    w.start_file("rank0.log", opts).unwrap();
    let block = body.repeat(1 << 15);
    for _ in 0..(128 << 20) / block.len() {
        w.write_all(block.as_bytes()).unwrap();
    }
    w.write_all(TEARDOWN.as_bytes()).unwrap();
    w.finish().unwrap();
    for p in [many, d.path().join("big.zip")] {
        let (code, kib, _) =
            peak_of(&["explain".as_ref(), "--format".as_ref(), "json".as_ref(), p.as_os_str()], |_| {});
        assert_eq!(code, 0, "{}", p.display());
        assert!(kib < BOUND_KIB, "{}: peak RSS {kib} KiB", p.display());
        eprintln!("{}: peak RSS {kib} KiB", p.display());
    }
}

/// Issue 38, point 7: a 1,048,576-rank job's interleaved log (168 MB: every rank's init line, one
/// rank's OOM, 2,000 peers' closed sockets). The culprit is named, in bounded memory: the
/// (host, pid) -> rank map holds 16 bytes a process (85 MiB peak measured, docs/performance.md).
#[test]
fn a_million_rank_job_names_its_culprit_in_bounded_memory() {
    let culprit = 1_000_003;
    let (code, peak_kib, out) = peak_of(&["explain", "-", "--format", "json"], move |stdin| {
        common::big_job_log(1 << 20, culprit, 2_000, std::io::BufWriter::with_capacity(1 << 20, stdin));
    });
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, 1, "actionable");
    assert_eq!(v["primary"]["evidence"][0]["rank"], culprit, "{:#}", v["primary"]);
    assert!(peak_kib < 3 * BOUND_KIB, "peak RSS {peak_kib} KiB for a 1M-rank log");
    eprintln!("1M-rank log: peak RSS {peak_kib} KiB");
}
