use super::*;
use crate::model::Verdict;

/// The engine with its prefilter on from the first byte (small inputs would skip it).
fn engine() -> Engine {
    let mut e = Engine::new(schema::load_rules(&[]).unwrap()).unwrap();
    e.set_big_input(0);
    e
}

#[test]
fn the_builds_tables_cover_every_builtin_pattern() {
    // Else a small log's start-up parses them again (and the tables are stale).
    let e = Engine::new(schema::load_rules(&[]).unwrap()).unwrap();
    let missing: Vec<&String> = e
        .pats
        .iter()
        .zip(&e.slots)
        .filter(|(p, s)| !matches!(s, Slot::Internal(_)) && !crate::log::prefilter::in_build_table(p))
        .map(|(p, _)| p)
        .collect();
    assert!(missing.is_empty(), "not in the build's literal table: {missing:?}");
    let unchecked: Vec<&String> =
        e.rules.iter().flat_map(|r| &r.def.patterns).filter(|p| !schema::checked_at_build(p)).collect();
    assert!(unchecked.is_empty(), "not checked by the build: {unchecked:?}");
    // A pattern the build did not see is still checked when loaded.
    let bad = "[[rule]]\nid = \"x\"\ntitle = \"t\"\ncategory = \"teardown\"\nseverity = \"warning\"\npatterns = ['a|']\nroot_cause = \"r\"\nfix = \"f\"\n";
    assert!(schema::parse_rule_file("u.toml", bad).unwrap_err().to_string().contains("matches the empty line"));
}

fn mem(name: &str, text: String) -> Input {
    Input::Memory { name: name.to_string(), text }
}

/// `analyze` and `analyze_reference` agree, to the byte of the JSON.
fn same(e: &Engine, inputs: &[Input], opts: &Options) {
    same_as(e, &reference(e, inputs, opts), inputs, opts);
}

/// What `analyze_reference` gives (it takes no shortcut, so no prefilter or chunking setting
/// changes it: one reference serves every engine that differs only in those).
fn reference(e: &Engine, inputs: &[Input], opts: &Options) -> String {
    serde_json::to_string_pretty(&e.analyze_reference(inputs, opts).unwrap()).unwrap()
}

/// `analyze` gives `want`, to the byte of the JSON.
fn same_as(e: &Engine, want: &str, inputs: &[Input], opts: &Options) {
    let fast = serde_json::to_string_pretty(&e.analyze(inputs, opts).unwrap()).unwrap();
    assert!(
        fast == want,
        "analyze differs from the reference on {:?}",
        inputs.iter().map(Input::name).collect::<Vec<_>>()
    );
}

fn fixture_inputs() -> Vec<Input> {
    let mut v: Vec<Input> = schema::builtin_fixtures()
        .map(|(p, t)| {
            let text: String = t
                .lines()
                .filter(|l| !l.starts_with("#=") || l.starts_with("#=MATCH=# "))
                .map(|l| format!("{}\n", l.strip_prefix("#=MATCH=# ").unwrap_or(l)))
                .collect();
            mem(p, text)
        })
        .collect();
    v.push(mem(
        "examples/deepep-intranode-teardown.log",
        include_str!("../../../examples/deepep-intranode-teardown.log").into(),
    ));
    v
}

#[test]
fn torch_version_inferred_from_the_destructor_warning_line_and_nccl_from_its_pin() {
    let e = engine();
    let log = "[rank0]:[W1004 15:16:15.503072590 ProcessGroupNCCL.cpp:1479] Warning: WARNING: \
               destroy_process_group() was not called before program exit, which can leak resources.\n";
    let a = e.analyze(&[mem("a.log", log.into())], &Options::default()).unwrap();
    let torch = a.versions.iter().find(|v| v.component == "torch").expect("a torch note");
    assert_eq!((torch.value.as_str(), torch.how.as_str()), ("2.7.1", "inferred"), "{:?}", a.versions);
    assert!(torch.detail.contains("ProcessGroupNCCL.cpp:1479"), "{}", torch.detail);
    let nccl = a.versions.iter().find(|v| v.component == "nccl").expect("the pinned NCCL");
    assert_eq!(nccl.how, "inferred");
    // Another release's line for the same message says that release; a line no release has, none.
    let a = e.analyze(&[mem("b.log", log.replace(":1479]", ":1639]"))], &Options::default()).unwrap();
    assert!(a.versions.iter().any(|v| v.component == "torch" && v.value == "2.15.0"), "{:?}", a.versions);
    let a = e.analyze(&[mem("c.log", log.replace(":1479]", ":7]"))], &Options::default()).unwrap();
    assert!(!a.versions.iter().any(|v| v.component == "torch"), "{:?}", a.versions);
}

#[test]
fn the_level_of_accept_failed_tells_the_release_and_a_stated_release_it_contradicts() {
    let e = engine();
    let info = "host1:2374:2994 [0] NCCL INFO [Service thread] Accept failed Resource temporarily unavailable\n";
    // No version line: INFO is the level of 2.30-2.31 only.
    let a = e.analyze(&[mem("a.log", info.into())], &Options::default()).unwrap();
    let nccl = a.versions.iter().find(|v| v.component == "nccl").expect("an inferred NCCL");
    assert_eq!((nccl.value.as_str(), nccl.how.as_str()), ("2.30.3-2.31.2", "inferred"), "{:?}", a.versions);
    assert!(nccl.detail.contains("the level of INFO `[Service thread] Accept failed`"), "{}", nccl.detail);
    let f = a.findings.iter().find(|f| f.rule == "nccl-accept-failed-demoted").expect("the INFO/ATTN rule");
    let ctx = f.context.as_deref().unwrap_or("");
    assert!(ctx.contains("WARN in 2.18.1-2.29.7, INFO in 2.30.3-2.31.2, ATTN in 2.32.3"), "{ctx}");
    assert!(ctx.contains("NCCL_DEBUG=WARN hides"), "{ctx}");
    assert!(a.notes.is_empty(), "{:?}", a.notes);
    // A version line of a release that prints it at WARN: the line is another library's.
    let stated = format!("host1:2374:2374 [0] NCCL INFO NCCL version 2.22.3+cuda12.4\n{info}");
    let a = e.analyze(&[mem("b.log", stated)], &Options::default()).unwrap();
    assert!(a.notes.iter().any(|n| n.contains("a level NCCL 2.22.3+cuda12.4 does not print it at")), "{:?}", a.notes);
    // The release's own level: nothing to say.
    let ok = format!("host1:2374:2374 [0] NCCL INFO NCCL version 2.30.7+cuda13.0\n{info}");
    let a = e.analyze(&[mem("c.log", ok)], &Options::default()).unwrap();
    assert!(a.notes.is_empty(), "{:?}", a.notes);
    // A stated torch whose wheel pins a release the line rules out: the line wins, and says so.
    let a = e.analyze(&[mem("d.log", format!("torch 2.5.1\n{info}"))], &Options::default()).unwrap();
    assert!(
        a.notes.iter().any(|n| n.contains("pins NCCL 2.21.5, which the log's NCCL lines rule out")),
        "{:?}",
        a.notes
    );
    assert!(a.versions.iter().any(|v| v.component == "nccl" && v.value == "2.30.3-2.31.2"), "{:?}", a.versions);
}

#[test]
fn a_range_gates_a_span_of_releases_only_when_it_holds_for_all_or_none() {
    use super::versions::{span_gate, Gate};
    use crate::model::version::Range;
    let r = Range::parse(">=2.23.4, <2.30.3").unwrap();
    let v = |a, m, p| Version(a, m, p);
    assert_eq!(span_gate(Some(&r), &[v(2, 24, 3), v(2, 28, 9)]), Gate::Open);
    assert_eq!(span_gate(Some(&r), &[v(2, 18, 1), v(2, 22, 3)]), Gate::Shut);
    // Neither end inside, the middle is: the range holds for some of the releases.
    assert_eq!(span_gate(Some(&r), &[v(2, 18, 1), v(2, 26, 2), v(2, 32, 3)]), Gate::Unknown);
    assert_eq!(span_gate(Some(&r), &[]), Gate::Unknown);
    assert_eq!(span_gate(None, &[]), Gate::Open);
}

#[test]
fn prefilter_and_parallel_merge_change_nothing_on_the_fixtures() {
    // The prefilter of a small input (an automaton) and of a large one (the gate), against one
    // reference reading.
    let small = engine();
    let mut large = engine();
    large.set_large_input();
    let all = fixture_inputs();
    assert!(all.len() > 20);
    let opts = Options { evidence: 5, ..Default::default() };
    let check = |inputs: &[Input], opts: &Options| {
        let want = reference(&small, inputs, opts);
        for e in [&small, &large] {
            same_as(e, &want, inputs, opts);
        }
    };
    for one in &all {
        check(std::slice::from_ref(one), &opts);
    }
    // Many inputs at once: read in parallel and merged.
    check(&all, &opts);
    check(&all[..7], &opts);
    // Templates and a byte budget read in turn; still the same.
    check(&all, &Options { templates: true, ..opts.clone() });
    check(&all, &Options { max_bytes: Some(20_000), ..opts.clone() });
}

#[test]
fn the_byte_set_matches_as_the_unicode_set_on_every_fixture_line() {
    let e = engine();
    let ascii = e.ascii_set().expect("the built-in patterns are ASCII-safe");
    let unicode = scan::unicode_set(&e.pats).unwrap();
    let mut lines: Vec<String> = Vec::new();
    for i in fixture_inputs() {
        if let Input::Memory { text, .. } = i {
            lines.extend(text.lines().map(String::from));
        }
    }
    lines.extend(
        ["torch 2.5.1", "PyTorch Version: 2.4.0+cu121", "TORCH==2.1", "Killed process 12 (python)", "a\tb", ""]
            .map(String::from),
    );
    // Non-ASCII lines too (progress bars, quotes, other languages): they go through the byte set.
    lines.extend(
        ["rank 0: 进度 ━━━━ 100% NCCL WARN Cuda failure 'out of memory'", "“Connection reset by peer”"]
            .map(String::from),
    );
    let (mut n, mut non_ascii) = (0, 0);
    for l in &lines {
        non_ascii += usize::from(!l.is_ascii());
        let line = log::strip_prefixes(l).rest;
        let a: Vec<usize> = ascii.matches(line.as_bytes()).into_iter().collect();
        let u: Vec<usize> = unicode.matches(line).into_iter().collect();
        assert_eq!(a, u, "{line}");
        n += usize::from(!u.is_empty());
    }
    assert!(n > 100 && non_ascii > 2, "only {n} matching lines, {non_ascii} non-ASCII");
}

/// Caps of tens, so that a few hundred lines reach every one of them.
fn small_caps() -> Caps {
    Caps { sample: 4, who: 24, unexplained: 20, unrelated: 3, outcome: 5, templates: 10, rank_map: 60, sites: 12 }
}

#[test]
fn parallel_merge_respects_every_cap() {
    // Enough hits, sources, pids, sites, versions and unexplained lines to overflow every cap,
    // spread over inputs so that the caps are reached in the middle of a merge; with NaN and
    // equal timestamps for the earliest-hit logic.
    let mut e = engine();
    let caps = small_caps();
    e.set_caps(caps);
    let mut inputs = Vec::new();
    for f in 0..9u32 {
        let mut t = String::new();
        for i in 0..40u32 {
            let pid = f * 1000 + i;
            let sec = match (f + i) % 7 {
                0 => "nan".to_string(),
                1 => "10".to_string(),
                _ => format!("{:02}", (i * 13 + f * 7) % 60),
            };
            t += &format!("[2026-11-29 12:{sec}:05] h{f}:{pid}:{pid} [0] proxy.cc:{} NCCL WARN [Service thread] Accept failed Resource temporarily unavailable\n", 1458 + i % 90);
            t += &format!("h{f}:{pid}:{pid} [0] NCCL INFO NCCL version 2.{}.3+cuda12.4\n", 10 + (f + i) % 25);
            t += &format!("h{f}:{pid}:{pid} [0] NCCL INFO comm 0x5{f}a rank {i} nRanks {} nNodes 1\n", 1 + i % 5);
            t += &format!("[rank{i}]:[W1129 12:00:{sec}.5 Foo.cpp:{i}] something unexplained {i}\n");
            t += "h:1:1 [0] NCCL INFO AllReduce: opCount 1 comm 0x55 [nranks=8] stream 0x1\n";
        }
        inputs.push(mem(&format!("f{f}.log"), t));
    }
    let opts = Options { evidence: 5, ..Default::default() };
    same(&e, &inputs, &opts);
    same(&e, &inputs[3..5], &opts);
    // The caps were reached (here the one the report shows): what they keep, and the rest counted.
    let a = e.analyze(&inputs, &opts).unwrap();
    assert_eq!(a.unexplained.len(), caps.unexplained, "{:?}", a.notes);
    assert!(a.notes.iter().any(|n| n == "720 unexplained warning/error lines in all; the first 20 are listed"));
}

#[test]
fn rank_map_cap_keeps_the_pairs_seen_first() {
    // 2 x 40 (host, pid) pairs against a cap of 60: the second input's later pairs are dropped,
    // the same ones whether the inputs are read in turn or merged.
    let mut e = engine();
    e.set_caps(Caps { rank_map: 60, ..Caps::default() });
    let file = |f: u32| {
        let mut t = String::new();
        for i in 0..40u32 {
            let pid = f * 100_000 + i;
            t += &format!("h:{pid}:{pid} [0] NCCL INFO comm 0x5a rank {} nRanks 512 nNodes 64\n", i % 512);
        }
        for pid in (0..10).chain([39]).map(|i| f * 100_000 + i).filter(|_| f == 2) {
            t += &format!("h:{pid}:{pid} [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Success\n");
        }
        // Names without a number: a file name must not give the pairs past the cap a rank.
        mem(&format!("pairs-{}.log", ["a", "b", "c"][f as usize]), t)
    };
    let inputs = [file(1), file(2)];
    let opts = Options { evidence: 50, ..Default::default() };
    same(&e, &inputs, &opts);
    let a = e.analyze(&inputs, &opts).unwrap();
    let ranks: Vec<Option<u32>> = a.findings.iter().flat_map(|f| f.evidence.iter().map(|x| x.rank)).collect();
    assert_eq!(ranks.iter().filter(|r| r.is_some()).count(), 10, "{ranks:?}");
    assert_eq!(ranks.len(), 11, "{ranks:?}");
}

#[test]
fn unreadable_input_fails_as_when_read_in_turn() {
    let e = engine();
    let inputs = vec![
        mem("a.log", "x NCCL WARN y\n".into()),
        Input::File("/nonexistent/epdoctor/one.log".into()),
        Input::File("/nonexistent/epdoctor/two.log".into()),
    ];
    let fast = e.analyze(&inputs, &Options::default()).unwrap_err().to_string();
    let slow = e.analyze_reference(&inputs, &Options::default()).unwrap_err().to_string();
    assert_eq!(fast, slow);
    assert!(fast.contains("one.log"));
}

/// `EPDOCTOR_EQUIV=path[:path...] cargo test --release equivalence_on_given_logs -- --ignored`:
/// the same check on logs of your own (the benchmark runs it on what it generates).
#[test]
#[ignore]
fn equivalence_on_given_logs() {
    let paths: Vec<std::path::PathBuf> =
        std::env::var("EPDOCTOR_EQUIV").expect("EPDOCTOR_EQUIV").split(':').map(Into::into).collect();
    let inputs = log::expand(&paths).unwrap().inputs;
    same(&engine(), &inputs, &Options { evidence: 5, ..Default::default() });
}

#[test]
fn catalogued_messages_without_a_rule_get_their_class_and_errors_stay_failures() {
    let e = engine();
    let verdict_of = |log: &str| {
        let a = e.analyze(&[mem("k.log", log.into())], &Options::default()).unwrap();
        let rules: Vec<String> = a.findings.iter().map(|f| f.rule.clone()).collect();
        (a.verdict, rules, a.unexplained.len())
    };
    // accelerate's FutureWarning (its path is no torch.distributed one): a deprecation, benign.
    let dep = "/venv/lib/python3.10/site-packages/accelerate/accelerator.py:432: FutureWarning: Passing the \
               following arguments to `Accelerator` is deprecated and will be removed in version 1.0 of \
               Accelerate: dict_keys(['split_batches']). Please pass an `accelerate.DataLoaderConfiguration` instead:\n";
    assert_eq!(verdict_of(dep), (Verdict::Benign, vec!["known-deprecation".to_string()], 0));
    // An error-level message stays a failure: actionable, never benign or unknown.
    let err = "[2024-03-20 20:31:29,269] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 't.py', \
               '--local_rank=4'] exits with return code = 1\n";
    assert_eq!(verdict_of(err), (Verdict::Actionable, vec!["known-error".to_string()], 0));
    // A line the catalogue does not know stays unexplained.
    let other = "[2024-03-20 20:31:29,269] [ERROR] [launch.py:321:sigkill_handler] something else broke\n";
    assert_eq!(verdict_of(other).0, Verdict::Unknown);
    // A rule of its own wins over the class finding (the launcher's SIGTERM of the workers).
    let ruled = "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4242 closing signal SIGTERM\n";
    assert!(!verdict_of(ruled).1.iter().any(|r| r.starts_with("known-")), "{:?}", verdict_of(ruled));
}

#[test]
fn two_warnings_under_one_nemo_head_keep_their_level() {
    // NeMo writes its head once per message: the same head on the next line (the same second, its
    // one logging site) is another message, not the first continued, and stays a warning.
    let e = engine();
    let w = "[NeMo W 2025-06-13 03:48:23 nemo_logging:405] Could not copy Trainer's 'max_steps' to LR scheduler's \
             'max_steps'. If you are not using an LR scheduler, this warning can safely be ignored.\n";
    let a = e.analyze(&[mem("n.log", format!("{w}{w}"))], &Options::default()).unwrap();
    assert_eq!(a.verdict, Verdict::Benign, "{:?}", a.unexplained);
    let f = a.findings.iter().find(|f| f.rule == "known-config-notice").expect("the known finding");
    assert_eq!(f.count, 2, "both lines are warnings of the catalogued message");
    assert!(f.title.contains("NeMo"), "{}", f.title);
}

#[test]
fn metric_and_progress_lines_and_unrelated_import_warnings_are_no_failures() {
    let e = engine();
    let log = "epoch 1 val error 0.41 val loss 1.03\n\
               Epoch 1:  45%|####5     | 450/1000 [00:10<00:12, 44.1it/s, loss=0.31, error=0.12]\n\
               step 100 | loss=2.31 | grad_norm=0.88 | lr=3e-4 | train_error: 0.2 | errors 0\n\
               /venv/lib/python3.10/site-packages/timm/models/layers/__init__.py:48: FutureWarning: Importing from \
               timm.models.layers is deprecated, please import via timm.layers\n";
    let a = e.analyze(&[mem("m.log", log.into())], &Options::default()).unwrap();
    // The import warning is a warning-level line, so the log is not `clean`; it is no failure.
    assert_eq!(a.verdict, Verdict::Benign, "{:?}", a.unexplained);
    assert!(a.unexplained.is_empty() && a.findings.is_empty());
    assert_eq!(a.unrelated.count, 1);
    // A crash printed onto a bar's line, and an error word that is no metric, stay failures.
    for bad in [
        "Epoch 1:  45%|####5     | 450/1000 [00:10<00:12]RuntimeError: CUDA error: an illegal memory access\n",
        "epoch 3 val loss 0.2: error while saving the checkpoint\n",
    ] {
        let a = e.analyze(&[mem("b.log", bad.into())], &Options::default()).unwrap();
        assert_ne!(a.verdict, Verdict::Clean, "{bad}");
        assert_ne!(a.verdict, Verdict::Benign, "{bad}");
    }
    assert!(scan::metric_or_progress("val error 0.41"));
    assert!(!scan::metric_or_progress("3 failed, 10 passed"));
    assert!(!scan::metric_or_progress("NCCL error 2: unhandled system error"));
}

/// The JSON `e` gives for `input` alone.
fn json_of(e: &Engine, input: &Input) -> String {
    let opts = Options { evidence: 5, ..Default::default() };
    serde_json::to_string_pretty(&e.analyze(std::slice::from_ref(input), &opts).unwrap()).unwrap()
}

/// An engine that reads one file in chunks of `size` bytes on `threads` threads.
fn chunked(size: u64, threads: usize) -> Engine {
    let mut e = engine();
    e.set_chunking(size, threads);
    e
}

#[test]
fn chunked_reading_gives_the_json_of_one_thread_on_every_fixture() {
    let one = chunked(1 << 20, 1);
    let mut many = chunked(1, 3);
    for input in fixture_inputs() {
        let want = json_of(&one, &input);
        let len = size_hint(&input);
        for size in [1, 7, 64, 997, len / 4].into_iter().filter(|&s| s >= 1 && 4 * s <= len) {
            many.set_chunking(size, 3);
            assert!(many.chunked_source(&input, true, None).is_some(), "{} is read in chunks", input.name());
            assert!(json_of(&many, &input) == want, "{} in chunks of {size} bytes", input.name());
        }
    }
}

#[test]
fn chunked_reading_gives_the_json_of_one_thread_when_records_straddle_chunk_ends() {
    // Every fixture in one log: tracebacks, `Last error:` payloads, terminate/what() pairs,
    // version and communicator lines, phases; CRLF ends and a line over the 1 MiB cut.
    let mut text = String::new();
    for (i, input) in fixture_inputs().iter().enumerate() {
        let Input::Memory { text: t, .. } = input else { unreachable!() };
        text.push_str(&if i % 3 == 0 { t.replace('\n', "\r\n") } else { t.clone() });
        if i == 5 {
            text.push_str(&format!("{}\n", "y".repeat(crate::log::input::MAX_LINE + 3)));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.log");
    std::fs::write(&path, &text).unwrap();
    let file = Input::File(path);
    // One engine throughout (its sets and prefilter built once), its chunking set for each reading.
    let mut e = chunked(1 << 20, 1);
    let want = json_of(&e, &file);
    assert!(want.contains("longer than 1 MiB were cut"));
    let opts = Options { evidence: 5, ..Default::default() };
    assert!(want == reference(&e, std::slice::from_ref(&file), &opts), "one thread differs from the reference");
    for (size, threads) in [(61, 2), (256, 3), (4099, 2), (1 << 16, 4), (1 << 18, 2)] {
        e.set_chunking(size, threads);
        assert!(e.chunked_source(&file, true, None).is_some());
        assert!(json_of(&e, &file) == want, "chunks of {size} bytes on {threads} threads");
    }
    // A compressed file is left to the streaming reader.
    let gz = dir.path().join("all.log.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    e.set_chunking(61, 2);
    assert!(e.chunked_source(&Input::File(gz), true, None).is_none());
}

/// A process left behind by a run that succeeded is actionable, told beside the outcome; the
/// run's harmless teardown warning stays noise (it is no symptom of the leftover). Before
/// `left_behind`, the warning was turned into "a consequence of" the leftover.
#[test]
fn what_a_run_left_behind_causes_none_of_its_lines() {
    let e = engine();
    let fixture = schema::builtin_fixtures()
        .find(|(p, _)| p.ends_with("harness-leftover-beside-noise.log"))
        .expect("the fixture")
        .1;
    let inputs: Vec<Input> =
        crate::rules::fixtures::parse("f", fixture).unwrap().files.into_iter().map(|(n, t)| mem(&n, t)).collect();
    let a = e.analyze(&inputs, &Options::default()).unwrap();
    assert_eq!(a.verdict, Verdict::Actionable);
    assert_eq!(a.primary.as_ref().map(|p| p.rule.as_str()), Some("harness-leftover"));
    let noise = a.findings.iter().find(|f| f.rule == "torch-no-destroy-process-group").expect("fires");
    assert!(noise.benign && noise.context.is_none(), "{noise:?}");
    assert!(a.reason.starts_with("the run succeeded") && a.reason.contains("left something behind"), "{}", a.reason);
}
