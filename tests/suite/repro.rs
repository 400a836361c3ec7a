//! `epdoctor repro` end to end on CPU: stand-in ranks (tests/fixtures/repro/*.sh) take the place of
//! the GPU worker through the EPDOCTOR_WORKER_CMD test hook, or run as the user's `-- CMD`.
//! Deadlines are short but every assertion is about what happened, never about how long it took.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro").join(name)
}

/// A scratch folder per test: the run folder goes in `run/`, shm files in `shm/`.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let s = Scratch { dir: tempfile::tempdir().unwrap() };
        std::fs::create_dir(s.shm()).unwrap();
        s
    }
    fn run(&self) -> PathBuf {
        self.dir.path().join("run")
    }
    fn shm(&self) -> PathBuf {
        self.dir.path().join("shm")
    }
    /// A fake libnccl.so whose first line is the version the stand-in reports.
    fn lib(&self, version: &str) -> PathBuf {
        let d = self.dir.path().join(format!("nccl-{version}"));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("libnccl.so.2");
        std::fs::write(&p, format!("{version}\n")).unwrap();
        p
    }
    fn cmd(&self) -> Command {
        let mut c = common::std_epdoctor();
        c.env("EPDOCTOR_WORKER_CMD", fixture("standin-rank.sh"))
            .env("EPDOCTOR_SHM_DIR", self.shm())
            .env_remove("NCCL_DEBUG")
            .env_remove("NCCL_DEBUG_FILE")
            .stdin(Stdio::null());
        c.arg("repro").arg("--out").arg(self.run());
        c
    }
    fn cells(&self) -> Value {
        let text = std::fs::read_to_string(self.run().join("cells.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
    fn cell_dir(&self, cell: &Value) -> PathBuf {
        self.run().join("cells").join(cell["id"].as_str().unwrap())
    }
    fn harness(&self, cell: &Value) -> String {
        std::fs::read_to_string(self.cell_dir(cell).join("harness.log")).unwrap()
    }
}

fn run_ok(c: &mut Command) -> Output {
    let out = c.output().unwrap();
    assert!(
        out.status.code().is_some(),
        "epdoctor died: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Live processes whose environment names a folder under `run` (what the harness marks its cells with).
fn alive_under(run: &Path) -> Vec<String> {
    let run = run.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let state = stat.rsplit(')').next().unwrap_or("").trim_start().chars().next();
        if state == Some('Z') {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let hit = env.split(|&b| b == 0).any(|kv| {
            String::from_utf8_lossy(kv).strip_prefix("EPDOCTOR_CELL_DIR=").is_some_and(|v| v.starts_with(&run))
        });
        if hit {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push(format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// The comparison table of report.md: header then rows, cells trimmed.
fn md_table(report: &str) -> Vec<Vec<String>> {
    report
        .lines()
        .filter(|l| l.starts_with('|') && !l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')))
        .map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect())
        .collect()
}

/// Column `name` of row `row` (1-based, after the header) of report.md's table.
fn md_cell(report: &str, row: usize, name: &str) -> String {
    let t = md_table(report);
    let col = t[0].iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}: {:?}", t[0]));
    t[row][col].clone()
}

/// Wait until rank 1 of the first cell has printed its teardown-start marker.
fn wait_first_cell_in_teardown(s: &Scratch) {
    let log = || {
        let d = std::fs::read_dir(s.run().join("cells")).ok()?.flatten().next()?.path();
        std::fs::read_to_string(d.join("rank1.log")).ok()
    };
    let until = Instant::now() + Duration::from_secs(120);
    while !log().is_some_and(|l| l.contains("phase=teardown-start")) {
        assert!(Instant::now() < until, "the first cell never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rules_of(cell: &Value) -> Vec<String> {
    cell["rules"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn nccl_lib_by_teardown_matrix_finds_the_abort_trio_in_one_cell() {
    let s = Scratch::new();
    let (old, new) = (s.lib("2.22.3"), s.lib("2.28.3"));
    let out = run_ok(
        s.cmd()
            .args(["--ranks", "2", "--teardown", "clean,abort", "--timeout", "120", "-f", "json"])
            .arg("--nccl-lib")
            .arg(&old)
            .arg("--nccl-lib")
            .arg(&new),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, s.cells(), "stdout is cells.json");
    assert_eq!(v["status"], "complete");
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    // Axis order: nccl-lib (outer), teardown.
    let want = [("2.22.3", "clean"), ("2.22.3", "abort"), ("2.28.3", "clean"), ("2.28.3", "abort")];
    for (c, (ver, mode)) in cells.iter().zip(want) {
        assert_eq!(c["nccl_version"], ver, "the version the cell ran, from the worker's marker");
        assert_eq!(c["status"], "ok");
        let dir = s.cell_dir(c);
        assert!(dir.file_name().unwrap().to_string_lossy().contains(mode));
        for f in ["rank0.log", "rank1.log", "harness.log"] {
            assert!(dir.join(f).is_file(), "{} missing", f);
        }
        assert!(dir.join("rendezvous").is_dir());
        // NCCL_DEBUG_FILE pointed into the cell, one file per rank process (%p).
        let nccl_files = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".nccl."))
            .count();
        assert_eq!(nccl_files, 2);
        assert_eq!(s.harness(c), "[epdoctor-harness] rank=0 exit=0\n[epdoctor-harness] rank=1 exit=0\n");
        let trio = rules_of(c).contains(&"nccl-abort-pair".to_string());
        assert_eq!(trio, ver == "2.22.3" && mode == "abort", "cell {}: {:?}", c["id"], rules_of(c));
        assert_eq!(c["warn_lines"].as_u64().unwrap() > 0, trio);
        // Phase times come from the markers.
        assert!(c["teardown_s"].as_f64().is_some());
        assert!(c["markers"]["1"]["phases"]["work"].as_f64().is_some());
    }
    // The effect summary says where the trio comes from.
    let site = v["where_fired"].as_array().unwrap().iter().find(|x| x["item"] == "nccl-abort-pair").unwrap();
    assert_eq!(site["exact"], true);
    assert_eq!(site["fired"], 1);
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert!(
        report.contains("nccl-abort-pair: in 1 of 4 settings, exactly when nccl-lib=2.22.3 and teardown=abort"),
        "{report}"
    );
    assert!(report
        .contains("teardown=abort vs teardown=clean (2 pairs): appears +nccl-abort-pair (only with nccl-lib=2.22.3)"));
    assert!(report.contains(
        "nccl-lib=2.28.3 vs nccl-lib=2.22.3 (2 pairs): vanishes -nccl-abort-pair (only with teardown=abort)"
    ));
    assert!(!report.contains("PARTIAL"));
}

#[test]
fn nccl_debug_defaults_to_warn_and_an_axis_replaces_it() {
    let s = Scratch::new();
    let lib = s.lib("2.22.3");
    let out = run_ok(
        s.cmd()
            .args(["--ranks", "1", "--teardown", "abort", "--env", "NCCL_DEBUG=,WARN", "-q"])
            .arg("--nccl-lib")
            .arg(&lib),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = s.cells();
    assert!(v["fixed_env"].as_object().unwrap().is_empty(), "the user's NCCL_DEBUG axis wins");
    let c = v["cells"].as_array().unwrap();
    assert_eq!(c[0]["env"]["NCCL_DEBUG"], Value::Null);
    assert_eq!(c[0]["warn_lines"], 0, "NCCL prints nothing without NCCL_DEBUG");
    assert_eq!(c[1]["warn_lines"], 3);

    let s2 = Scratch::new();
    let lib = s2.lib("2.22.3");
    run_ok(s2.cmd().args(["--ranks", "1", "--teardown", "abort", "-q"]).arg("--nccl-lib").arg(&lib));
    let v = s2.cells();
    assert_eq!(v["fixed_env"]["NCCL_DEBUG"], "WARN");
    assert_eq!(v["cells"][0]["warn_lines"], 3);
}

#[test]
fn hang_is_stopped_term_then_kill_and_nothing_is_left() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args([
        "--ranks",
        "2",
        "--teardown",
        "clean",
        "--env",
        "STANDIN=hang-ignore-term",
        "--timeout",
        "3",
        "--grace",
        "1",
        "-q",
    ]));
    assert_eq!(out.status.code(), Some(0), "a hang is a result, not a harness failure: {}", stderr(&out));
    let v = s.cells();
    let c = &v["cells"][0];
    assert_eq!(c["status"], "hang");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.starts_with("hang: rank 0 in teardown for "), "{detail}");
    assert!(
        detail.contains(", rank 1 in teardown for ") && detail.ends_with("; stopped at the 3 s deadline"),
        "{detail}"
    );
    let h = s.harness(c);
    for r in ["0", "1"] {
        assert!(
            h.contains(&format!("[epdoctor-harness] rank={r} deadline: still running after 3s, sent SIGTERM\n")),
            "{h}"
        );
        assert!(h.contains(&format!("[epdoctor-harness] rank={r} killed after grace period (SIGKILL)\n")), "{h}");
        assert!(h.contains(&format!("[epdoctor-harness] rank={r} signal=9 (SIGKILL) sent by epdoctor\n")), "{h}");
        assert!(h.contains(&format!("[epdoctor-harness] rank={r} last phase=teardown-start\n")), "{h}");
    }
    assert!(rules_of(c).contains(&"harness-rank-deadline-hang".to_string()), "{:?}", rules_of(c));
    assert_eq!(c["processes"][0]["deadline"], true);
    assert_eq!(c["processes"][0]["sigkill"], true);
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
}

#[test]
fn early_exit_on_new_nccl_is_a_hang_in_the_survivors_teardown() {
    let s = Scratch::new();
    let lib = s.lib("2.32.3");
    let out = run_ok(
        s.cmd()
            .args(["--ranks", "2", "--teardown", "early-exit", "--timeout", "3", "--grace", "5", "-q"])
            .arg("--nccl-lib")
            .arg(&lib),
    );
    assert_eq!(out.status.code(), Some(0));
    let v = s.cells();
    let c = &v["cells"][0];
    assert_eq!(c["status"], "hang");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.starts_with("hang: rank 0 in teardown for "), "{detail}");
    // Then where it waited, from its stack (the stand-in's shell waits for its sleep).
    assert!(detail.contains(", after `teardown=early-exit`, waiting in `"), "{detail}");
    assert!(detail.ends_with("; stopped at the 3 s deadline"), "{detail}");
    assert_eq!(c["hung"].as_array().unwrap().len(), 1);
    assert_eq!(c["hung"][0]["phase"], "teardown-start");
    assert_eq!(c["teardown_s"], Value::Null);
    let h = s.harness(c);
    assert!(h.contains("rank=0 deadline: still running after 3s, sent SIGTERM"));
    assert!(h.contains("rank=0 signal=15 (SIGTERM)"), "a plain sleep loop dies of SIGTERM: {h}");
    assert!(h.contains("rank=1 exit=0"));
    assert!(!h.contains("SIGKILL"));
    assert!(alive_under(&s.run()).is_empty());
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert_eq!(md_cell(&report, 1, "status"), "hang", "{report}");
    assert_eq!(md_cell(&report, 1, "teardown s"), "hang");
    assert_eq!(md_cell(&report, 1, "exit"), "deadline/SIGTERM 0");
}

#[test]
fn a_rank_killing_itself_and_a_failing_rank_are_reported() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["--ranks", "2", "--teardown", "kill-peer", "-q"]));
    assert_eq!(out.status.code(), Some(0));
    let c = &s.cells()["cells"][0];
    assert_eq!(c["status"], "failed");
    assert_eq!(c["detail"], "rank 1 SIGKILL");
    assert_eq!(s.harness(c), "[epdoctor-harness] rank=0 exit=0\n[epdoctor-harness] rank=1 signal=9 (SIGKILL)\n");
    assert_eq!(c["processes"][1]["signal_name"], "SIGKILL");
    assert_eq!(c["processes"][1]["deadline"], false);

    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["--ranks", "1", "--teardown", "clean", "--env", "STANDIN=exit3"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rank0.log last line: RuntimeError: stand-in failure"), "{text}");
    let c = &s.cells()["cells"][0];
    assert_eq!(c["detail"], "rank 0 exit 3");
    assert!(rules_of(c).contains(&"harness-rank-exit-nonzero".to_string()));
}

#[test]
fn a_workload_that_never_starts_is_an_error_with_its_reason() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["--ranks", "2", "--teardown", "clean,abort", "--env", "STANDIN=nogpu"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("no rank of any cell started the workload; rank 0 said: error: the workload needs GPU libraries"),
        "{}",
        stderr(&out)
    );
    let v = s.cells();
    assert_eq!(v["status"], "complete", "the run folder is still whole");
    assert_eq!(v["cells"].as_array().unwrap().len(), 2);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("last line: error: the workload needs GPU libraries").count(), 1, "{text}");
    assert_eq!(text.matches("last line: as above").count(), 3, "{text}");
}

#[test]
fn forked_grandchildren_are_found_and_killed() {
    // One that escaped the process group (setsid) and outlived its rank; one in the group of a rank that hangs.
    let s = Scratch::new();
    let out = run_ok(s.cmd().args([
        "--ranks",
        "1",
        "--teardown",
        "clean",
        "--env",
        "STANDIN=fork-escape,fork-hang",
        "--timeout",
        "3",
        "--grace",
        "2",
        "-q",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = s.cells();
    let escaped = &v["cells"][0];
    assert_eq!(escaped["status"], "ok");
    let procs = escaped["leftovers"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    let cmd = procs[0]["cmd"].as_str().unwrap();
    assert!(cmd.ends_with("sleep 300"), "{cmd}");
    assert_eq!(procs[0]["survived_kill"], false);
    let h = s.harness(escaped);
    assert!(h.contains(&format!("[epdoctor-harness] leftover process pid={} cmd={cmd}\n", procs[0]["pid"])), "{h}");
    assert!(rules_of(escaped).contains(&"harness-leftover".to_string()));
    let hung = &v["cells"][1];
    assert_eq!(hung["status"], "hang");
    // SIGTERM went to the whole group, so the grandchild went with its rank.
    assert!(hung["leftovers"]["processes"].as_array().unwrap().is_empty());
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
    let text = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert_eq!(md_cell(&text, 1, "leftovers"), "1 proc", "{text}");
    assert_eq!(md_cell(&text, 2, "leftovers"), "-");
}

#[test]
fn a_rank_that_closes_stdout_early_still_has_its_log() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["--ranks", "1", "--teardown", "clean", "--env", "STANDIN=close-stdout", "-q"]));
    assert_eq!(out.status.code(), Some(0));
    let v = s.cells();
    let c = &v["cells"][0];
    assert_eq!(c["status"], "ok");
    let log = std::fs::read_to_string(s.cell_dir(c).join("rank0.log")).unwrap();
    assert!(log.contains("[epdoctor] rank=0 phase=teardown-start"));
    assert!(log.contains("stderr after stdout closed"));
    // The teardown-end marker went to the closed stdout: the rank is not counted as finished teardown.
    assert_eq!(c["markers"]["0"]["phases"]["teardown-end"], Value::Null);
}

#[test]
fn shm_files_and_abstract_sockets_created_during_the_cell_are_leftovers() {
    let s = Scratch::new();
    std::fs::write(s.shm().join("nccl-before"), b"").unwrap();
    let out = run_ok(s.cmd().args(["--ranks", "1", "--teardown", "clean", "--env", "STANDIN=shm", "-q"]));
    assert_eq!(out.status.code(), Some(0));
    let c = &s.cells()["cells"][0];
    let shm = c["leftovers"]["shm"].as_array().unwrap();
    assert_eq!(shm.len(), 1, "only the file made during the cell: {shm:?}");
    let name = shm[0].as_str().unwrap();
    assert!(name.starts_with("nccl-") && name != "nccl-before");
    assert!(s.harness(c).contains(&format!("[epdoctor-harness] leftover /dev/shm/{name}\n")));

    if Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|st| st.success()) {
        let s = Scratch::new();
        let out = run_ok(s.cmd().args(["--ranks", "1", "--teardown", "clean", "--env", "STANDIN=socket", "-q"]));
        assert_eq!(out.status.code(), Some(0));
        let c = &s.cells()["cells"][0];
        let socks = c["leftovers"]["sockets"].as_array().unwrap();
        assert_eq!(socks.len(), 1, "{c}");
        assert!(socks[0].as_str().unwrap().starts_with("@/tmp/nccl-socket-0-standin"));
        assert!(s.harness(c).contains("[epdoctor-harness] leftover socket @/tmp/nccl-socket-0-standin"));
        assert_eq!(c["leftovers"]["processes"].as_array().unwrap().len(), 1, "the socket's holder");
        let h = s.harness(c);
        assert!(
            h.lines().all(|l| l.starts_with("[epdoctor-harness] ")),
            "one fact per line, even for `python -c`: {h}"
        );
        assert!(alive_under(&s.run()).is_empty());
    } else {
        eprintln!("python3 not found: the socket half of this test did not run");
    }
}

#[test]
fn user_command_runs_once_per_cell_under_the_env_matrix() {
    let s = Scratch::new();
    let lib = s.lib("2.28.3");
    let out = run_ok(
        s.cmd()
            .args(["--env", "DESTROY=0,1", "--env", "NCCL_DEBUG=WARN,INFO", "--ranks", "2", "-q"])
            .arg("--nccl-lib")
            .arg(&lib)
            .arg("--")
            .arg("sh")
            .arg(fixture("standin-cmd.sh")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Effect of each axis"), "{text}");
    let v = s.cells();
    assert_eq!(v["workload"], "command");
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    for c in cells {
        let destroy = c["env"]["DESTROY"] == "1";
        assert_eq!(c["status"], "ok");
        assert_eq!(s.harness(c), "[epdoctor-harness] rank=cmd exit=0\n");
        let dir = s.cell_dir(c);
        let log = std::fs::read_to_string(dir.join("cmd.log")).unwrap();
        assert!(log.contains(&format!("ranks=2 lib={}", lib.display())), "{log}");
        assert_eq!(c["warn_lines"], if destroy { 0 } else { 2 });
        assert_eq!(rules_of(c).contains(&"torch-no-destroy-process-group".to_string()), !destroy);
        assert!(c["markers"]["0"]["phases"]["teardown-end"].as_f64().is_some());
        assert_eq!(c["nccl_version"], "2.28.9", "a command's NCCL version comes from its logs");
    }
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert!(
        report.contains(
            "DESTROY=1 vs DESTROY=0 (2 pairs): vanishes -torch-no-destroy-process-group; WARN lines 4 -> 0 (-100 %)"
        ),
        "{report}"
    );
}

#[test]
fn a_hanging_command_is_stopped_with_its_children() {
    let s = Scratch::new();
    let out = run_ok(
        s.cmd()
            .args(["--env", "STANDIN=hang", "--timeout", "3", "--grace", "2", "-q", "--", "sh"])
            .arg(fixture("standin-cmd.sh")),
    );
    assert_eq!(out.status.code(), Some(0));
    let c = &s.cells()["cells"][0];
    assert_eq!(c["status"], "hang");
    assert!(c["detail"].as_str().unwrap().starts_with("hang: rank 0 in teardown"), "{}", c["detail"]);
    assert!(s.harness(c).contains("[epdoctor-harness] rank=cmd deadline: still running after 3s, sent SIGTERM\n"));
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
}

#[test]
fn a_command_that_cannot_start_is_a_harness_failure() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["-q", "--", "/nonexistent/epdoctor-test-command"]));
    assert_eq!(out.status.code(), Some(5));
    let c = &s.cells()["cells"][0];
    assert_eq!(c["status"], "launch-error");
    assert!(s
        .harness(c)
        .starts_with("[epdoctor-harness] rank=cmd launch failed: starting /nonexistent/epdoctor-test-command"));
}

/// Start a matrix whose cells hang, wait until the first cell's ranks are up, signal epdoctor.
fn interrupt_mid_matrix(sig: i32) {
    let s = Scratch::new();
    let mut child = s
        .cmd()
        .args([
            "--ranks",
            "2",
            "--teardown",
            "clean,abort,leak",
            "--env",
            "STANDIN=fork-hang",
            "--timeout",
            "600",
            "-q",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_first_cell_in_teardown(&s);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let until = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("epdoctor did not stop after the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
    let v = s.cells();
    assert_eq!(v["status"], "interrupted");
    assert_eq!(v["interrupted_by"], name);
    assert_eq!(v["cells"].as_array().unwrap().len(), 1, "no cell starts after the signal");
    assert_eq!(v["cells_planned"], 3);
    let c = &v["cells"][0];
    assert_eq!(c["status"], "interrupted");
    let h = s.harness(c);
    assert!(h.contains(&format!("[epdoctor-harness] rank=0 interrupted: epdoctor got {name}, sent SIGTERM\n")), "{h}");
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert!(report.contains(&format!("PARTIAL: interrupted by {name} after 1 of 3 cells")), "{report}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("PARTIAL"));
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
}

#[test]
fn epdoctor_killed_outright_leaves_a_partial_run_and_takes_its_ranks_along() {
    let s = Scratch::new();
    let mut child = s
        .cmd()
        .args(["--ranks", "2", "--teardown", "clean,abort", "--env", "STANDIN=hang", "--timeout", "600", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_first_cell_in_teardown(&s);
    child.kill().unwrap();
    child.wait().unwrap();
    // The ranks get SIGKILL from the kernel when epdoctor dies (their `sleep 1` children finish on their own).
    let until = Instant::now() + Duration::from_secs(60);
    while !alive_under(&s.run()).is_empty() {
        assert!(Instant::now() < until, "still alive: {:?}", alive_under(&s.run()));
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = s.cells();
    assert_eq!(v["status"], "running");
    assert!(v["cells"].as_array().unwrap().is_empty());
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert!(report.contains("PARTIAL: 0 of 2 cells written"), "{report}");
}

#[test]
fn sigint_mid_matrix_stops_everything_and_writes_a_partial_report() {
    interrupt_mid_matrix(libc::SIGINT);
}

#[test]
fn sigterm_mid_matrix_stops_everything_and_writes_a_partial_report() {
    interrupt_mid_matrix(libc::SIGTERM);
}

#[test]
fn repeat_and_text_table() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["--ranks", "1", "--teardown", "clean,kill-peer", "--repeat", "2"]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["teardown", "rep", "nccl ran", "leftovers", "Run folder: "] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let v = s.cells();
    let ids: Vec<&str> = v["cells"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["001-clean-r1", "002-clean-r2", "003-kill-peer-r1", "004-kill-peer-r2"]);
    // One rank: the last rank is rank 0, so kill-peer kills it.
    let e = v["effects"].as_array().unwrap();
    assert_eq!(e.len(), 1);
    assert!(e[0]["appear"].as_array().unwrap().iter().any(|a| a["item"] == "outcome:failed"));
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let s = Scratch::new();
    let out = run_ok(s.cmd().args(["--teardown", "clean,explode"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown teardown mode \"explode\"; the modes are: clean, abort, leak, early-exit"));
    assert!(!s.run().exists(), "no run folder for a usage error");

    std::fs::create_dir(s.run()).unwrap();
    std::fs::write(s.run().join("keep.txt"), "mine").unwrap();
    let out = run_ok(s.cmd().args(["--teardown", "clean"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("the folder exists and is not empty; a run folder is never overwritten"));
    assert_eq!(std::fs::read_dir(s.run()).unwrap().count(), 1);

    let s = Scratch::new();
    let out = run_ok(s.cmd().env("EPDOCTOR_WORKER_CMD", "/nonexistent/standin").args(["--teardown", "clean"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("EPDOCTOR_WORKER_CMD=/nonexistent/standin is not a file"));

    for (args, want) in [
        (vec!["--env", "NCCL_DEBUG"], "expected NAME=V1,V2"),
        (vec!["--nccl-lib", "/nonexistent/libnccl.so.2"], "/nonexistent/libnccl.so.2"),
        (vec!["--teardown", "abort", "--", "true"], "built-in workload only"),
        (vec!["--timeout", "0"], "--timeout must be a positive number"),
    ] {
        let out = run_ok(s.cmd().args(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_hung_command_gets_a_stack_per_rank_from_proc() {
    let s = Scratch::new();
    let out = run_ok(
        s.cmd()
            .env("EPDOCTOR_STACK_TOOLS", "proc")
            .args(["--timeout", "2", "--grace", "2", "-q", "--", "sh"])
            .arg(fixture("standin-hang-ranks.sh")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = &s.cells()["cells"][0];
    assert_eq!(c["status"], "hang");
    // The launcher and rank 0 are still running; rank 0 is named by the RANK in its environment.
    let stacks = c["stacks"].as_array().unwrap();
    assert_eq!(stacks.len(), 2, "{stacks:?}");
    let r0 = stacks.iter().find(|x| x["rank"] == "0").expect("rank 0 by its RANK variable");
    assert_eq!(r0["tool"], "proc");
    assert!(r0["cmd"].as_str().unwrap().starts_with("sleep 300"), "{r0}");
    let launcher = stacks.iter().find(|x| x["rank"] == "cmd").expect("the command itself");
    assert_eq!(launcher["pid"], c["processes"][0]["pid"]);
    // The hung entry is rank 0 (the one with a rank), not "the command".
    let hung = c["hung"].as_array().unwrap();
    assert_eq!(hung.len(), 1, "{hung:?}");
    assert_eq!(hung[0]["rank"], "0");
    let waits = r0["waits"].as_str().unwrap();
    assert!(!waits.is_empty() && waits != "?", "the kernel says where a sleeping process waits: {r0}");
    assert_eq!(hung[0]["waits"].as_str(), Some(waits));
    assert!(
        c["detail"].as_str().unwrap().starts_with(&format!("hang: rank 0, waiting in `{waits}`")),
        "{}",
        c["detail"]
    );
    // Raw stacks kept, folded lines in stacks.log, the capture noted before the SIGTERM.
    let dir = s.cell_dir(c);
    let raw = std::fs::read_to_string(dir.join(r0["raw"].as_str().unwrap())).unwrap();
    assert!(raw.contains("# /proc/PID/task/*/{wchan,syscall,stack}") && raw.contains("rank=0"), "{raw}");
    let log = std::fs::read_to_string(dir.join("stacks.log")).unwrap();
    assert!(log.contains(&format!("[epdoctor-stack] rank=0 pid={} via=proc thread=main: {waits}", r0["pid"])), "{log}");
    let h = s.harness(c);
    let cap = h.find("stacks: 2 process(es) captured").expect(&h);
    assert!(cap < h.find("deadline: still running").unwrap(), "stacks are taken before the SIGTERM: {h}");
    assert!(h.contains("eu-stack not found on PATH (nor gdb)") && h.contains("apt-get install elfutils"), "{h}");
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert!(report.contains(&format!("  - rank 0 (pid {}), via proc: `{waits}`", r0["pid"])), "{report}");
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
}

/// With py-spy installed (`pip install py-spy`), a hung Python rank's stack is its Python frames,
/// folded down to the caller's line. Without py-spy, the test checks the advice to install it.
#[test]
fn a_hung_python_rank_gets_its_python_stack_or_the_advice_to_install_py_spy() {
    if Command::new("python3").arg("-c").arg("pass").status().map(|s| !s.success()).unwrap_or(true) {
        eprintln!("python3 not found: nothing to test");
        return;
    }
    let has_py_spy = Command::new("py-spy").arg("--version").output().is_ok_and(|o| o.status.success());
    let s = Scratch::new();
    let out = run_ok(
        s.cmd()
            .env("EPDOCTOR_STACK_TOOLS", "py-spy,proc")
            .env("RANK", "0")
            .args(["--timeout", "3", "--grace", "2", "-q", "--", "python3"])
            .arg(fixture("standin-hang.py")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = &s.cells()["cells"][0];
    let st = &c["stacks"][0];
    assert_eq!(st["rank"], "0", "{c}");
    if has_py_spy {
        assert_eq!(st["tool"], "py-spy", "{st}");
        // Folded to the caller's line, with its function's name (issue 26, point 3).
        assert_eq!(st["waits"], "wait_for_gone_peer (standin-hang.py:9)", "{st}");
    } else {
        assert_eq!(st["tool"], "proc");
        assert!(
            s.harness(c)
                .contains("py-spy not found on PATH, so no Python frames: install it with `pip install py-spy`"),
            "{}",
            s.harness(c)
        );
    }
}

/// Markdown outside code spans and fences: what a renderer treats as markup.
fn outside_code(md: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<String> = None;
    for line in md.lines() {
        let t = line.trim_start();
        if let Some(f) = &fence {
            if t.starts_with(f.as_str()) {
                fence = None;
            }
            continue;
        }
        if t.starts_with("```") {
            fence = Some(t.chars().take_while(|&c| c == '`').collect());
            continue;
        }
        // Drop code spans: a run of n backticks up to the next run of exactly n.
        let b: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < b.len() {
            if b[i] == '`' {
                let n = b[i..].iter().take_while(|&&c| c == '`').count();
                let mut j = i + n;
                let mut closed = None;
                while j < b.len() {
                    if b[j] == '`' {
                        let m = b[j..].iter().take_while(|&&c| c == '`').count();
                        if m == n {
                            closed = Some(j + m);
                            break;
                        }
                        j += m;
                    } else {
                        j += 1;
                    }
                }
                match closed {
                    Some(end) => i = end,
                    None => {
                        out.extend(&b[i..i + n]);
                        i += n;
                    }
                }
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        out.push('\n');
    }
    out
}

#[test]
fn log_text_reaches_report_md_escaped_and_redacted() {
    let s = Scratch::new();
    let script = "echo '[epdoctor] rank=0 phase=init t=1 note: <img src=x onerror=alert(1)> @octocat [x](https://evil.example)'; \
                  echo 'gpu-node-9:12:34 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer gpu-node-10<41234>'; \
                  echo 'leaving <b>now</b> @octocat see [here](https://evil.example) from gpu-node-9'; exit 1";
    let out = run_ok(s.cmd().args(["-q", "--", "sh", "-c", script]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    assert!(report.contains("last line"), "the failing process's last line is shown: {report}");
    for leak in ["gpu-node-9", "gpu-node-10"] {
        assert!(!report.contains(leak), "{leak} unredacted in report.md:\n{report}");
    }
    let markup = outside_code(&report);
    for raw in ["<img", "<b>", "@octocat", "](https://", "https://evil"] {
        assert!(!markup.contains(raw), "{raw} reaches report.md as markup:\n{report}");
    }
}

#[test]
fn every_usage_error_is_found_before_any_cell_runs() {
    let s = Scratch::new();
    let bad = s.dir.path().join("bad.toml");
    std::fs::write(&bad, "[[rule]]\nid = \"x\"\nthis is not toml\n").unwrap();
    let out = run_ok(s.cmd().arg("--rules").arg(&bad).args(["--", "true"]));
    assert_eq!(out.status.code(), Some(2), "a bad rule file is a usage error: {}", stderr(&out));
    assert!(stderr(&out).contains("bad.toml"), "{}", stderr(&out));
    assert!(!s.run().exists(), "no run folder for a usage error");

    // Several problems: one message naming each.
    let out = run_ok(s.cmd().arg("--rules").arg(&bad).args(["--teardown", "clean,explode", "--timeout", "0"]));
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for want in ["bad.toml", "unknown teardown mode \"explode\"", "--timeout must be a positive number"] {
        assert!(err.contains(want), "{want:?} missing from {err}");
    }
    assert!(!s.run().exists());
}

#[test]
fn the_builtin_workload_without_gpu_libraries_is_refused_before_running() {
    let gpus = std::fs::read_dir("/proc/driver/nvidia/gpus").map(|d| d.count()).unwrap_or(0);
    if gpus > 0 {
        eprintln!("this machine has an NVIDIA driver: the no-GPU refusal cannot be seen here");
        return;
    }
    let s = Scratch::new();
    let out = run_ok(s.cmd().env_remove("EPDOCTOR_WORKER_CMD").args(["--ranks", "2"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("the workload needs GPU libraries that cannot be loaded"), "{}", stderr(&out));
    assert!(!s.run().exists(), "no run folder: nothing was run");
}

#[test]
fn a_command_running_a_python_script_is_linted_first() {
    let s = Scratch::new();
    // `true` stands in for python: the cells succeed; what counts is the lint of its script argument.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rules/lint/fixtures/never-destroyed.py");
    let out = run_ok(s.cmd().args(["-q", "--", "true"]).arg(&script));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("never-destroyed.py:10: warning [destroy-missing]"), "{text}");
    let v = s.cells();
    assert_eq!(v["lint"][0]["rule"], "destroy-missing");
    let report = std::fs::read_to_string(s.run().join("report.md")).unwrap();
    // report.md escapes the brackets (they would start a link); GitHub shows [destroy-missing].
    assert!(report.contains("lint predicts: ") && report.contains("\\[destroy-missing\\]"), "{report}");
}
