//! Issue 14 on CPU, from real data taken on an H200 (docs/results/2026-12-01-h200-hangs.md): stacks of
//! hung ranks folded to where they wait, and Flight Recorder dumps read by `explain` with the logs.

use std::path::{Path, PathBuf};
use std::process::Command;

use epdoctor::flight::{self, pickle};
use epdoctor::repro::stacks::{fold, fold_full, parse_eu_stack, parse_py_spy, Thread};
use serde_json::Value;

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(p)
}

/// The main thread of a raw stacks file as `repro` wrote it at the deadline.
fn main_thread(file: &str, parse: fn(&str) -> Vec<Thread>) -> Thread {
    let text = std::fs::read_to_string(fixture(file)).unwrap();
    let pid: i32 = text.split("pid=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    parse(&text).into_iter().find(|t| t.tid == Some(pid)).expect("the main thread")
}

#[test]
fn torch_destroy_hang_on_2_32_3_folds_to_the_barrier_in_finalize() {
    let t = main_thread("hangs/torch-2.32.3-destroy-rank0.py-spy.txt", parse_py_spy);
    assert_eq!(
        fold(&t.frames),
        "ncclOsSocketTryAccept <- ... <- bootstrapP2PBarrier <- bootstrapIntraNodeBarrier <- ... <- ncclCommFinalize \
         <- ... <- ProcessGroupNCCL::shutdown <- ... <- destroy_process_group <- device-hangs-torch.py:110"
    );
    assert!(fold_full(&t.frames).contains(
        "commDestroySync <- ncclAsyncJobMain <- asyncJobLaunch <- groupLaunchLegacy <- groupLaunch <- ncclGroupEndInternal \
         <- ncclCommFinalize <- NCCLComm::finalize <- ProcessGroupNCCL::shutdown <- ProcessGroup::shutdown <- destroy_process_group"
    ));
}

#[test]
fn builtin_early_exit_survivor_stack_from_eu_stack() {
    let t = main_thread("hangs/builtin-2.32.3-early-exit-rank0.eu-stack.txt", parse_eu_stack);
    assert_eq!(
        fold(&t.frames),
        "socketConnectCheck <- ... <- bootstrapP2PBarrier <- bootstrapIntraNodeBarrier <- ... <- ncclCommFinalize"
    );
}

#[test]
fn a_rank_waiting_for_a_collective_and_the_rank_that_never_called_it() {
    let waits = "cuCtxSynchronize_v2 <- cudaDeviceSynchronize <- cuda::device_synchronize <- THCPModule_cudaSynchronize <- synchronize";
    let r0 = main_thread("hangs/torch-2.28.9-skip-rank0.py-spy.txt", parse_py_spy);
    assert_eq!(fold(&r0.frames), format!("{waits} <- device-hangs-torch.py:84"));
    let r1 = main_thread("hangs/torch-2.28.9-skip-rank1.py-spy.txt", parse_py_spy);
    assert_eq!(fold(&r1.frames), "device-hangs-torch.py:81", "time.sleep instead of the all_reduce");
    let k = main_thread("hangs/torch-2.32.3-kill-survivor-rank0.py-spy.txt", parse_py_spy);
    assert_eq!(fold(&k.frames), format!("{waits} <- device-hangs-torch.py:104"));
}

fn explain_json(args: &[&Path]) -> (Option<i32>, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_epdoctor"))
        .arg("explain")
        .args(["-f", "json"])
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("EPDOCTOR_RULES")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn evidence(v: &Value) -> String {
    v["primary"]["evidence"][0]["text"].as_str().unwrap_or("").to_string()
}

#[test]
fn explain_on_a_folder_of_dumps_and_logs_names_the_rank_that_never_joined() {
    // The log holds only rank 0's watchdog timeout (the victim); the dumps name rank 1.
    let (code, v, err) = explain_json(&[&fixture("fr/skip")]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(v["verdict"], "actionable");
    assert_eq!(v["primary"]["rule"], "fr-rank-never-joined");
    let e = evidence(&v);
    assert!(e.contains("seq=5 op=all_reduce") && e.contains("rank 1 never joined (last enqueued #4)"), "{e}");
    assert!(e.ends_with("rank 0 enqueued it, called at all_reduce <- wrapper <- device-hangs-torch.py:83"), "{e}");
    let rules: Vec<&str> = v["findings"].as_array().unwrap().iter().map(|f| f["rule"].as_str().unwrap()).collect();
    assert!(rules.contains(&"torch-watchdog-timeout"), "the log's findings stay: {rules:?}");
    // The dumps alone say the same; the log alone does not know the culprit but says where to look.
    let (_, v, _) = explain_json(&[&fixture("fr/skip/nccl_trace_rank_0"), &fixture("fr/skip/nccl_trace_rank_1")]);
    assert_eq!(v["primary"]["rule"], "fr-rank-never-joined");
    let (_, v, _) = explain_json(&[&fixture("fr/skip/cmd.log")]);
    assert_eq!(v["primary"]["rule"], "torch-watchdog-timeout");
    assert!(v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("TORCH_NCCL_DUMP_ON_TIMEOUT=1")));
}

#[test]
fn explain_finds_a_mismatched_collective() {
    let (_, v, _) = explain_json(&[&fixture("fr/mismatch")]);
    assert_eq!(v["primary"]["rule"], "fr-collective-mismatch");
    assert!(evidence(&v).ends_with(
        "seq=5: collective mismatch: rank 0 all_reduce [[4096]] [Float]; rank 1 all_reduce [[2048]] [BFloat16]"
    ));
}

#[test]
fn a_killed_rank_leaves_no_dump() {
    // NET/Socket (2.28.9): the log says the peer went away; that stays the primary.
    let (_, v, _) = explain_json(&[&fixture("fr/kill")]);
    assert_eq!(v["primary"]["rule"], "nccl-peer-gone");
    let missing = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "fr-rank-without-dump").unwrap();
    assert!(missing["evidence"][0]["text"]
        .as_str()
        .unwrap()
        .ends_with("rank 1 of the group wrote no Flight Recorder dump while rank 0 waits in seq=25 op=all_reduce"));
    // Intra-node P2P (2.32.3): only the survivor's timeout in the log; the missing dump names rank 1.
    let (_, v, _) = explain_json(&[&fixture("fr/kill-2.32.3")]);
    assert_eq!(v["primary"]["rule"], "fr-rank-without-dump");
    assert!(evidence(&v).contains("rank 1 of the group wrote no Flight Recorder dump while rank 0 waits in seq=654"));
}

#[test]
fn a_broken_dump_is_a_note_and_alone_an_error() {
    let d = tempfile::tempdir().unwrap();
    let real = std::fs::read(fixture("fr/skip/nccl_trace_rank_0")).unwrap();
    let cut = d.path().join("nccl_trace_rank_0");
    std::fs::write(&cut, &real[..real.len() / 2]).unwrap();
    let (code, v, _) = explain_json(&[&cut, &fixture("fr/skip/cmd.log")]);
    assert_eq!(code, Some(1));
    let notes = v["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().starts_with("Flight Recorder dump skipped: ")), "{notes:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_epdoctor")).arg("explain").arg(&cut).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a readable pickle") && err.contains("nccl_trace_rank_0"), "{err}");
}

/// Every prefix and many corruptions of real dumps: an answer or an error, never a panic.
#[test]
fn the_pickle_reader_survives_cut_and_corrupted_dumps() {
    for f in ["fr/skip/nccl_trace_rank_0", "fr/mismatch/nccl_trace_rank_1", "fr/kill/nccl_trace_rank_0"] {
        let real = std::fs::read(fixture(f)).unwrap();
        assert!(flight::from_bytes(&real, Path::new(f)).is_ok());
        for n in 0..real.len() {
            assert!(pickle::parse(&real[..n]).is_err(), "{f} cut at {n} still parsed");
        }
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for i in 0..4000 {
            let mut b = real.clone();
            for _ in 0..1 + i % 4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x as usize) % b.len();
                b[at] = (x >> 32) as u8;
            }
            let _ = flight::from_bytes(&b, Path::new(f));
        }
    }
}
