//! Properties of the parser and the rule engine (issue 8), on the library entry point the fuzzer
//! uses (`explain::analyze_bytes`), with the built-in rules:
//! - any bytes, in any number of rank files and with any options, give a result (or the error the
//!   CLI gives for the same files) and no panic;
//! - the same input gives the same JSON (and the same text and Markdown);
//! - the order of the rank files does not change the verdict (nor which rules fire);
//! - nor the rank a file's name gives it.
//!
//! The same cases on every run: a fixed seed and 32 cases per property, unless PROPTEST_RNG_SEED
//! and PROPTEST_CASES say otherwise (a long run with new cases: docs/testing.md). A case that
//! fails is kept in properties.proptest-regressions and becomes a named test below.

use std::sync::OnceLock;

use epdoctor::commands::explain::analyze_bytes;
use epdoctor::log::names::ranks_from_names;
use epdoctor::model::version::Version;
use epdoctor::model::Analysis;
use epdoctor::rules::{schema, Engine, Options};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use crate::common;

/// The seed of every run that names none (any fixed number would do).
const SEED: u64 = 0x5eed_0e9d_0c70_0042;
const CASES: u32 = 32;

fn config() -> ProptestConfig {
    // `default()` reads PROPTEST_CASES and PROPTEST_RNG_SEED; without them, fixed values.
    let d = ProptestConfig::default();
    let set = |v: &str| std::env::var_os(v).is_some();
    ProptestConfig {
        cases: if set("PROPTEST_CASES") { d.cases } else { CASES },
        rng_seed: if set("PROPTEST_RNG_SEED") { d.rng_seed } else { RngSeed::Fixed(SEED) },
        ..d
    }
}

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| Engine::new(schema::load_rules(&[]).expect("built-in rules")).expect("engine"))
}

/// Real lines (shared/data/h200-logs, examples/, rule fixtures) and the launcher/worker forms the
/// engine reads, so that generated logs reach rules, phases, versions and rank resolution.
const LINES: &[&str] = &[
    "vm:631:631 [0] NCCL INFO NCCL version 2.22.3+cuda12.5",
    "vm:746:746 [0] NCCL INFO NCCL version 2.28.3+cuda13.0",
    "NCCL version 2.32.3+cuda13.4",
    "vm:631:631 [0] NCCL INFO ncclCommInitRank comm 0x555f0085bb80 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x1f3743ff92bcee6e - Init START",
    "vm:631:631 [0] NCCL INFO ncclCommInitRank comm 0x555f0085bb80 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x1f3743ff92bcee6e - Init COMPLETE",
    "vm:632:632 [0] NCCL INFO ncclCommInitRank comm 0x5635c43dad00 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x1f3743ff92bcee6e - Init COMPLETE",
    "vm:631:637 [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Operation now in progress",
    "vm:631:637 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0",
    "vm:631:637 [0] proxy.cc:1521 NCCL WARN [Proxy Service 0] Failed to execute operation Close from rank 0, retcode 3",
    "vm:631:631 [0] NCCL INFO comm 0x555f0085bb80 rank 0 nranks 2 cudaDev 0 busId 60 - Abort COMPLETE",
    "vm:652:652 [0] NCCL INFO comm 0x562f46fb9d00 rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE",
    "vm:1139:1139 [0] NCCL INFO comm 0x5629245e47a0 rank 0 nRanks 2 cudaDev 0 busId 60 - Abort START",
    "vm:598:614 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer <>",
    "[2026-11-29 14:09:06] vm:1139:1151 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer ",
    "[2026-11-29 14:36:20] vm:801:801 [0] init.cc:808 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60",
    "[2026-11-29 14:35:30] vm:720:720 [0] transport/rma_socket.cc:32 (ncclRmaSocketProxyInit) NCCL WARN RMA/Socket : rma_socket requires GDRCopy; and GDR Copy is not available",
    "[rank0]:[W1129 13:54:38.758212116 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (",
    "[rank1]:[W1129 13:54:38.763055520 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources.",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.28.9",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "RuntimeError: DeepEP error: timeout (dispatch CPU)",
    "Traceback (most recent call last):",
    "torch version 2.5.1",
    "[epdoctor] rank=0 phase=init t=1764426546.100000",
    "[epdoctor] rank=1 phase=work t=1764426546.500000",
    "[epdoctor] rank=1 phase=teardown-start t=1764426547.000000",
    "[epdoctor-harness] rank=1 signal=9 (SIGKILL)",
    "[epdoctor-harness] rank=0 exit=0",
    "[epdoctor-harness] rank=cmd deadline: still running after 2s, sent SIGTERM",
    "[epdoctor-harness] leftover process pid=24748 cmd=sleep 60",
    "host:1:2 [0] some/file.cc:12 NCCL WARN A message no rule knows about 0x1234",
    "WARNING: something unexplained happened",
    "rank0 ok sum=48.0",
    "",
];

/// A rank file: lines from the vocabulary, some behind a launcher's rank prefix.
fn rank_file() -> impl Strategy<Value = String> {
    let line = (0..LINES.len(), 0u8..6).prop_map(|(i, p)| {
        let prefix = match p {
            0 => "[rank0]:",
            1 => "[rank1]:",
            2 => "[default1]:",
            3 => "[1,3]<stdout>:",
            _ => "",
        };
        format!("{prefix}{}\n", LINES[i])
    });
    prop::collection::vec(line, 0..24).prop_map(|v| v.concat())
}

/// Raw bytes: either arbitrary, or a rank file with arbitrary bytes spliced in.
fn hostile_file() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..1024),
        (
            rank_file().prop_map(String::into_bytes),
            prop::collection::vec((any::<usize>(), prop::collection::vec(any::<u8>(), 0..8)), 0..6)
        )
            .prop_map(|(mut f, splices)| {
                for (at, bytes) in splices {
                    let at = if f.is_empty() { 0 } else { at % f.len() };
                    f.splice(at..at, bytes);
                }
                f
            }),
    ]
}

fn options() -> impl Strategy<Value = Options> {
    (prop::option::of(0u64..4096), any::<bool>(), 1usize..8, any::<bool>()).prop_map(|(max, assume, evidence, t)| {
        Options {
            max_bytes: max,
            assume_nccl: assume.then(|| Version::parse("2.22.3").unwrap()),
            evidence,
            templates: t,
            ..Options::default()
        }
    })
}

/// Whether bytes begin as a pickle does (protocol 2 and later): what explain takes for a Flight
/// Recorder dump, and skips with a note when it is not one.
fn pickle_headed(b: &[u8]) -> bool {
    b.first() == Some(&0x80)
}

/// The analysis of `files` as rank0.log, rank1.log, ...; `None` where every file is a pickle but
/// no Flight Recorder dump: then there is nothing to read, the error the CLI gives for the same
/// files (`pickles_that_are_no_dump_are_nothing_to_read_for_the_library_and_the_cli`).
fn try_run(files: &[Vec<u8>], opts: &Options) -> Option<(Analysis, [String; 3])> {
    let names: Vec<String> = (0..files.len()).map(|i| format!("rank{i}.log")).collect();
    let named: Vec<(&str, &[u8])> = names.iter().map(String::as_str).zip(files.iter().map(Vec::as_slice)).collect();
    match analyze_bytes(engine(), &named, opts) {
        Ok(r) => Some(r),
        Err(e) => {
            let e = format!("{e:#}");
            assert!(e.starts_with("nothing to read: ") && files.iter().all(|f| pickle_headed(f)), "{e}");
            None
        }
    }
}

fn run(files: &[Vec<u8>], opts: &Options) -> (Analysis, [String; 3]) {
    try_run(files, opts).expect("text input always opens")
}

/// `files` under the names `names` (the same name travels with its content).
fn run_named(names: &[String], files: &[Vec<u8>], opts: &Options) -> Analysis {
    let named: Vec<(&str, &[u8])> = names.iter().map(String::as_str).zip(files.iter().map(Vec::as_slice)).collect();
    analyze_bytes(engine(), &named, opts).expect("in-memory input always opens").0
}

proptest! {
    #![proptest_config(config())]

    /// Issue 11: for any permutation of the input files (each keeping its name) the verdict, the
    /// primary and every finding (rule, ranks, count, evidence) are identical.
    #[test]
    fn any_permutation_of_the_files_gives_the_same_result(
        (files, order) in prop::collection::vec(rank_file(), 1..6)
            .prop_flat_map(|f| { let n = f.len(); (Just(f), Just((0..n).collect::<Vec<_>>()).prop_shuffle()) }),
        evidence in 1usize..6,
    ) {
        let opts = Options { evidence, ..Options::default() };
        let names: Vec<String> = (0..files.len()).map(|i| format!("r{i}/rank{i}.log")).collect();
        let files: Vec<Vec<u8>> = files.into_iter().map(String::into_bytes).collect();
        let a = run_named(&names, &files, &opts);
        let pn: Vec<String> = order.iter().map(|&i| names[i].clone()).collect();
        let pf: Vec<Vec<u8>> = order.iter().map(|&i| files[i].clone()).collect();
        let b = run_named(&pn, &pf, &opts);
        prop_assert_eq!(a.verdict, b.verdict, "order {:?}", order);
        prop_assert_eq!(&a.primary, &b.primary, "primary differs for order {:?}", order);
        prop_assert_eq!(&a.findings, &b.findings, "findings differ for order {:?}", order);
        prop_assert_eq!(&a.outcome, &b.outcome, "outcome differs for order {:?}", order);
    }

    #[test]
    fn any_bytes_give_a_result_and_no_panic(
        files in prop::collection::vec(hostile_file(), 1..4),
        opts in options(),
    ) {
        let Some((a, [_text, _md, json])) = try_run(&files, &opts) else { return Ok(()) };
        let v: serde_json::Value = serde_json::from_str(&json).expect("the JSON parses");
        prop_assert_eq!(v["verdict"].as_str(), Some(a.verdict.as_str()));
        // Every file is read, but for pickles that are no dump (skipped, with a note).
        let skipped = files.iter().filter(|f| pickle_headed(f)).count();
        prop_assert!(a.inputs.len() <= files.len() && a.inputs.len() + skipped >= files.len(), "{:?}", a.notes);
    }

    #[test]
    fn the_same_input_gives_the_same_output(
        files in prop::collection::vec(hostile_file(), 1..4),
        opts in options(),
    ) {
        let Some((_, first)) = try_run(&files, &opts) else { return Ok(()) };
        let (_, second) = run(&files, &opts);
        prop_assert_eq!(&first[2], &second[2], "JSON differs between two runs");
        prop_assert_eq!(&first[0], &second[0], "text differs between two runs");
        prop_assert_eq!(&first[1], &second[1], "Markdown differs between two runs");
    }

    #[test]
    fn rank_file_order_does_not_change_the_verdict(
        (files, order) in prop::collection::vec(rank_file(), 1..6)
            .prop_flat_map(|f| { let n = f.len(); (Just(f), Just((0..n).collect::<Vec<_>>()).prop_shuffle()) }),
        evidence in 1usize..6,
    ) {
        // No byte budget here: with --max-bytes, which bytes are read does depend on the order.
        let opts = Options { evidence, ..Options::default() };
        let shuffled: Vec<Vec<u8>> = order.iter().map(|&i| files[i].clone().into_bytes()).collect();
        let files: Vec<Vec<u8>> = files.into_iter().map(String::into_bytes).collect();
        let (a, _) = run(&files, &opts);
        let (b, _) = run(&shuffled, &opts);
        prop_assert_eq!(a.verdict, b.verdict, "order {:?}", order);
        let rules = |x: &Analysis| x.findings.iter().map(|f| (f.rule.clone(), f.count, f.benign)).collect::<std::collections::BTreeSet<_>>();
        prop_assert_eq!(rules(&a), rules(&b), "findings differ for order {:?}", order);
        prop_assert_eq!(a.nccl_version, b.nccl_version);
        prop_assert_eq!(a.torch_version, b.torch_version);
    }

    /// A rank read from a file's name does not depend on the other names' order.
    #[test]
    fn any_order_gives_the_same_answer_per_name(
        picks in prop::collection::vec(0usize..POOL.len(), 1..24),
        seed in any::<u64>(),
    ) {
        let names: Vec<&str> = picks.iter().map(|&i| POOL[i]).collect();
        let want = ranks_from_names(&names);
        // A Fisher-Yates shuffle driven by `seed`.
        let mut order: Vec<usize> = (0..names.len()).collect();
        let mut x = seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let shuffled: Vec<&str> = order.iter().map(|&i| names[i]).collect();
        let got = ranks_from_names(&shuffled);
        for (j, &i) in order.iter().enumerate() {
            prop_assert_eq!(&got[j], &want[i], "{}", names[i]);
        }
    }
}

/// Names from which `ranks_from_names` takes ranks in each way it knows, and some it must not.
const POOL: &[&str] = &[
    "out/job-77-0.out",
    "out/job-77-1.out",
    "out/job-77-2.out",
    "out/job-77-9.out",
    "out/job-78-0.out",
    "out/slurm-77.out",
    "out/slurm-78.out",
    "rank3.log",
    "l/attempt_0/1/stderr.log",
    "nccl.h1.31337.log",
    "nccl.h1.31338.log",
    "a.tgz!w-0.log",
    "a.tgz!w-1.log",
    "log-2024-05-01.txt",
    "log-2024-05-02.txt",
    "gpu0.log",
];

/// Found by `any_bytes_give_a_result_and_no_panic` (a57e52d): random bytes that begin with a pickle
/// header (0x80 0x02) are no Flight Recorder dump. The library and the CLI both skip such a file
/// with a note, and with nothing else to read both fail with the same error (exit 2 for the CLI),
/// neither a panic nor an empty `clean`.
#[test]
fn pickles_that_are_no_dump_are_nothing_to_read_for_the_library_and_the_cli() {
    let bytes: &[u8] = b"\x80\x02\x8f\x01garbage that is no pickle of a dump\xff\x00";
    let lib = analyze_bytes(engine(), &[("rank0.log", bytes)], &Options::default()).map(|_| ()).unwrap_err();
    let lib = format!("{lib:#}");
    assert_eq!(lib, "nothing to read: skipped: rank0.log (a Python pickle, not a Flight Recorder dump)");
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("rank0.log");
    std::fs::write(&file, bytes).unwrap();
    let out = common::std_epdoctor().arg("explain").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let cli = String::from_utf8_lossy(&out.stderr);
    assert!(cli.contains(&lib.replace("rank0.log", &file.display().to_string())), "{cli}");
    // Beside a log, the pickle is a note and the log is read.
    let log = b"vm:1:2 [0] NCCL INFO NCCL version 2.22.3+cuda12.5\n".to_vec();
    let (a, _) = run(&[bytes.to_vec(), log], &Options::default());
    assert_eq!(a.inputs.len(), 1);
    assert!(
        a.notes.iter().any(|n| n.contains("rank0.log (a Python pickle, not a Flight Recorder dump)")),
        "{:?}",
        a.notes
    );
}
