//! The verdict step on real fragments: benign needs proof, teardown noise on a run not seen to end
//! is `unknown`, the reason is one line decided with the verdict, ranks come from the lines before
//! the file names, and the default text report is short.

use std::path::Path;

use crate::common::epdoctor;

fn explain(args: &[&str]) -> (serde_json::Value, i32) {
    let out = epdoctor().arg("explain").args(args).args(["--format", "json"]).output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (v, out.status.code().unwrap())
}

fn text(args: &[&str]) -> String {
    let out = epdoctor().arg("explain").args(args).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// DeepEP #41's issue body: the NCCL 2.22.3 abort pair and nothing about how the run ended.
const DEEPEP_41: &str = "examples/deepep-intranode-teardown.log";
/// The same warnings from a 2-rank run on an H200 (NCCL 2.22.3, abort teardown) whose ranks
/// printed their checks and exited 0 (docs/results/2026-12-02-h200-nccl-bisect/).
const H200_FINISHED: &str = "examples/h200-nccl-2.22.3-abort-teardown.log";

#[test]
fn teardown_noise_without_an_outcome_is_unknown() {
    let (v, code) = explain(&[DEEPEP_41]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("unknown", 3));
    assert_eq!(v["outcome"]["status"], "unknown");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.contains("looks like teardown noise") && reason.contains("exit status"), "{reason}");
    assert_eq!(v["primary"]["rule"], "nccl-abort-pair", "the noise is still named");
}

#[test]
fn the_same_noise_after_a_run_seen_to_succeed_is_benign() {
    let (v, code) = explain(&[H200_FINISHED]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0));
    assert_eq!(v["outcome"]["status"], "succeeded");
    assert!(v["outcome"]["success_markers"].as_u64().unwrap() >= 2);
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("the run succeeded (2 success markers)"), "{reason}");
    assert!(reason.contains("known noise"), "{reason}");
}

#[test]
fn the_same_noise_beside_a_failure_marker_is_a_symptom() {
    // The H200 run's lines with one rank's exit changed to a failure marker of the same form.
    let log = std::fs::read_to_string(H200_FINISHED).unwrap().replace("rank=1 exit=0", "rank=1 exit=1");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("run.log");
    std::fs::write(&p, log).unwrap();
    let (v, code) = explain(&[p.to_str().unwrap()]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("actionable", 1));
    assert_eq!(v["outcome"]["status"], "failed");
    let pair = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "nccl-abort-pair").unwrap();
    assert_eq!(pair["benign"], false, "{pair}");
}

#[test]
fn harmless_by_nature_is_benign_without_an_outcome() {
    // tritonbench PR #1067: the one line the PR silences, no outcome at all.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("log.txt");
    std::fs::write(&p, "Warning: must call destroy_process_group() before process exit\n").unwrap();
    let (v, code) = explain(&[p.to_str().unwrap()]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0));
    assert!(v["reason"].as_str().unwrap().contains("harmless by nature"), "{}", v["reason"]);
}

#[test]
fn every_verdict_has_a_one_line_reason() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.log");
    std::fs::write(&clean, "vm:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda13.0\nall tests passed\n").unwrap();
    let (v, _) = explain(&[clean.to_str().unwrap()]);
    assert_eq!(v["reason"], "no warning or error in 2 lines of 1 input");
    // nccl-tests #180: UCX's connect error is the cause, named with its place.
    let (v, _) = explain(&["rules/fixtures/ucx/nccl-tests-180-ucx-connect-refused.log"]);
    let r = v["reason"].as_str().unwrap();
    assert!(r.starts_with("`ucx-error` (") && r.contains("is the cause"), "{r}");
    assert!(!r.contains('\n'), "one line: {r}");
}

#[test]
fn ranks_come_from_the_lines_before_the_folder_name() {
    // A torchrun --log-dir tree names the local rank (2); the file's lines say global rank 6.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("attempt_0/2/stderr.log");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    // Lines of the form torch prints (`[rankN]:` prefix), and an unprefixed continuation.
    std::fs::write(
        &f,
        "[rank6]:[W1003 20:49:10.123654124 ProcessGroupNCCL.cpp:4715] [PG ID 0 PG GUID 0 Rank 6]  using GPU 2 \
         as device used by this process is currently unknown. This can potentially cause a hang if this rank \
         to GPU mapping is incorrect.\n\
         torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.11 GiB\n",
    )
    .unwrap();
    let (v, _) = explain(&[dir.path().to_str().unwrap()]);
    let oom = v["findings"].as_array().unwrap().iter().find(|f| f["rule"].as_str().unwrap().contains("oom")).unwrap();
    assert_eq!(oom["ranks"], serde_json::json!([6]), "{oom}");
}

#[test]
fn ranks_named_in_the_text_fill_ranks() {
    // The Flight Recorder reading of a real H200 dump (rules/fixtures/flight-recorder): rank 1 never
    // joined. The fixture's directives dropped, its `#=MATCH=#` line kept as the log line it marks.
    let fixture = std::fs::read_to_string("rules/fixtures/flight-recorder/h200-torch-2.28.9-skip.log").unwrap();
    let log: String = fixture
        .lines()
        .filter_map(|l| match l.strip_prefix("#=MATCH=# ") {
            Some(m) => Some(m),
            None => (!l.starts_with("#=")).then_some(l),
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fr.log");
    std::fs::write(&p, log).unwrap();
    let (v, _) = explain(&[p.to_str().unwrap()]);
    let p = &v["primary"];
    assert!(p["ranks"].as_array().unwrap().contains(&serde_json::json!(1)), "{p}");
}

#[test]
fn the_default_report_is_short_and_v_prints_everything() {
    for log in [H200_FINISHED, DEEPEP_41, "rules/fixtures/ucx/nccl-tests-180-ucx-connect-refused.log"] {
        let short = text(&[log]);
        let wide = short.lines().filter(|l| l.chars().count() > 100).collect::<Vec<_>>();
        assert!(wide.is_empty(), "{log}: lines over 100 columns: {wide:?}");
        assert!(short.starts_with("verdict: "), "{short}");
        assert!(short.contains("\noutcome: "), "{short}");
        let long = text(&[log, "-v"]);
        assert!(long.len() > short.len(), "{log}: -v adds evidence, refs and the other findings");
    }
    // Every finding's root cause appears under -v; only the primary's by default.
    let long = text(&[H200_FINISHED, "-v"]);
    let short = text(&[H200_FINISHED]);
    let other = "The text after \"Accept failed\" is strerror(errno)";
    assert!(long.contains(other) && !short.contains(other));
    assert!(Path::new(H200_FINISHED).exists());
}

/// The short report's findings table broke long file names mid-word in its "first seen" column
/// (issue 28): ids and file names stay whole in 100 columns, the file named once above the table,
/// or each once below it under a key.
#[test]
fn the_findings_table_keeps_ids_and_file_names_whole() {
    let one = "rules/fixtures/proxy-catalog/synthetic-2.28.9-internal-check-after-peer-gone.log";
    let dir = tempfile::tempdir().unwrap();
    let names = ["a-long-rank-file-name-of-the-job-on-node-one-rank0.log", "another-long-file-name-for-rank1.log"];
    std::fs::copy(one, dir.path().join(names[0])).unwrap();
    std::fs::copy("rules/fixtures/teardown/bootcamp-getfd-failed.log", dir.path().join(names[1])).unwrap();
    let both = dir.path().to_str().unwrap();
    for (args, files) in [(vec![one], vec![one.rsplit('/').next().unwrap()]), (vec![both], names.to_vec())] {
        let short = text(&args);
        let (v, _) = explain(&args);
        let table: Vec<&str> = short.lines().skip_while(|l| !l.starts_with("findings")).collect();
        let wide: Vec<&&str> = table.iter().filter(|l| l.chars().count() > 100).collect();
        assert!(wide.is_empty(), "lines over 100 columns: {wide:?}\n{short}");
        for f in v["findings"].as_array().unwrap() {
            let id = f["rule"].as_str().unwrap();
            assert!(table.iter().any(|l| l.contains(&format!(" {id} "))), "{id} whole:\n{short}");
        }
        for f in files {
            assert!(table.iter().any(|l| l.contains(f)), "{f} whole:\n{short}");
        }
    }
    // A name that fits stays in its cell.
    let short = text(&["rules/fixtures/teardown/bootcamp-getfd-failed.log"]);
    assert!(short.contains("bootcamp-getfd-failed.log:13 "), "{short}");
}

#[test]
fn a_hang_log_names_the_rank_that_fell_behind() {
    // LLaMA-Factory #8261 (dev case 078): rank 0 last enqueued work 2855, rank 2 reached 2856.
    let dir = std::fs::read_dir("tests/accuracy/dev")
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("078-"))
        .unwrap();
    let (v, _) = explain(&[dir.join("log.txt").to_str().unwrap()]);
    let ctx = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["context"].as_str())
        .find(|c| c.contains("last enqueued work"))
        .unwrap_or_else(|| panic!("no laggard named: {v}"));
    assert!(ctx.contains("rank 0 last enqueued work 2855") && ctx.contains("reached 2856"), "{ctx}");
}

#[test]
fn known_info_chatter_leaves_a_log_clean() {
    // nccl-tests#182: an INFO run whose only known lines are NCCL's `Destroy COMPLETE` chatter.
    let (v, code) = explain(&["rules/fixtures/teardown/nccl-tests-182-destroy-complete.log"]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("clean", 0));
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("no warning or error in") && reason.contains("known INFO chatter"), "{reason}");
    assert_eq!(v["primary"]["rule"], "nccl-teardown-info", "the chatter is still named");
}

#[test]
fn warnings_of_unrelated_modules_alone_are_benign_not_clean() {
    // vLLM logger heads: a model module's WARNING is a warning-level line, just not this tool's subject.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("serve.log");
    std::fs::write(
        &p,
        "INFO 03-01 10:00:00 [api_server.py:912] vLLM API server version 0.7.3\n\
         WARNING 03-01 10:00:01 [config.py:2448] Casting torch.bfloat16 to torch.float16.\n\
         INFO 03-01 10:00:09 [launcher.py:29] Available routes are:\n",
    )
    .unwrap();
    let (v, code) = explain(&[p.to_str().unwrap()]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0), "{v}");
    assert_eq!(v["unrelated"]["count"], 1);
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.contains("unrelated to distributed work"), "{reason}");
}

/// Open MPI 4.x's openib start-up notices (open-mpi/ompi#10693's issue body), a run that worked.
const OPENIB_NOTICES: &str = "\
--------------------------------------------------------------------------
By default, for Open MPI 4.0 and later, infiniband ports on a device
are not used by default.  The intent is to use UCX for these devices.
You can override this policy by setting the btl_openib_allow_ib MCA parameter
to true.

  Local host:              lxbk1039
  Local adapter:           mlx5_0
  Local port:              1

--------------------------------------------------------------------------
--------------------------------------------------------------------------
WARNING: There was an error initializing an OpenFabrics device.

  Local host:   lxbk1039
  Local device: mlx5_0
--------------------------------------------------------------------------
[lxbk1039:106838] 11 more processes have sent help message help-mpi-btl-openib.txt / ib port not selected
[lxbk1039:106838] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages
";

fn explain_text(name: &str, log: &str) -> (serde_json::Value, i32) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, log).unwrap();
    explain(&[p.to_str().unwrap()])
}

#[test]
fn open_mpi_start_up_notices_are_benign_by_nature() {
    let (v, code) = explain_text("mpi.log", OPENIB_NOTICES);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0), "{v}");
    assert_eq!(v["primary"]["rule"], "openmpi-openib-device-unused");
    assert_eq!(v["outcome"]["status"], "unknown");
    assert!(v["reason"].as_str().unwrap().contains("harmless by nature"), "{}", v["reason"]);
}

#[test]
fn open_mpi_notices_do_not_make_a_failed_run_benign() {
    // The same notices, then mpirun's banner for a rank killed by a signal.
    let log = format!(
        "{OPENIB_NOTICES}mpirun noticed that process rank 1 with PID 4242 on node lxbk1039 exited on signal 11 \
         (Segmentation fault).\n"
    );
    let (v, code) = explain_text("mpi.log", &log);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("actionable", 1), "{v}");
    assert_eq!(v["outcome"]["status"], "failed");
    assert_eq!(v["primary"]["rule"], "launcher-mpi-process-failed");
}

#[test]
fn an_aggregated_notice_of_another_help_file_is_not_read_as_harmless() {
    // The aggregation line names the help topic; only the start-up notices' topics are benign.
    let log = "[n1:77] 3 more processes have sent help message help-mpi-errors.txt / mpi_errors_are_fatal\n\
               [n1:77] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages\n";
    let (v, _) = explain_text("mpi.log", log);
    assert_ne!(v["verdict"], "benign", "{v}");
    assert_ne!(v["verdict"], "clean", "{v}");
}

#[test]
fn a_glibc_heap_abort_is_a_failure_of_the_run() {
    // dev 372's ending: a rank's heartbeat monitor loses the store, then glibc aborts a process.
    let log = "[rank2]:[W724 19:26:07.252310287 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0(default_pg) Rank 2] \
               Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut down too early), \
               with error: failed to recv, got 0 bytes\n\
               malloc_consolidate(): unaligned fastbin chunk detected\n";
    let (v, code) = explain_text("train.log", log);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("actionable", 1), "{v}");
    assert_eq!(v["outcome"]["status"], "failed");
    assert_eq!(v["primary"]["rule"], "launcher-glibc-heap-corruption");
    // glibc before 2.26 framed the same check with the program's name and the pointer.
    let (v, _) =
        explain_text("old.log", "*** Error in `python': double free or corruption (!prev): 0x000055d1c8a3b010 ***\n");
    assert_eq!(v["outcome"]["status"], "failed", "{v}");
    assert_eq!(v["primary"]["rule"], "launcher-glibc-heap-corruption");
}

/// A fixture's log as `rules test` feeds it to the engine (directives removed, the `#=MATCH=#`
/// line kept without its prefix), written to `dir`.
fn fixture_log(dir: &Path, fixture: &str) -> String {
    let text = std::fs::read_to_string(fixture).unwrap();
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("#=") || l.starts_with("#=MATCH=# "))
        .map(|l| format!("{}\n", l.strip_prefix("#=MATCH=# ").unwrap_or(l)))
        .collect();
    let p = dir.join(Path::new(fixture).file_name().unwrap());
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

/// explain's JSON on a known-sites fixture's log, held to a benign verdict (exit 0) whose primary
/// is the catalogue class `rule`.
fn benign_by_catalogue(fixture: &str, rule: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let log = fixture_log(dir.path(), &format!("rules/fixtures/known-sites/{fixture}"));
    let (v, code) = explain(&[&log]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0), "{v}");
    assert_eq!(v["primary"]["rule"], rule, "{v}");
    v
}

#[test]
fn a_torchtitan_warning_the_catalogue_holds_is_benign_not_unknown() {
    // torchtitan#4628: `[titan]` heads with per-module logger names; the one WARNING is
    // torchtitan/distributed/utils.py's job-config override notice (torchtitan 0.1.0-0.3.0).
    let v = benign_by_catalogue("torchtitan-4628-env-overridden-notice.log", "known-config-notice");
    let title = v["primary"]["title"].as_str().unwrap();
    assert!(title.contains("torchtitan configuration notice"), "{title}");
    let first = v["primary"]["evidence"][0]["text"].as_str().unwrap();
    assert!(first.contains("will be overridden to 3 based on job config"), "{first}");
    assert_eq!(v["unexplained"].as_array().map_or(0, Vec::len), 0, "{v}");
}

#[test]
fn a_vllm_warning_the_catalogue_holds_is_benign_not_unknown() {
    // vllm#13719: the multiprocessing executor's torch-thread notice under vLLM's logger head
    // (vLLM 0.5.5-0.27.1, rules/catalog/vllm.tsv) is a known performance hint.
    let v = benign_by_catalogue("vllm-13719-torch-parallelism-notice.log", "known-performance-hint");
    assert!(v["primary"]["title"].as_str().unwrap().contains("vLLM performance hint"), "{v}");
    assert!(v["primary"]["context"].as_str().unwrap().contains("multiproc_worker_utils.py"), "{v}");
}

#[test]
fn a_vllm_error_line_the_catalogue_holds_is_never_benign() {
    // vllm#56180: vllm/v1/executor/multiproc_executor.py's logger.error when a worker dies (class
    // error); and vllm#13719's notice with its level word changed to ERROR (a constructed variant: the
    // catalogue files that text as a notice, the line's own level must win): both are known errors.
    for line in [
        "(EngineCore pid=3677484) ERROR 09-10 09:37:41 [multiproc_executor.py:314] Worker proc VllmWorker-0 \
         died unexpectedly (exit code: None), shutting down executor.",
        "ERROR 02-22 22:08:56 multiproc_worker_utils.py:300] Reducing Torch parallelism from 16 threads to 1 to avoid \
         unnecessary CPU contention. Set OMP_NUM_THREADS in the external environment to tune this value as needed.",
    ] {
        let (v, _) = explain_text("vllm.log", &format!("{line}\n"));
        assert_ne!(v["verdict"], "benign", "{line}: {v}");
        assert_ne!(v["verdict"], "clean", "{line}: {v}");
        let known: Vec<&serde_json::Value> =
            v["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == "known-error").collect();
        if let Some(f) = known.first() {
            assert_eq!(f["benign"], false, "{f}");
            assert!(f["title"].as_str().unwrap().contains("vLLM error"), "{f}");
        }
        assert!(
            v["findings"].as_array().unwrap().iter().all(|f| f["benign"] == false),
            "no finding of an ERROR line is benign: {v}"
        );
    }
}

#[test]
fn a_nemo_headed_warning_the_catalogue_holds_is_benign_not_unknown() {
    // NeMo Speech#13913: `[NeMo W ...]` is read as a warning-level head; MegatronStrategy's
    // max_steps notice (NeMo 2.1.0-2.7.3) is known, the captured pydub warning unrelated.
    let dir = tempfile::tempdir().unwrap();
    let log = fixture_log(dir.path(), "rules/fixtures/known-sites/nemo-13913-max-steps-lr-scheduler-notice.log");
    let (v, code) = explain(&[&log]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0), "{v}");
    assert_eq!(v["primary"]["rule"], "known-config-notice", "{v}");
    let title = v["primary"]["title"].as_str().unwrap();
    assert!(title.contains("NeMo configuration notice"), "{title}");
    assert!(v["primary"]["context"].as_str().unwrap().contains("megatron_strategy.py"), "{v}");
    assert_eq!(v["unexplained"].as_array().map_or(0, Vec::len), 0, "{v}");
    assert_eq!(v["unrelated"]["count"], 1, "the pydub RuntimeWarning under NeMo's head: {v}");
}

#[test]
fn torch_1x_ddp_hint_is_a_known_performance_hint() {
    // mlpc-ucsd/LETR#4 (2021-08-31): torch 1.8's wording of the DDP reducer's hint (2.x adds "in the
    // forward pass"), behind 1.x's c10 prefix with no date and its `(function operator())` tail.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.log");
    std::fs::write(
        &p,
        "[W reducer.cpp:1050] Warning: find_unused_parameters=True was specified in DDP constructor, but did \
         not find any unused parameters. This flag results in an extra traversal of the autograd graph every \
         iteration, which can adversely affect performance. If your model indeed never has any unused \
         parameters, consider turning this flag off. Note that this warning may be a false positive your \
         model has flow control causing later iterations to have unused parameters. (function operator())\n",
    )
    .unwrap();
    let (v, code) = explain(&[p.to_str().unwrap()]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0), "{v}");
    assert_eq!(v["primary"]["rule"], "known-performance-hint", "{v}");
    // The catalogue has the hint at reducer.cpp:1050 in 1.8.1 only: the torch release follows.
    assert_eq!(v["torch_version"], "1.8.1", "{v}");
}

/// Writes `lines` to a log file in a fresh folder and explains it.
fn explain_lines(lines: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("run.log");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    explain(&[p.to_str().unwrap()]).0
}

/// hiyouga/LlamaFactory#8045: the worker node cannot reach the master; NCCL's INFO retries (the WARN
/// that follows the last one was not posted).
const RETRIES_8045: [&str; 3] = [
    "zgiot:1183664:1184669 [0] NCCL INFO socketPollConnect: connect returned No route to host, retrying (32/34) after sleep for 3200 msec",
    "zgiot:1183664:1184669 [0] NCCL INFO socketPollConnect: connect returned No route to host, retrying (33/34) after sleep for 3300 msec",
    "zgiot:1183664:1184669 [0] NCCL INFO socketPollConnect: connect returned No route to host, retrying (34/34) after sleep for 3400 msec",
];

#[test]
fn a_retry_loop_that_reaches_its_last_attempt_is_a_failure_whatever_its_level() {
    let v = explain_lines(&RETRIES_8045);
    assert_eq!(v["verdict"], "actionable", "{v}");
    let p = &v["primary"];
    assert_eq!(p["rule"], "nccl-socket-connect-retrying");
    assert!(p["evidence"][0]["text"].as_str().unwrap().contains("retrying (34/34)"), "{p}");
    assert!(p["context"].as_str().unwrap().contains("the retries ran out"), "{p}");
    // Before the last attempt the same INFO retries decide nothing: INFO chatter, clean.
    let v = explain_lines(&RETRIES_8045[..2]);
    assert_eq!(v["verdict"], "clean", "{v}");
}

/// fdbtrs/IDiff-Face#14: rank 0 waits in the store-based barrier for 7 of 8 workers; nothing follows.
#[test]
fn a_store_barrier_still_waiting_where_the_log_ends_is_actionable() {
    let wait = "[2025-03-11 05:21:04,421][torch.distributed.distributed_c10d][INFO] - Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 (world_size=8, worker_count=1, timeout=0:30:00)";
    let v = explain_lines(&[
        "[2025-03-11 05:20:54,412][torch.distributed.distributed_c10d][INFO] - Added key: store_based_barrier_key:1 to store for rank: 0",
        wait,
        &wait.replace("05:21:04,421", "05:21:14,425"),
    ]);
    assert_eq!(v["verdict"], "actionable", "{v}");
    assert_eq!(v["primary"]["rule"], "torch-store-barrier-waiting");
    let ctx = v["primary"]["context"].as_str().unwrap();
    assert!(ctx.contains("never reached init_process_group"), "{ctx}");
}

/// uccl-project/uccl#684: UCCL-EP's own error line, which no rule reads, then torchrun stops the
/// other workers: the error is the cause, not the SIGTERM cascade.
#[test]
fn an_unexplained_error_before_a_launchers_reaction_is_the_primary() {
    let v = explain_lines(&[
        "[tuning] SMs 24, NVL chunk 40, RDMA chunk 32, transmit: 1911.00 us, notify: 88.27 us, BW: 31.58 GB/s (RDMA), 103.29 GB/s (NVL)",
        "Error: duplicate seq 4 arrival",
        "W0124 01:02:58.545000 1 torch/distributed/elastic/multiprocessing/api.py:908] Sending process 71 closing signal SIGTERM",
        "W0124 01:02:58.546000 1 torch/distributed/elastic/multiprocessing/api.py:908] Sending process 73 closing signal SIGTERM",
    ]);
    assert_eq!(v["verdict"], "actionable", "{v}");
    let p = &v["primary"];
    assert_eq!(p["rule"], "unexplained-cause");
    assert_eq!(p["evidence"][0]["text"], "Error: duplicate seq 4 arrival");
    assert!(v["unexplained"].as_array().unwrap().is_empty(), "the line is the finding's now: {v}");
    assert!(v["findings"].as_array().unwrap().iter().any(|f| f["rule"] == "launcher-sigterm-cascade"));
}

/// Issue 38, point 2, as a property over every rule fixture and every dev case: a log holding a
/// line that its logger head or its own words rate a warning or worse is never `clean`.
#[test]
fn no_log_with_a_warning_level_line_is_clean() {
    use epdoctor::log::{level_of, strip_prefixes, Input, Level};
    let engine = epdoctor::rules::engine(&epdoctor::rules::RuleSource::builtin()).unwrap();
    let warns = |text: &str| {
        text.lines().any(|l| {
            let p = strip_prefixes(l);
            p.level.is_some_and(|v| v >= Level::Warn) || level_of(p.rest) >= Level::Warn
        })
    };
    let mut logs: Vec<(String, Vec<Input>, bool)> = Vec::new();
    for (name, text) in epdoctor::rules::schema::builtin_fixtures() {
        // The fixture's log: its `#=MATCH=# ` lines with the marker off, no other header line.
        let log: String = text
            .lines()
            .filter(|l| !l.starts_with("#=") || l.starts_with("#=MATCH=# "))
            .map(|l| format!("{}\n", l.strip_prefix("#=MATCH=# ").unwrap_or(l)))
            .collect();
        let w = warns(&log);
        logs.push((name.to_string(), vec![Input::Memory { name: name.to_string(), text: log }], w));
    }
    let dev = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/accuracy/dev");
    let mut cases: Vec<_> = std::fs::read_dir(&dev).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    for case in cases {
        let mut files: Vec<_> = std::fs::read_dir(&case)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().is_some_and(|n| n != "case.toml"))
            .collect();
        files.sort();
        let w = files.iter().any(|f| warns(&String::from_utf8_lossy(&std::fs::read(f).unwrap())));
        logs.push((case.display().to_string(), files.into_iter().map(Input::File).collect(), w));
    }
    let (mut with_warnings, mut wrong) = (0, Vec::new());
    for (name, inputs, w) in &logs {
        if !w {
            continue;
        }
        with_warnings += 1;
        let a = engine.analyze(inputs, &Default::default()).unwrap();
        if a.verdict == epdoctor::model::Verdict::Clean {
            wrong.push(name.clone());
        }
    }
    assert!(with_warnings > 500, "only {with_warnings} of {} logs hold a warning-level line", logs.len());
    assert!(wrong.is_empty(), "`clean` though they hold a warning-level line: {wrong:#?}");
}
