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
         <- ... <- ProcessGroupNCCL::shutdown <- ... <- destroy_process_group <- rank_main (device-hangs-torch.py:110)"
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
    assert_eq!(fold(&r0.frames), format!("{waits} <- rank_main (device-hangs-torch.py:84)"));
    let r1 = main_thread("hangs/torch-2.28.9-skip-rank1.py-spy.txt", parse_py_spy);
    assert_eq!(fold(&r1.frames), "rank_main (device-hangs-torch.py:81)", "time.sleep instead of the all_reduce");
    let k = main_thread("hangs/torch-2.32.3-kill-survivor-rank0.py-spy.txt", parse_py_spy);
    assert_eq!(fold(&k.frames), format!("{waits} <- rank_main (device-hangs-torch.py:104)"));
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
    assert!(
        e.ends_with("rank 0 enqueued it, called at all_reduce <- wrapper <- rank_main (device-hangs-torch.py:83)"),
        "{e}"
    );
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
        "seq=5: collective mismatch, culprit rank 1: rank 0 all_reduce [[4096]] [Float]; rank 1 all_reduce [[2048]] [BFloat16]"
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

/// A protocol-2 pickle of a JSON value, as Python's pickler writes one (dicts, lists, strings,
/// ints, bools, None): enough to write dumps in torch's format for the cases no real run gave.
fn pickle_of(v: &Value) -> Vec<u8> {
    fn one(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Null => out.push(b'N'),
            Value::Bool(b) => out.push(if *b { 0x88 } else { 0x89 }),
            Value::Number(n) => {
                out.push(b'J');
                out.extend((n.as_i64().unwrap() as i32).to_le_bytes());
            }
            Value::String(s) => {
                out.push(b'X');
                out.extend((s.len() as u32).to_le_bytes());
                out.extend(s.as_bytes());
            }
            Value::Array(a) => {
                out.extend(b"](");
                a.iter().for_each(|x| one(x, out));
                out.push(b'e');
            }
            Value::Object(o) => {
                out.extend(b"}(");
                for (k, x) in o {
                    one(&Value::String(k.clone()), out);
                    one(x, out);
                }
                out.push(b'u');
            }
        }
    }
    let mut out = vec![0x80, 2];
    one(v, &mut out);
    out.push(b'.');
    out
}

/// One rank's dump in torch's 2.10 format (FlightRecorder.cpp's keys); `status`: (enqueued,
/// completed), or None for a dump of an older torch without `pg_status`; `entries`: (seq, op, size, state).
fn dump_2_10(status: Option<(i64, i64)>, entries: &[(i64, &str, i64, &str)], ranks: &str) -> Vec<u8> {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(seq, op, size, state)| {
            serde_json::json!({
                "record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"],
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": format!("nccl:{op}"),
                "input_sizes": [[size]], "input_dtypes": ["Float"], "output_sizes": [[size]], "output_dtypes": ["Float"],
                "state": state, "is_p2p": false, "retired": false, "timeout_ms": 600000,
                "frames": [{"name": op, "filename": "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", "line": 2800},
                           {"name": "train_step", "filename": "/job/train.py", "line": 88}]
            })
        })
        .collect();
    let mut d = serde_json::json!({
        "version": "2.10", "comm_lib_version": "2.28.9",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "entries": entries,
    });
    if let Some((enq, done)) = status {
        d["pg_status"] = serde_json::json!({"0": {
            "last_enqueued_collective": enq, "last_started_collective": -1, "last_completed_collective": done}});
    }
    pickle_of(&d)
}

fn write_dumps(d: &Path, dumps: &[(&str, Vec<u8>)]) {
    for (name, bytes) in dumps {
        std::fs::write(d.join(name), bytes).unwrap();
    }
}

#[test]
fn real_gloo_dumps_of_torch_2_15_name_the_rank_without_a_dump_and_the_one_that_never_joined() {
    // scripts/fr-gloo-dumps.py with torch 2.15.0 (CPU, gloo): pg_config keyed '' and pg_status '0',
    // files named <host>_<rank>, ops `gloo:all_reduce`.
    let (code, v, err) = explain_json(&[&fixture("fr/gloo-missing")]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(v["primary"]["rule"], "fr-rank-without-dump");
    assert_eq!(v["primary"]["ranks"], serde_json::json!([3]));
    assert!(evidence(&v).ends_with(
        "pg=0 (default_pg): rank 3 of the group wrote no Flight Recorder dump while ranks 0, 1, 2 wait in seq=7 op=all_reduce"
    ), "{}", evidence(&v));
    let (_, v, _) = explain_json(&[&fixture("fr/gloo-skip")]);
    assert_eq!(v["primary"]["rule"], "fr-rank-never-joined");
    assert_eq!(v["primary"]["ranks"], serde_json::json!([3]));
    let e = evidence(&v);
    assert!(
        e.contains("seq=7 op=all_reduce sizes=[[1024]] dtypes=[Float]: rank 3 never joined (last enqueued #6)"),
        "{e}"
    );
    assert!(e.ends_with("called at all_reduce <- wrapper <- rank_main (fr-gloo-dumps.py:38)"), "{e}");
}

#[test]
fn dumps_without_pg_status_are_read_from_their_entries() {
    let d = tempfile::tempdir().unwrap();
    let done: Vec<(i64, &str, i64, &str)> = (1..=4).map(|s| (s, "all_reduce", 4096, "completed")).collect();
    let mut waiting = done.clone();
    waiting.push((5, "all_reduce", 4096, "started"));
    // A prefix of the user's choice and an extension: the rank is still the number the name ends with.
    write_dumps(
        d.path(),
        &[("job7_fr_0.pkl", dump_2_10(None, &waiting, "[0, 1]")), ("job7_fr_1.pkl", dump_2_10(None, &done, "[0, 1]"))],
    );
    let (code, v, err) = explain_json(&[d.path()]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(v["primary"]["rule"], "fr-rank-never-joined");
    assert_eq!(v["primary"]["ranks"], serde_json::json!([1]));
    assert!(evidence(&v)
        .contains("seq=5 op=all_reduce sizes=[[4096]] dtypes=[Float]: rank 1 never joined (last enqueued #4)"));
}

#[test]
fn every_rank_enqueued_seq_42_and_none_completed_it() {
    let d = tempfile::tempdir().unwrap();
    let mut e: Vec<(i64, &str, i64, &str)> = (30..=41).map(|s| (s, "all_reduce", 1024, "completed")).collect();
    e.push((42, "all_gather", 8192, "scheduled"));
    let dumps: Vec<(String, Vec<u8>)> =
        (0..4).map(|r| (format!("nccl_trace_rank_{r}"), dump_2_10(Some((42, 41)), &e, "[0, 1, 2, 3]"))).collect();
    let refs: Vec<(&str, Vec<u8>)> = dumps.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    write_dumps(d.path(), &refs);
    let (code, v, err) = explain_json(&[d.path()]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(v["primary"]["rule"], "fr-collective-not-completed", "{v:#}");
    assert!(
        evidence(&v).ends_with(
            "seq=42 op=all_gather sizes=[[8192]] dtypes=[Float]: every rank enqueued it and none completed it \
         (ranks 0, 1, 2, 3; state scheduled), called at all_gather <- train_step (train.py:88)"
        ),
        "{}",
        evidence(&v)
    );
}

#[test]
fn a_mismatch_names_the_odd_rank_out() {
    let d = tempfile::tempdir().unwrap();
    let e = |size| -> Vec<(i64, &str, i64, &str)> {
        vec![(9, "all_reduce", 64, "completed"), (10, "all_reduce", size, "scheduled")]
    };
    let dumps: Vec<(String, Vec<u8>)> = (0..4)
        .map(|r| {
            (
                format!("nccl_trace_rank_{r}"),
                dump_2_10(Some((10, 9)), &e(if r == 3 { 2048 } else { 4096 }), "[0, 1, 2, 3]"),
            )
        })
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = dumps.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    write_dumps(d.path(), &refs);
    let (_, v, _) = explain_json(&[d.path()]);
    assert_eq!(v["primary"]["rule"], "fr-collective-mismatch");
    assert_eq!(v["primary"]["ranks"], serde_json::json!([3]), "the culprit, not all four");
    assert!(evidence(&v).ends_with(
        "seq=10: collective mismatch, culprit rank 3: ranks 0, 1, 2 all_reduce [[4096]] [Float]; rank 3 all_reduce [[2048]] [Float]"
    ), "{}", evidence(&v));
}

#[test]
fn a_hostile_pickle_is_an_error_not_an_abort() {
    // 200 000 nested lists (1.2 MB as Python's pickler writes them: EMPTY_LIST, BINPUT... APPEND).
    let d = tempfile::tempdir().unwrap();
    let mut p = b"\x80\x02}q\x00X\x07\x00\x00\x00entriesq\x01".to_vec();
    for i in 0..200_000u32 {
        p.push(b']');
        p.push(b'r');
        p.extend((i + 2).to_le_bytes());
    }
    p.extend(std::iter::repeat_n(b'a', 199_999));
    p.extend(b"s.");
    assert!(p.len() > 1_100_000);
    let f = d.path().join("nccl_trace_rank_0");
    std::fs::write(&f, &p).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_epdoctor")).arg("explain").arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("nested deeper than 200 levels") && err.contains("nccl_trace_rank_0"), "{err}");
    // Beside a log it is a note and the log is still explained.
    let (code, v, _) = explain_json(&[&f, &fixture("fr/skip/cmd.log")]);
    assert_eq!(code, Some(1));
    assert!(v["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("nested deeper than 200")));
}

fn py_spy() -> bool {
    let ok = Command::new("py-spy").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok && std::env::var("EPDOCTOR_REQUIRE_PYSPY").is_ok_and(|v| v == "1") {
        panic!("EPDOCTOR_REQUIRE_PYSPY=1 but py-spy is not on PATH");
    }
    if !ok {
        eprintln!("skipped: py-spy is not on PATH (pip install py-spy; .ci/run installs it)");
    }
    ok
}

/// `repro -- python3 sleephang.py` (a real Python that hangs in a function of its own), with `env`.
fn sleephang(env: &[(&str, &str)]) -> (tempfile::TempDir, Value) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("sleephang.py"),
        "import time\n\n\ndef stuck_in_teardown():\n    print('teardown starts', flush=True)\n    time.sleep(600)\n\n\nstuck_in_teardown()\n",
    )
    .unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_epdoctor"));
    c.current_dir(d.path()).env("NO_COLOR", "1").env_remove("EPDOCTOR_RULES").env_remove("EPDOCTOR_STACK_TOOLS");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .args(["repro", "-q", "--out", "run", "--timeout", "4", "--grace", "1", "--", "python3", "sleephang.py"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(d.path().join("run/cells.json")).unwrap()).unwrap();
    let cell = v["cells"][0].clone();
    (d, cell)
}

#[test]
fn a_hang_cell_names_the_hung_process_and_its_stack_with_the_python_function() {
    if !py_spy() {
        return;
    }
    let (d, cell) = sleephang(&[]);
    assert_eq!(cell["status"], "hang");
    assert_eq!(cell["primary"]["rule"], "hang-stack-main-thread", "not the harness's bare deadline line");
    let e = cell["primary"]["evidence"].as_str().unwrap();
    assert!(e.ends_with("via=py-spy thread=main: stuck_in_teardown (sleephang.py:6)"), "{e}");
    assert_eq!(cell["stack_groups"][0]["waits"], "stuck_in_teardown (sleephang.py:6)");
    assert!(cell.get("stack_notes").is_none(), "no note when py-spy worked: {}", cell["stack_notes"]);
    // Every harness line is known: nothing unexplained, the verdict is not unknown.
    let dir = d.path().join("run/cells").join(cell["id"].as_str().unwrap());
    let (_, v, _) = explain_json(&[&dir]);
    assert_eq!(v["unexplained"], serde_json::json!([]), "{:#}", v["unexplained"]);
}

#[test]
fn a_missing_py_spy_is_said_in_harness_log_and_the_report_with_its_install_command() {
    let (d, cell) = sleephang(&[("EPDOCTOR_STACK_TOOLS", "proc")]);
    let notes = cell["stack_notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n.as_str().unwrap().contains("py-spy not found on PATH")
            && n.as_str().unwrap().contains("`pip install py-spy`")),
        "{notes:?}"
    );
    let dir = d.path().join("run/cells").join(cell["id"].as_str().unwrap());
    let h = std::fs::read_to_string(dir.join("harness.log")).unwrap();
    assert!(h.contains("[epdoctor-harness] stacks: py-spy not found on PATH"), "{h}");
    let report = std::fs::read_to_string(d.path().join("run/report.md")).unwrap();
    assert!(report.contains("py-spy not found on PATH"), "{report}");
    // Still a stack from /proc, and the finding about the missing tool is a note, not the cause.
    assert_eq!(cell["stacks"][0]["tool"], "proc");
    assert_eq!(cell["primary"]["rule"], "hang-stack-main-thread");
}

#[test]
fn stacks_are_grouped_across_ranks_the_odd_group_first() {
    use epdoctor::model::run::ProcStack;
    let st = |rank: &str, waits: &str| ProcStack {
        node: None,
        rank: rank.into(),
        pid: 1,
        cmd: "python3 train.py".into(),
        tool: "py-spy".into(),
        waits: waits.into(),
        others: vec![],
        raw: String::new(),
    };
    let mut stacks: Vec<ProcStack> =
        (0..16).filter(|r| *r != 7).map(|r| st(&r.to_string(), "all_reduce <- train_step (train.py:88)")).collect();
    stacks.push(st("7", "DataLoader.__next__ <- train_step (train.py:61)"));
    stacks.push(st("cmd", "Popen.wait <- launch (run.py:9)"));
    let fr: std::collections::BTreeMap<String, i64> =
        (0..16).map(|r: i64| (r.to_string(), if r == 7 { 41 } else { 42 })).collect();
    let g = epdoctor::repro::stacks::group(&stacks, &fr);
    let lines: Vec<String> = g.iter().map(|g| format!("{} #{:?}: {}", g.label, g.fr_seq, g.waits)).collect();
    assert_eq!(
        lines,
        [
            "rank 7 #Some(41): DataLoader.__next__ <- train_step (train.py:61)",
            "ranks 0-6, 8-15 #Some(42): all_reduce <- train_step (train.py:88)",
            "cmd #None: Popen.wait <- launch (run.py:9)",
        ]
    );
    // 512 ranks, one odd: two groups, not 512 lines.
    let many: Vec<ProcStack> =
        (0..512).map(|r| st(&r.to_string(), if r == 300 { "x (a.py:1)" } else { "y (a.py:2)" })).collect();
    let g = epdoctor::repro::stacks::group(&many, &Default::default());
    assert_eq!(g.iter().map(|g| g.label.as_str()).collect::<Vec<_>>(), ["rank 300", "ranks 0-299, 301-511"]);
}
