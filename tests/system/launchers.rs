//! `repro --launcher slurm` and `--launcher torchrun` end to end, with the launchers' own programs:
//! a real Slurm (slurmctld + slurmd, `.ci/slurm start` sets up a one-node cluster) and a real
//! torchrun (PyTorch from PyPI), with stand-in ranks (tests/fixtures/repro/standin-rank.sh and
//! standin-torch.py) in place of the GPU worker. Without Slurm or torchrun these tests print why and
//! pass; with EPDOCTOR_REQUIRE_SLURM=1 / EPDOCTOR_REQUIRE_TORCHRUN=1 (set by .ci/run) they fail instead.
//! Every assertion is about what happened, never about how long it took.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_epdoctor")
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro").join(name)
}

/// Is the launcher there? If not: fail when `require` is set, else say why and skip.
fn have(what: &str, require: &str, probe: &mut Command) -> bool {
    let ok = probe.stdin(Stdio::null()).output().map(|o| o.status.success() && !o.stdout.is_empty());
    let why = match ok {
        Ok(true) => return true,
        Ok(false) => format!("{probe:?} did not answer"),
        Err(e) => format!("{probe:?}: {e}"),
    };
    if std::env::var(require).is_ok_and(|v| v == "1") {
        panic!("{require}=1 but {what} is not usable: {why}");
    }
    eprintln!("skipped: {what} is not usable here ({why}); .ci/slurm start sets up Slurm, docs/repro.md says how");
    false
}

fn slurm() -> bool {
    have("Slurm", "EPDOCTOR_REQUIRE_SLURM", Command::new("sinfo").args(["--noheader", "--format=%T"]))
}

fn torchrun() -> bool {
    have("torchrun", "EPDOCTOR_REQUIRE_TORCHRUN", Command::new("torchrun").arg("--help"))
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string()
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let s = Scratch { dir: tempfile::tempdir().unwrap() };
        std::fs::create_dir(s.dir.path().join("shm")).unwrap();
        s
    }
    fn run(&self) -> PathBuf {
        self.dir.path().join("run")
    }
    fn lib(&self, version: &str) -> PathBuf {
        let p = self.dir.path().join(format!("libnccl-{version}.so.2"));
        std::fs::write(&p, format!("{version}\n")).unwrap();
        p
    }
    fn cmd(&self, launcher: &str) -> Command {
        let mut c = Command::new(bin());
        c.env("EPDOCTOR_WORKER_CMD", fixture("standin-rank.sh"))
            .env("EPDOCTOR_SHM_DIR", self.dir.path().join("shm"))
            .env("NO_COLOR", "1")
            .env_remove("SLURM_JOB_ID")
            .env_remove("NCCL_DEBUG")
            .env_remove("NCCL_DEBUG_FILE")
            .env_remove("EPDOCTOR_FORMAT")
            .env_remove("EPDOCTOR_RULES")
            .env_remove("EPDOCTOR_RANKS")
            .env_remove("EPDOCTOR_TIMEOUT")
            .stdin(Stdio::null());
        c.args(["repro", "--launcher", launcher, "-q", "--out"]).arg(self.run());
        c
    }
    fn cells(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.run().join("cells.json")).unwrap()).unwrap()
    }
    fn cell_dir(&self, c: &Value) -> PathBuf {
        self.run().join("cells").join(c["id"].as_str().unwrap())
    }
    fn harness(&self, c: &Value) -> String {
        std::fs::read_to_string(self.cell_dir(c).join("harness.log")).unwrap()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn rules_of(c: &Value) -> Vec<String> {
    c["rules"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

/// Live processes whose environment names a cell folder under `run`.
fn alive_under(run: &Path) -> Vec<String> {
    let run = run.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z') {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if env.split(|&b| b == 0).any(|kv| {
            String::from_utf8_lossy(kv).strip_prefix("EPDOCTOR_CELL_DIR=").is_some_and(|v| v.starts_with(&run))
        }) {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push(format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// The job's state as squeue sees it ("" once it is gone).
fn job_state(job: &str) -> String {
    let o = Command::new("squeue").args(["--noheader", "--format=%T", "--jobs", job]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// slurmstepd processes of a job (`slurmstepd: [J.S]`, `slurmstepd: [J.extern]`).
fn stepds_of(job: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.starts_with(&format!("slurmstepd: [{job}.")) {
            out.push(cmd);
        }
    }
    out
}

/// Wait (bounded) for a job epdoctor cancelled to leave the queue and the node.
fn wait_job_gone(job: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while !job_state(job).is_empty() || !stepds_of(job).is_empty() {
        assert!(Instant::now() < until, "job {job} still there: {:?} {:?}", job_state(job), stepds_of(job));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn slurm_cells_are_job_steps_with_rank_logs_triage_scancel_and_a_leftovers_probe() {
    if !slurm() {
        return;
    }
    let s = Scratch::new();
    let lib = s.lib("2.22.3");
    let out = s
        .cmd("slurm")
        .args(["--nodes", "1", "--ntasks-per-node", "2", "--teardown", "abort", "--timeout", "6", "--grace", "1"])
        .args(["--env", "STANDIN=,fork-escape,hang-ignore-term", "--nccl-lib"])
        .arg(&lib)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = s.cells();
    assert_eq!(v["status"], "complete");
    let alloc = &v["launcher"]["slurm"];
    assert_eq!(v["launcher"]["kind"], "slurm");
    assert_eq!(alloc["allocated_by_epdoctor"], true);
    assert_eq!(alloc["nodes"], serde_json::json!([host()]));
    let job = alloc["job_id"].as_str().unwrap().to_string();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 3);
    for c in cells {
        let dir = s.cell_dir(c);
        // One job step per cell, in epdoctor's allocation, on this node.
        assert!(c["step"].as_str().unwrap().starts_with(&format!("{job}.")), "{}", c["step"]);
        assert_eq!(c["nodes"], serde_json::json!([host()]));
        // One file per task, each with that rank's markers, and the task's end from srun's report.
        for r in ["0", "1"] {
            let log = std::fs::read_to_string(dir.join(format!("rank{r}.log"))).unwrap();
            assert!(log.contains(&format!("[epdoctor] rank={r} phase=init")), "{log}");
            let p = c["processes"].as_array().unwrap().iter().find(|p| p["label"] == r).unwrap();
            assert_eq!(p["log"], format!("rank{r}.log"));
            assert_eq!(p["node"], host());
        }
        assert!(dir.join("slurm/srun.log").is_file());
        assert_eq!(c["markers"].as_object().unwrap().len(), 2);
    }

    // A clean cell: the NCCL 2.22 abort trio in both ranks' NCCL files, triaged; nothing left.
    let ok = &cells[0];
    assert_eq!(ok["status"], "ok", "{}", ok["detail"]);
    assert!(rules_of(ok).contains(&"nccl-abort-pair".to_string()), "{:?}", rules_of(ok));
    assert_eq!(ok["warn_lines"], 6);
    assert_eq!(
        s.harness(ok),
        "[epdoctor-harness] rank=0 exit=0\n[epdoctor-harness] rank=1 exit=0\n[epdoctor-harness] rank=srun exit=0\n"
    );
    assert_eq!(ok["leftovers"]["probed_nodes"], serde_json::json!([host()]));

    // The setsid grandchildren escaped Slurm's process tracking; the probe on the node found them
    // by their cell tag and killed them.
    let esc = &cells[1];
    let left = esc["leftovers"]["processes"].as_array().unwrap();
    assert_eq!(left.len(), 2, "one per rank: {left:?}");
    for p in left {
        assert_eq!(p["cmd"], "sleep 300");
        assert_eq!(p["node"], host());
        assert_eq!(p["survived_kill"], false);
    }
    assert!(rules_of(esc).contains(&"harness-leftover".to_string()));
    let probe: Value =
        serde_json::from_str(&std::fs::read_to_string(s.cell_dir(esc).join("slurm/probe.0.json")).unwrap()).unwrap();
    assert_eq!(probe["node"], host());
    assert_eq!(probe["processes"].as_array().unwrap().len(), 2);

    // A hang that ignores SIGTERM: scancel TERM at the deadline, scancel KILL after the grace period.
    let hang = &cells[2];
    assert_eq!(hang["status"], "hang");
    let detail = hang["detail"].as_str().unwrap();
    assert!(detail.starts_with("hang: rank 0 in teardown for ") && detail.contains("rank 1 in teardown"), "{detail}");
    let step = hang["step"].as_str().unwrap();
    let h = s.harness(hang);
    assert!(h.contains(&format!("[epdoctor-harness] scancel --signal=TERM {step}: ok\n")), "{h}");
    assert!(h.contains(&format!("[epdoctor-harness] scancel --signal=KILL {step}: ok\n")), "{h}");
    assert!(h.contains("[epdoctor-harness] rank=0 signal=9 (SIGKILL) sent by epdoctor\n"), "{h}");
    for r in 0..2 {
        let p = &hang["processes"][r];
        assert!(p["deadline"] == true && p["sigkill"] == true, "{p}");
    }
    assert!(rules_of(hang).contains(&"harness-rank-deadline-hang".to_string()), "{:?}", rules_of(hang));
    assert!(hang["leftovers"]["processes"].as_array().unwrap().is_empty(), "{}", hang["leftovers"]);

    // Nothing of any cell is left on the node, and the allocation was given back.
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
    wait_job_gone(&job);
}

#[test]
fn slurm_ctrl_c_cancels_the_step_and_gives_the_allocation_back() {
    if !slurm() {
        return;
    }
    let s = Scratch::new();
    let mut child = s
        .cmd("slurm")
        .args(["--ranks", "2", "--teardown", "clean,abort", "--env", "STANDIN=fork-hang", "--timeout", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for both ranks of the first cell to be in teardown.
    let until = Instant::now() + Duration::from_secs(120);
    let up = || {
        let d = std::fs::read_dir(s.run().join("cells")).ok()?.flatten().next()?.path();
        let a = std::fs::read_to_string(d.join("rank0.log")).ok()?;
        let b = std::fs::read_to_string(d.join("rank1.log")).ok()?;
        Some(a.contains("phase=teardown-start") && b.contains("phase=teardown-start"))
    };
    while up() != Some(true) {
        assert!(Instant::now() < until, "the first cell never started");
        assert!(child.try_wait().unwrap().is_none(), "epdoctor ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    let job = s.cells()["launcher"]["slurm"]["job_id"].as_str().unwrap().to_string();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let until = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("epdoctor did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let v = s.cells();
    assert_eq!(v["status"], "interrupted");
    let c = &v["cells"][0];
    assert_eq!(c["status"], "interrupted");
    let h = s.harness(c);
    assert!(
        h.contains(&format!("[epdoctor-harness] scancel --signal=TERM {}: ok\n", c["step"].as_str().unwrap())),
        "{h}"
    );
    assert_eq!(c["processes"][0]["interrupted"], true);
    assert_eq!(v["cells"].as_array().unwrap().len(), 1, "no cell starts after the signal");
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
    wait_job_gone(&job);
}

#[test]
fn slurm_inside_an_allocation_uses_it_and_leaves_it_running() {
    if !slurm() {
        return;
    }
    let o = Command::new("salloc")
        .args(["--no-shell", "--job-name=epdoctor-test", "--nodes=1", "--ntasks-per-node=2"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&o);
    let job =
        err.split("Granted job allocation ").nth(1).and_then(|t| t.split_whitespace().next()).expect(&err).to_string();
    struct Cancel(String);
    impl Drop for Cancel {
        fn drop(&mut self) {
            let _ = Command::new("scancel").arg(&self.0).output();
        }
    }
    let _cancel = Cancel(job.clone());
    let s = Scratch::new();
    // The user's command, once per task; a task that fails ends the step (--kill-on-bad-exit).
    let out = s
        .cmd("slurm")
        .env("SLURM_JOB_ID", &job)
        .args(["--nodes", "1", "--ntasks-per-node", "2", "--env", "X=a,b", "--timeout", "60", "--"])
        .args(["sh", "-c", r#"echo "task $SLURM_PROCID x=$X"; [ "$X.$SLURM_PROCID" = b.1 ] && { echo "RuntimeError: stand-in failure" >&2; exit 3; }; exit 0"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = s.cells();
    assert_eq!(v["launcher"]["slurm"]["job_id"], job.as_str());
    assert_eq!(v["launcher"]["slurm"]["allocated_by_epdoctor"], false);
    let (a, b) = (&v["cells"][0], &v["cells"][1]);
    assert_eq!(a["status"], "ok");
    assert_eq!(std::fs::read_to_string(s.cell_dir(a).join("rank1.log")).unwrap(), "task 1 x=a\n");
    assert_eq!(b["status"], "failed");
    assert!(b["detail"].as_str().unwrap().contains("rank 1 exit 3"), "{}", b["detail"]);
    assert!(s.harness(b).contains("[epdoctor-harness] rank=1 exit=3\n"));
    // explain takes the rank from the file's name (rank%t.log), for the cell and for a user.
    assert_eq!(b["primary"]["source"], "rank1.log", "{}", b["primary"]);
    let out = Command::new(bin()).args(["explain", "-f", "json"]).arg(s.cell_dir(b)).output().unwrap();
    let e: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(e["primary"]["rule"], "launcher-python-exception", "{}", e["primary"]);
    assert_eq!(e["primary"]["ranks"], serde_json::json!([1]));
    assert_eq!(job_state(&job), "RUNNING", "the user's allocation stays");
}

#[test]
fn slurm_starts_the_real_worker_with_its_place_from_the_task() {
    if !slurm() {
        return;
    }
    if Path::new("/proc/driver/nvidia/gpus").exists() {
        eprintln!(
            "skipped: this machine has GPUs, so the worker would run for real (scripts/device-repro.sh covers that)"
        );
        return;
    }
    // epdoctor's own worker, no stand-in: without a GPU it stops at its library check, which comes
    // after it has taken its rank and world from SLURM_PROCID / SLURM_NTASKS.
    let s = Scratch::new();
    let out = s
        .cmd("slurm")
        .env_remove("EPDOCTOR_WORKER_CMD")
        .args(["--ranks", "2", "--teardown", "clean"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("rank 0 said: error: the workload needs GPU libraries that cannot be loaded"),
        "{}",
        stderr(&out)
    );
    let c = &s.cells()["cells"][0];
    for r in ["0", "1"] {
        let log = std::fs::read_to_string(s.cell_dir(c).join(format!("rank{r}.log"))).unwrap();
        assert!(!log.contains("--rank and --world"), "{log}");
    }
}

#[test]
fn leftovers_probe_finds_and_kills_a_cell_tagged_process_on_this_node() {
    // No Slurm needed: the probe is what srun runs on every node.
    let d = tempfile::tempdir().unwrap();
    let tag = d.path().join("cells/001").to_string_lossy().into_owned();
    let mut c = Command::new("setsid")
        .args(["sleep", "300"])
        .env("EPDOCTOR_CELL_DIR", &tag)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = c.id() as i64;
    let reaper = std::thread::spawn(move || c.wait());
    let out = Command::new(bin())
        .args(["env", "--leftovers", "--cell", &tag, "--kill", "--format", "json"])
        .env("EPDOCTOR_SHM_DIR", d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], host());
    assert_eq!(v["cell"], tag.as_str());
    let p = v["processes"].as_array().unwrap();
    assert_eq!(p.len(), 1, "{v}");
    assert_eq!(p[0]["pid"], pid);
    assert_eq!(p[0]["survived_kill"], false);
    reaper.join().unwrap().unwrap();
    let again = Command::new(bin()).args(["env", "--leftovers", "--cell", &tag]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&again.stdout), format!("nothing of cell {tag} on {}\n", host()));
}

#[test]
fn torchrun_cells_have_a_log_file_per_rank_and_read_the_error_files() {
    if !torchrun() {
        return;
    }
    let s = Scratch::new();
    let lib = s.lib("2.22.3");
    // The built-in workload's stand-in behind a real torchrun: ranks from RANK / WORLD_SIZE.
    let out = s
        .cmd("torchrun")
        .args(["--nproc-per-node", "2", "--teardown", "abort", "--timeout", "120", "--nccl-lib"])
        .arg(&lib)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = s.cells();
    assert_eq!(v["launcher"]["kind"], "torchrun");
    let c = &v["cells"][0];
    assert_eq!(c["status"], "ok", "{}", c["detail"]);
    assert_eq!(c["markers"].as_object().unwrap().len(), 2, "markers from each rank's stdout.log");
    assert!(rules_of(c).contains(&"nccl-abort-pair".to_string()), "{:?}", rules_of(c));
    let tree: Vec<String> = walk(&s.cell_dir(c).join("torchrun"));
    for r in ["0", "1"] {
        for f in ["stdout.log", "stderr.log"] {
            assert!(tree.iter().any(|p| p.ends_with(&format!("attempt_0/{r}/{f}"))), "{tree:?}");
        }
    }

    // A Python rank that fails under torchelastic's `record`: torch writes its error file, which
    // the cell reads.
    let s = Scratch::new();
    let out = s
        .cmd("torchrun")
        .args(["--nproc-per-node", "2", "--timeout", "120", "--", "python3"])
        .arg(fixture("standin-torch.py"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = &s.cells()["cells"][0];
    assert_eq!(c["status"], "failed");
    let errs = c["rank_errors"].as_array().unwrap();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0]["local_rank"], 1);
    assert_eq!(errs[0]["message"], "RuntimeError: stand-in failure on rank 1");
    assert!(s.harness(c).contains("local_rank=1 attempt=0 error file torchrun/"), "{}", s.harness(c));
    assert!(alive_under(&s.run()).is_empty(), "{:?}", alive_under(&s.run()));
}

#[test]
fn explain_reads_a_real_torchrun_log_tree() {
    // tests/fixtures/repro/torchrun-cell: the agent's output and its --log-dir tree from a real run.
    let cell = fixture("torchrun-cell");
    let out = Command::new(bin()).args(["explain", "-f", "json"]).arg(&cell).env("NO_COLOR", "1").output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(v["verdict"], "actionable");
    let primary = &v["primary"];
    assert_eq!(primary["rule"], "launcher-python-exception", "{primary}");
    let sources: Vec<&str> =
        primary["evidence"].as_array().unwrap().iter().filter_map(|e| e["source"].as_str()).collect();
    assert!(sources.iter().any(|s| s.ends_with("attempt_0/1/stderr.log")), "the failing rank's own file: {sources:?}");
    // The rank comes from the tree's <local_rank> folder.
    assert_eq!(primary["ranks"], serde_json::json!([1]), "{primary}");
}

fn walk(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn a_command_that_does_not_exist_is_a_launch_error_locally_and_under_slurm() {
    let mut launchers = vec!["local"];
    if slurm() {
        launchers.push("slurm");
    }
    for l in launchers {
        let s = Scratch::new();
        let mut c = s.cmd(l);
        if l == "slurm" {
            c.args(["--ntasks-per-node", "1"]);
        }
        let out = c.args(["--timeout", "30", "--", "epdoctor-no-such-command-26"]).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{l}: {}", stderr(&out));
        let v = s.cells();
        let cell = &v["cells"][0];
        assert_eq!(cell["status"], "launch-error", "{l}: {}", cell["detail"]);
        assert!(cell["detail"].as_str().unwrap().contains("epdoctor-no-such-command-26"), "{l}: {}", cell["detail"]);
        let want = if l == "slurm" { "slurm-execve-failed" } else { "harness-launch-failed" };
        assert_eq!(cell["primary"]["rule"], want, "{l}");
        // Slurm's own lines about it are known, not unexplained.
        assert_ne!(cell["verdict"], "unknown", "{l}: {:?}", rules_of(cell));
    }
}

#[test]
fn a_child_that_scrubs_its_environment_and_calls_setsid_is_found_and_ended() {
    // Its own session and no cell tag: only epdoctor being the subreaper of its descendants finds it.
    let s = Scratch::new();
    let out = s
        .cmd("local")
        .args(["--timeout", "30", "--", "sh", "-c", "setsid env -i sleep 765 & echo started"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = s.cells();
    let left = v["cells"][0]["leftovers"]["processes"].as_array().unwrap();
    assert!(left.iter().any(|p| p["cmd"] == "sleep 765" && p["survived_kill"] == false), "{left:?}");
    let alive = Command::new("pgrep").args(["-f", "^sleep 765$"]).output().unwrap();
    assert!(alive.stdout.is_empty(), "still running: {}", String::from_utf8_lossy(&alive.stdout));
}

/// More tasks than the partition can ever give one job (CPUs x the 4 tasks a CPU may share), so
/// salloc's request stays pending (PartitionConfig on the CI Slurm).
fn too_many_tasks() -> String {
    let o = Command::new("sinfo").args(["--noheader", "--format=%C"]).output().unwrap();
    // `A/I/O/T`: allocated/idle/other/total CPUs.
    let total: usize = String::from_utf8_lossy(&o.stdout).trim().rsplit('/').next().unwrap().parse().unwrap();
    (total * 4 + 1).to_string()
}

/// epdoctor started with its stderr lines coming through a channel, and the salloc it starts.
struct Asking {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Asking {
    fn start(mut c: Command) -> Asking {
        use std::io::BufRead;
        let mut child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Asking { child, lines, seen: Vec::new() }
    }
    /// Wait (bounded) for a stderr line matching `f`.
    fn wait_line(&mut self, f: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(l) = self.seen.iter().find(|l| f(l)) {
                return l.clone();
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no such line on stderr; got: {:?}", self.seen),
            }
        }
    }
    /// The salloc that epdoctor started (its child).
    fn salloc_pid(&self) -> Option<u32> {
        std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let after = stat.rsplit_once(')')?.1;
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == self.child.id() && stat.contains("(salloc)")).then_some(pid)
        })
    }
    /// Wait (bounded) for the end; the exit code and all of stderr.
    fn end(mut self) -> (Option<i32>, String) {
        let until = Instant::now() + Duration::from_secs(120);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("epdoctor did not end; stderr so far: {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let code = self.child.wait().unwrap().code();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        (code, self.seen.join("\n"))
    }
}

/// The same command without `-q`: the lines about waiting for the allocation are progress.
fn loud(c: Command) -> Command {
    let mut n = Command::new(c.get_program());
    n.args(c.get_args().filter(|a| *a != "-q"));
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => n.env(k, v),
            None => n.env_remove(k),
        };
    }
    n.stdin(Stdio::null());
    n
}

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
    }
}

/// Point 5: the pending reason is shown, the request is given up after --alloc-timeout, the job is
/// cancelled and salloc does not outlive epdoctor; exit 5.
#[test]
fn slurm_a_pending_allocation_is_shown_and_cancelled_after_the_alloc_timeout() {
    if !slurm() {
        return;
    }
    let s = Scratch::new();
    let mut c = loud(s.cmd("slurm"));
    c.args(["--ranks", &too_many_tasks(), "--teardown", "clean", "--alloc-timeout", "4"]);
    let mut a = Asking::start(c);
    let pending = a.wait_line(|l| l.contains("Pending job allocation"));
    let job = pending.rsplit(' ').next().unwrap().to_string();
    let salloc = a.salloc_pid().expect("salloc runs as epdoctor's child");
    a.wait_line(|l| l.contains(&format!("job {job} pending (")));
    let (code, err) = a.end();
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("no allocation after 4 s (--alloc-timeout"), "{err}");
    assert!(err.contains(&format!("scancel {job}: ok")), "{err}");
    assert!(gone(salloc), "salloc {salloc} outlived epdoctor");
    wait_job_gone(&job);
}

/// Point 5: SIGTERM while salloc waits cancels the request (no pending job, no orphan salloc), exit 5.
#[test]
fn slurm_sigterm_while_salloc_waits_cancels_the_request() {
    if !slurm() {
        return;
    }
    let s = Scratch::new();
    let mut c = loud(s.cmd("slurm"));
    c.args(["--ranks", &too_many_tasks(), "--teardown", "clean", "--alloc-timeout", "600"]);
    let mut a = Asking::start(c);
    let pending = a.wait_line(|l| l.contains("Pending job allocation"));
    let job = pending.rsplit(' ').next().unwrap().to_string();
    let salloc = a.salloc_pid().expect("salloc runs as epdoctor's child");
    a.wait_line(|l| l.contains(&format!("job {job} pending (")));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGTERM) };
    let (code, err) = a.end();
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("interrupted by SIGTERM while salloc waited for an allocation"), "{err}");
    assert!(gone(salloc), "salloc {salloc} outlived epdoctor");
    wait_job_gone(&job);
}

/// Point 5: --immediate gives up at once with salloc's reason, exit 5, nothing left pending.
#[test]
fn slurm_immediate_gives_up_at_once() {
    if !slurm() {
        return;
    }
    let s = Scratch::new();
    let mut c = s.cmd("slurm");
    c.args(["--ranks", &too_many_tasks(), "--teardown", "clean", "--immediate", "--alloc-timeout", "600"]);
    let a = Asking::start(c);
    let (code, err) = a.end();
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("salloc did not grant an allocation"), "{err}");
}

fn py_spy() -> bool {
    have("py-spy", "EPDOCTOR_REQUIRE_PYSPY", Command::new("py-spy").arg("--version"))
}

/// Point 1: under Slurm each task's Python and native stack is taken on its node, inside the stack
/// probe's `srun --overlap` step before scancel, and labelled by SLURM_PROCID; srun's own is not.
#[test]
fn slurm_hang_takes_every_tasks_stack_on_its_node_labelled_by_slurm_procid() {
    if !slurm() || !py_spy() {
        return;
    }
    let s = Scratch::new();
    std::fs::write(
        s.dir.path().join("sleephang.py"),
        "import time\n\n\ndef stuck_in_teardown():\n    print('teardown starts', flush=True)\n    time.sleep(600)\n\n\nstuck_in_teardown()\n",
    )
    .unwrap();
    let mut c = s.cmd("slurm");
    c.current_dir(s.dir.path()).env_remove("EPDOCTOR_STACK_TOOLS");
    c.args(["--ntasks-per-node", "2", "--timeout", "8", "--grace", "2", "--", "python3", "sleephang.py"]);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = s.cells();
    let cell = &v["cells"][0];
    assert_eq!(cell["status"], "hang");
    let dir = s.cell_dir(cell);
    let stacks = cell["stacks"].as_array().unwrap();
    let ranks: Vec<&str> = stacks.iter().map(|st| st["rank"].as_str().unwrap()).collect();
    assert_eq!(ranks, ["0", "1"], "the two tasks only, not srun: {stacks:#?}");
    for st in stacks {
        assert_eq!(st["tool"], "py-spy", "{st}");
        assert_eq!(st["node"], host().as_str(), "{st}");
        assert_eq!(st["waits"], "stuck_in_teardown (sleephang.py:6)", "{st}");
        // Python and native frames: py-spy --native read libc's sleep under the Python function.
        let raw = std::fs::read_to_string(dir.join(st["raw"].as_str().unwrap())).unwrap();
        assert!(raw.contains("# py-spy --native (ok)") && raw.contains("clock_nanosleep"), "{raw}");
    }
    // Taken on the node by the probe step (its answer is kept), before the step was cancelled.
    assert!(dir.join("slurm/stacks.0.json").is_file());
    let h = s.harness(cell);
    let took = h.find("stacks: 2 process(es) captured").unwrap_or_else(|| panic!("{h}"));
    let cancel = h.find("scancel --signal=TERM").unwrap_or_else(|| panic!("{h}"));
    assert!(took < cancel, "{h}");
    assert_eq!(cell["stack_groups"][0]["label"], "ranks 0-1");
    assert_eq!(cell["primary"]["rule"], "hang-stack-main-thread");
    let log = std::fs::read_to_string(dir.join("stacks.log")).unwrap();
    assert!(log.starts_with("[epdoctor-stack] rank=0 pid="), "{log}");
    assert!(log.contains("via=py-spy thread=main: stuck_in_teardown (sleephang.py:6)"), "{log}");
    // The hung tasks fill the primary's ranks, and every harness and Slurm line of the cell is known.
    let o = Command::new(bin())
        .args(["explain", "-f", "json"])
        .arg(&dir)
        .env("NO_COLOR", "1")
        .env_remove("EPDOCTOR_RULES")
        .env_remove("EPDOCTOR_FORMAT")
        .output()
        .unwrap();
    let e: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["primary"]["ranks"], serde_json::json!([0, 1]), "{:#}", e["primary"]);
    assert_eq!(e["unexplained"], serde_json::json!([]), "{:#}", e["unexplained"]);
    wait_job_gone(v["launcher"]["slurm"]["job_id"].as_str().unwrap());
}
