//! `epdoctor explain` end to end: the binary on fixture logs, every output format, bad inputs.

use std::io::Write;
use std::path::PathBuf;

use crate::common::cmd::contains;
use crate::common::epdoctor;

fn shared(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/h200-logs").join(name)
}

fn json_of(args: &[&str]) -> (serde_json::Value, i32) {
    let out = epdoctor().arg("explain").args(args).args(["--format", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (v, out.status.code().unwrap())
}

#[test]
fn abort_noise_of_a_finished_run_is_benign() {
    let (v, code) = json_of(&["examples/h200-nccl-2.22.3-abort-teardown.log"]);
    assert_eq!(code, 0);
    assert_eq!(v["verdict"], "benign");
    assert_eq!(v["primary"]["rule"], "nccl-abort-pair");
    assert_eq!(v["nccl_version"], "2.22.3");
    assert_eq!(v["schema_version"], 1);
    // The text names the abort path of old NCCL and the fix.
    epdoctor()
        .args(["explain", "examples/h200-nccl-2.22.3-abort-teardown.log"])
        .assert()
        .code(0)
        .stdout(contains("ncclCommAbort"))
        .stdout(contains("2.23.4"))
        .stdout(contains("destroy_process_group"));
}

#[test]
fn deepep_41_version_is_inferred_from_its_warn_sites() {
    let (v, code) = json_of(&["examples/deepep-intranode-teardown.log"]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("unknown", 3), "no outcome in the paste");
    assert_eq!(v["primary"]["rule"], "nccl-abort-pair");
    assert_eq!(v["nccl_version"], "2.22.3", "inferred from proxy.cc line numbers");
}

#[test]
fn kill_inflight_on_2_28_is_actionable_with_the_eof_line_as_primary() {
    let p = shared("nccl-2.28.3-two-ranks-kill-inflight-INFO.txt");
    if !p.exists() {
        eprintln!("skipping: {} not present", p.display());
        return;
    }
    let (v, code) = json_of(&[p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(v["verdict"], "actionable");
    let first = v["primary"]["evidence"][0]["text"].as_str().unwrap();
    assert!(first.contains("socketProgress: Connection closed by remote peer"), "{first}");
    assert_eq!(v["nccl_version"], "2.28.3");
}

#[test]
fn json_contract_fields() {
    let (v, _) = json_of(&["examples/h200-nccl-2.22.3-abort-teardown.log"]);
    for k in [
        "schema_version",
        "tool_version",
        "verdict",
        "nccl_version",
        "torch_version",
        "primary",
        "findings",
        "unexplained",
        "outcome",
        "reason",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert!(!v["reason"].as_str().unwrap().is_empty(), "the verdict's reason is always said");
    for k in ["status", "success", "failure", "success_markers", "failure_markers"] {
        assert!(v["outcome"].get(k).is_some(), "outcome misses {k}");
    }
    let f = &v["findings"][0];
    for k in
        ["rule", "title", "category", "severity", "benign", "ranks", "count", "evidence", "root_cause", "fix", "refs"]
    {
        assert!(f.get(k).is_some(), "finding misses {k}");
    }
    let e = &f["evidence"][0];
    for k in ["source", "line", "rank", "text"] {
        assert!(e.get(k).is_some(), "evidence misses {k}");
    }
}

#[test]
fn clean_log_is_clean_exit_0() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(f, "vm:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda13.0\nall tests passed").unwrap();
    let (v, code) = json_of(&[f.path().to_str().unwrap()]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("clean", 0));
    assert!(v["primary"].is_null());
}

#[test]
fn unexplained_warning_is_unknown_exit_3() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(f, "host:1:2 [0] some/file.cc:12 NCCL WARN A message no rule knows about 0x1234").unwrap();
    let (v, code) = json_of(&[f.path().to_str().unwrap(), "--unexplained"]);
    assert_eq!((v["verdict"].as_str().unwrap(), code), ("unknown", 3));
    assert_eq!(v["unexplained"][0]["line"], 1);
    let t = v["unexplained_templates"][0]["template"].as_str().unwrap();
    assert!(t.contains("<host>") && t.contains("0x<hex>"), "{t}");
}

/// `--unexplained` keeps each line's own severity letter in its template (an `[F` line was shown
/// as `[W`), and says nothing, not an empty heading, when no line is unexplained (issue 43 point 6).
#[test]
fn unexplained_templates_keep_the_level_and_are_silent_when_empty() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(f, "[rank0]:[F1129 13:54:38.758212116 ProcessGroupNCCL.cpp:1575] something odd happened here").unwrap();
    let (v, _) = json_of(&[f.path().to_str().unwrap(), "--unexplained"]);
    let t = v["unexplained_templates"][0]["template"].as_str().unwrap();
    assert!(t.starts_with("[F<time> "), "{t}");
    let mut clean = tempfile::NamedTempFile::new().unwrap();
    writeln!(clean, "hello").unwrap();
    let out = epdoctor().args(["explain", "--unexplained", clean.path().to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("by template"), "{text}");
}

#[test]
fn stdin_and_dash() {
    let log = std::fs::read_to_string("examples/h200-nccl-2.22.3-abort-teardown.log").unwrap();
    epdoctor()
        .args(["explain", "-", "--format", "json"])
        .write_stdin(log.clone())
        .assert()
        .code(0)
        .stdout(contains("\"benign\""));
    epdoctor().args(["explain", "--format", "json"]).write_stdin(log).assert().code(0).stdout(contains("<stdin>"));
}

#[test]
fn gzip_and_zstd_by_magic_bytes() {
    let log = std::fs::read("examples/h200-nccl-2.22.3-abort-teardown.log").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("rank0.log.weird-ext");
    let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::default());
    enc.write_all(&log).unwrap();
    enc.finish().unwrap();
    let zst = dir.path().join("rank1.log");
    std::fs::write(&zst, zstd::encode_all(&log[..], 3).unwrap()).unwrap();
    for p in [&gz, &zst] {
        let (v, code) = json_of(&[p.to_str().unwrap()]);
        assert_eq!((v["verdict"].as_str().unwrap(), code), ("benign", 0), "{}", p.display());
    }
    // A folder = every file in it.
    let (v, _) = json_of(&[dir.path().to_str().unwrap()]);
    assert_eq!(v["inputs"].as_array().unwrap().len(), 2);
}

#[test]
fn markdown_is_redacted() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        f,
        "gpu-node-17.cluster.example:2374:2994 [0] NCCL INFO Bootstrap: Using eth0:10.11.12.13<0>\n\
         gpu-node-17.cluster.example:2374:2994 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer gpu-node-18.cluster.example<41234>\n\
         gpu-node-17.cluster.example:2374:2994 [0] NCCL INFO misc/socket.cc:845 -> 6 from /home/alice/job 10.11.12.14"
    )
    .unwrap();
    let out = epdoctor().args(["explain", "--format", "md"]).arg(f.path()).output().unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    for secret in ["gpu-node-17", "gpu-node-18", "10.11.12.13", "10.11.12.14", "alice"] {
        assert!(!md.contains(secret), "{secret} leaked:\n{md}");
    }
    assert!(md.contains("host-1"), "{md}");
    // --no-redact keeps them.
    let out = epdoctor().args(["explain", "--format", "md", "--no-redact"]).arg(f.path()).output().unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("gpu-node-17"));
}

/// Every form a host takes in a job's log, in one document (issue 28, point 2): no host text left,
/// and one alias per host, whether named short (the NCCL prefix, srun) or in full (a URL, `<ip:port>`).
#[test]
fn markdown_gives_every_host_form_one_alias_per_host() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        f,
        "dgx-b200-043:1139:1151 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer dgx-b200-044.cluster.example.com<10.1.2.4:41234>\n\
         [W socket.cpp:752] The TCP client failed to connect/validate to host jdoe-laptop.local:29500\n\
         [E socket.cpp:1011] rendezvous at c10d://dgx-b200-043.cluster.example.com:29400 failed, dashboard http://jdoe-laptop:8265/#/jobs\n\
         slurmstepd-dgx-b200-044: error: *** STEP 77.0 ON dgx-b200-044 CANCELLED AT 2026-11-29T12:00:00 ***\n\
         srun: error: dgx-b200-043: task 2: Exited with exit code 1"
    )
    .unwrap();
    let out = epdoctor().args(["explain", "--format", "md", "--evidence", "20"]).arg(f.path()).output().unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    for leak in ["dgx", "b200", "jdoe", "laptop", "cluster.example", ".local", "10.1.2.4"] {
        assert!(!md.contains(leak), "{leak} leaked:\n{md}");
    }
    assert!(md.contains("srun: error: host-1: task 2") && md.contains("c10d://host-1:29400"), "{md}");
    let aliases: std::collections::BTreeSet<&str> =
        md.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').filter(|w| w.starts_with("host-")).collect();
    assert_eq!(aliases.len(), 3, "three hosts, three aliases: {aliases:?}\n{md}");
    // report's document, whose explain section is the same writer's, under its own redactor.
    let out = epdoctor().args(["report", "--python-timeout", "5"]).arg(f.path()).output().unwrap();
    let doc = String::from_utf8(out.stdout).unwrap();
    for leak in ["dgx", "b200", "jdoe", "laptop", "cluster.example", ".local", "10.1.2.4"] {
        assert!(!doc.contains(leak), "{leak} leaked in report:\n{doc}");
    }
    assert!(doc.contains("srun: error: host-") && doc.contains("c10d://host-"), "{doc}");
    let short = doc.lines().find(|l| l.contains("srun: error: host-")).unwrap();
    let alias = short.split("srun: error: ").nth(1).unwrap().split(':').next().unwrap();
    assert!(doc.contains(&format!("c10d://{alias}:29400")), "short name and FQDN share {alias}:\n{doc}");
}

/// The Markdown header and `report` say each version once, with how it was found (issue 28,
/// point 7): "torch 2.4.1 (inferred from ...)", never "torch 2.4.1 · torch 2.4.1 inferred".
#[test]
fn versions_are_said_once_with_how_they_were_found() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    // The watchdog line of torch 2.4.1 (tests/accuracy/dev/002, LLaMA-Factory#7396): its file:line tells the release.
    writeln!(f, "[80748] [rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.").unwrap();
    let out = epdoctor().args(["explain", "--format", "md"]).arg(f.path()).output().unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    let header = md.lines().find(|l| l.starts_with("epdoctor ")).unwrap_or_else(|| panic!("{md}"));
    assert_eq!((header.matches(" · NCCL ").count(), header.matches(" · torch ").count()), (1, 1), "{header}");
    assert!(header.contains("torch 2.4.1 (inferred from the file:line"), "{header}");
    assert!(header.contains("NCCL 2.20.5 (inferred: the NCCL the PyPI wheel of torch 2.4.1 pins"), "{header}");
    assert!(!header.contains("NCCL unknown"), "{header}");
}

/// `--format github` (issue 28, point 8): workflow commands the Actions runner turns into
/// annotations: one per finding at its first evidence line, one notice with the verdict; the exit
/// status is the verdict's, as in every format. `--format junit`: one test case per finding.
#[test]
fn ci_formats_annotate_each_finding_and_say_the_verdict() {
    // The DeepEP teardown pair and a peer that went away (which makes the pair its symptoms).
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/deepep-intranode-teardown.log"));
    write!(f, "{}", example.unwrap()).unwrap();
    writeln!(f, "gpu-a17:1139:1151 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer gpu-a18<41234>").unwrap();
    let log = f.path().to_path_buf();
    let (v, code) = json_of(&[log.to_str().unwrap()]);
    let findings = v["findings"].as_array().unwrap();
    let out = epdoctor().args(["explain", "--format", "github"]).arg(&log).output().unwrap();
    assert_eq!(out.status.code(), Some(code));
    let gh = String::from_utf8(out.stdout).unwrap();
    assert!(gh.lines().all(|l| l.starts_with("::") && l.contains("::")), "{gh}");
    for f in findings {
        let e = &f["evidence"][0];
        let at = format!(
            "file={},line={},title=epdoctor {}::",
            e["source"].as_str().unwrap(),
            e["line"],
            f["rule"].as_str().unwrap()
        );
        assert!(gh.lines().any(|l| l.contains(&at)), "{at} missing:\n{gh}");
    }
    let notices: Vec<&str> = gh.lines().filter(|l| l.starts_with("::notice title=epdoctor explain::")).collect();
    assert_eq!(notices.len(), 1, "{gh}");
    assert!(notices[0].contains(&format!("verdict {}", v["verdict"].as_str().unwrap())), "{gh}");
    let out = epdoctor().args(["explain", "--format", "junit"]).arg(&log).output().unwrap();
    let xml = String::from_utf8(out.stdout).unwrap();
    assert!(xml.starts_with("<?xml") && xml.trim_end().ends_with("</testsuites>"), "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), findings.len(), "{xml}");
    let failing = findings.iter().filter(|f| f["benign"] == false && f["severity"] != "info").count();
    assert!(failing > 0, "{v}");
    assert_eq!(xml.matches("<failure ").count(), failing, "{xml}");
    // The DeepEP teardown pair alone is benign: its test cases pass.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/deepep-intranode-teardown.log");
    let out = epdoctor().args(["explain", "--format", "junit", example]).output().unwrap();
    let xml = String::from_utf8(out.stdout).unwrap();
    assert!(xml.matches("<testcase ").count() >= 2 && !xml.contains("<failure"), "benign findings pass:\n{xml}");
}

#[test]
fn missing_path_is_exit_2_naming_it() {
    epdoctor().args(["explain", "/no/such/file.log"]).assert().code(2).stderr(contains("/no/such/file.log"));
}

#[test]
fn empty_and_binary_and_invalid_utf8_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, b"").unwrap();
    // Nothing read is never `clean`: unknown (exit 3), saying why.
    epdoctor()
        .args(["explain"])
        .arg(&empty)
        .assert()
        .code(3)
        .stdout(contains("not read: nothing was read: the input is empty"));
    epdoctor().args(["explain", "-"]).write_stdin("").assert().code(3).stdout(contains("nothing was read"));
    let bin = dir.path().join("bin.log");
    std::fs::write(&bin, (0u8..=255).cycle().take(100_000).collect::<Vec<u8>>()).unwrap();
    epdoctor().args(["explain"]).arg(&bin).assert().code(3).stdout(contains("does not look like text"));
    let bad = dir.path().join("bad.log");
    std::fs::write(&bad, b"h:1:2 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0 \xff\xfe\n").unwrap();
    epdoctor()
        .args(["explain", "--format", "json"])
        .arg(&bad)
        .assert()
        // The abort pair alone, with no outcome: unknown (3); the point is the replacement character.
        .code([0, 1, 3])
        .stdout(contains("\u{fffd}"));
}

#[test]
fn huge_line_is_cut_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge.log");
    let mut data = vec![b'x'; 3 << 20];
    data.extend_from_slice(b"\nnext line\n");
    std::fs::write(&p, data).unwrap();
    epdoctor()
        .args(["explain", "--format", "json"])
        .arg(&p)
        .assert()
        .code(0)
        .stdout(contains("longer than 1 MiB were cut"));
}

#[test]
fn truncated_gzip_gives_partial_result_with_note() {
    let log = std::fs::read("examples/h200-nccl-2.22.3-abort-teardown.log").unwrap();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&log).unwrap();
    let gz = enc.finish().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.gz");
    std::fs::write(&p, &gz[..gz.len() * 2 / 3]).unwrap();
    epdoctor()
        .args(["explain", "--format", "json"])
        .arg(&p)
        .assert()
        .stdout(contains("stopped reading after line"))
        // The unread rest may hold the failure: never `clean` or `benign` on a cut input.
        .stdout(contains(r#""verdict": "unknown""#));
}

#[test]
fn max_bytes_stops_an_endless_stdin() {
    let line = "host:1:2 [0] NCCL INFO chatter\n".repeat(10_000);
    epdoctor()
        .args(["explain", "--max-bytes", "1000", "--format", "json"])
        .write_stdin(line)
        .assert()
        // What was not read may hold the failure: unknown, not clean.
        .code(3)
        .stdout(contains("stopped at the --max-bytes limit; the rest was not read"));
}

#[test]
fn rules_test_passes_and_list_json() {
    epdoctor().args(["rules", "test"]).assert().success().stdout(contains(" 0 failed"));
    let out = epdoctor().args(["rules", "list", "--format", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rules = v.as_array().unwrap();
    assert!(rules.iter().all(|r| r["fixtures"].as_u64().unwrap() >= 1), "every rule has a fixture");
    epdoctor().args(["rules", "show", "nccl-abort-pair"]).assert().success().stdout(contains("root cause"));
    epdoctor().args(["rules", "show", "no-such-rule"]).assert().code(2);
}

#[test]
fn bad_user_rule_file_names_file_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("mine.toml");
    std::fs::write(
        &p,
        "[[rule]]\nid = \"my-rule\"\ntitle = \"t\"\ncategory = \"c\"\nseverity = \"error\"\npatterns = ['broken (']\nroot_cause = \"r\"\nfix = \"f\"\n",
    )
    .unwrap();
    epdoctor()
        .args(["explain", "--rules"])
        .arg(&p)
        .arg("examples/h200-nccl-2.22.3-abort-teardown.log")
        .assert()
        .code(2)
        .stderr(contains("mine.toml").and(contains("my-rule")));
}

#[test]
fn user_rule_overrides_builtin_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("override.toml");
    std::fs::write(
        &p,
        "[[rule]]\nid = \"nccl-abort-pair\"\ntitle = \"my own title\"\ncategory = \"teardown\"\nseverity = \"error\"\npatterns = ['Could not receive type']\nroot_cause = \"r\"\nfix = \"f\"\n",
    )
    .unwrap();
    let out = epdoctor()
        .args(["explain", "--format", "json", "--rules"])
        .arg(&p)
        .arg("examples/h200-nccl-2.22.3-abort-teardown.log")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "actionable");
    assert_eq!(v["primary"]["title"], "my own title");
}

#[test]
fn boolean_environment_twins_take_the_usual_spellings() {
    let md = |v: &str| {
        let out = epdoctor()
            .env("EPDOCTOR_NO_REDACT", v)
            .args(["explain", "--format", "md", "tests/fixtures/snap/two-ranks.log"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "EPDOCTOR_NO_REDACT={v}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    for on in ["1", "true", "yes", "on", "TRUE"] {
        assert!(md(on).contains("gpu-a17"), "EPDOCTOR_NO_REDACT={on} keeps the hostname");
    }
    for off in ["0", "false", "no", "off", ""] {
        assert!(!md(off).contains("gpu-a17"), "EPDOCTOR_NO_REDACT={off:?} still redacts");
    }
    // The README's own example: EPDOCTOR_BLESS=1 is accepted (here on a copy of one fixture).
    let d = tempfile::tempdir().unwrap();
    let fx = d.path().join("teardown.log");
    std::fs::copy("rules/fixtures/teardown/deepep-41-abort-pair.log", &fx).unwrap();
    let out = epdoctor().env("EPDOCTOR_BLESS", "1").args(["rules", "test"]).arg(&fx).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The README names exactly the flags that have an `EPDOCTOR_*` twin.
#[test]
fn readme_lists_every_environment_twin() {
    use clap::CommandFactory;
    fn walk(c: &clap::Command, out: &mut std::collections::BTreeSet<String>) {
        for a in c.get_arguments() {
            if let Some(e) = a.get_env() {
                out.insert(e.to_string_lossy().into_owned());
            }
        }
        c.get_subcommands().filter(|s| !s.is_hide_set()).for_each(|s| walk(s, out));
    }
    let mut twins = Default::default();
    walk(&epdoctor::cli::Cli::command(), &mut twins);
    let readme = std::fs::read_to_string("README.md").unwrap();
    let start = readme.find("\nEnvironment twins:").expect("an 'Environment twins:' paragraph");
    let line = readme[start + 1..].split("\n\n").next().unwrap();
    let listed: std::collections::BTreeSet<String> = line
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.starts_with("EPDOCTOR_"))
        .map(|w| w.split('=').next().unwrap().to_string())
        .collect();
    assert_eq!(listed, twins, "README's 'Environment twins:' line vs the flags in src/cli.rs");
}

#[test]
fn rule_prose_is_markdown_log_text_stays_escaped_and_the_rank_is_said_once() {
    let d = tempfile::tempdir().unwrap();
    let rules = d.path().join("r.toml");
    std::fs::write(
        &rules,
        r#"[[rule]]
id = "prose-check"
title = "Teardown <b>x</b> check"
category = "teardown"
severity = "error"
patterns = ['ProcessGroupNCCL\.cpp:\d+\] Warning: prose check']
root_cause = "The `ncclCommAbort` path ran, as in NCCL <2.23.4."
fix = "Call `destroy_process_group()` **before** exit."
refs = ["https://github.com/pytorch/pytorch/issues/1"]
"#,
    )
    .unwrap();
    let log = d.path().join("rank2.log");
    std::fs::write(
        &log,
        "[rank2]:[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1575] Warning: prose check <img src=x> `tick`\n",
    )
    .unwrap();
    let out = epdoctor()
        .args(["explain", "--no-builtin-rules", "--rules"])
        .arg(&rules)
        .args(["--format", "md"])
        .arg(&log)
        .output()
        .unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(
        md.contains("The `ncclCommAbort` path ran, as in NCCL &lt;2.23.4."),
        "rule prose renders as Markdown:\n{md}"
    );
    assert!(md.contains("Call `destroy_process_group()` **before** exit."), "{md}");
    assert!(md.contains("Teardown &lt;b&gt;x&lt;/b&gt; check") || md.contains("Teardown &lt;b>x&lt;/b> check"), "{md}");
    // The log line sits in a code block, verbatim.
    assert!(md.contains("Warning: prose check <img src=x> `tick`"), "{md}");
    assert!(!md.contains("[rank 2]: [rank2]:"), "the rank is not said twice:\n{md}");
    let text = epdoctor().args(["explain", "--no-builtin-rules", "--rules"]).arg(&rules).arg(&log).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(!text.contains("rank 2: [rank2]:"), "{text}");
}

#[test]
fn evidence_n_applies_to_every_finding_in_text_and_md() {
    let d = tempfile::tempdir().unwrap();
    let rules = d.path().join("r.toml");
    std::fs::write(
        &rules,
        r#"[[rule]]
id = "ev-primary"
title = "Primary"
category = "runtime"
severity = "fatal"
patterns = ['primary failure']
root_cause = "x"
fix = "y"

[[rule]]
id = "ev-secondary"
title = "Secondary"
category = "runtime"
severity = "warning"
patterns = ['secondary line \d+']
root_cause = "x"
fix = "y"
"#,
    )
    .unwrap();
    let log = d.path().join("a.log");
    let mut text = String::from("primary failure\n");
    for i in 1..=6 {
        text.push_str(&format!("secondary line {i}\n"));
    }
    std::fs::write(&log, text).unwrap();
    for format in ["text", "md"] {
        let out = epdoctor()
            // (text: -v, as the short report shows the primary's first line only)
            .args(["explain", "-v", "--no-builtin-rules", "--evidence", "4", "--format", format, "--rules"])
            .arg(&rules)
            .arg(&log)
            .output()
            .unwrap();
        let s = String::from_utf8(out.stdout).unwrap();
        for i in 1..=4 {
            assert!(s.contains(&format!("secondary line {i}")), "--evidence 4, {format}: line {i} missing:\n{s}");
        }
        assert!(!s.contains("secondary line 5"), "{format}:\n{s}");
    }
}

#[test]
fn man_pages_exist_for_every_page_they_name_and_say_the_exit_statuses() {
    let out = epdoctor().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".SH \"EXIT STATUS\""), "{page}");
    for code in ["0", "1", "2", "3", "5"] {
        assert!(page.contains(&format!(".TP\n{code}\n")), "exit status {code} missing:\n{page}");
    }
    // lint decides 0, 1 and 2 by its own findings; each says what it means there.
    for code in ["0", "1", "2"] {
        let meaning = page.split(&format!(".TP\n{code}\n")).nth(1).and_then(|r| r.lines().next()).unwrap_or("");
        assert!(meaning.contains("(lint)"), "exit status {code} does not say what it means for lint: {meaning}");
    }
    let d = tempfile::tempdir().unwrap();
    epdoctor().args(["man", "--dir"]).arg(d.path()).assert().code(0);
    let mut named = Vec::new();
    for e in std::fs::read_dir(d.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for w in text.split_whitespace().filter(|w| w.ends_with("(1)")) {
            named.push(w.trim_end_matches("(1)").replace("\\-", "-"));
        }
    }
    assert!(named.iter().any(|n| n == "epdoctor-explain"), "{named:?}");
    for n in named {
        assert!(d.path().join(format!("{n}.1")).is_file(), "{n}(1) is named but not generated");
    }
    assert!(!d.path().join("epdoctor-help.1").exists() && !d.path().join("epdoctor-worker.1").exists());
}

/// Issue 43, point 1: `man --dir` never overwrites a file the user has there unless told to.
#[test]
fn man_dir_keeps_a_file_of_the_user_unless_forced() {
    let d = tempfile::tempdir().unwrap();
    let mine = d.path().join("epdoctor.1");
    std::fs::write(&mine, "my notes\n").unwrap();
    let out = epdoctor().args(["man", "--dir"]).arg(d.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("epdoctor.1") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "my notes\n");
    // Nothing else was written either.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    epdoctor().args(["man", "--force", "--dir"]).arg(d.path()).assert().code(0);
    assert!(std::fs::read_to_string(&mine).unwrap().contains(".TH"));
}

/// DeepEP's test_intranode.py prints one `... passed` line per case (its own format string), then,
/// on NCCL <= 2.22, the abort-path WARNs of DeepEP issue #41 at exit
/// (https://github.com/deepseek-ai/DeepEP/issues/41, lines as posted); the peer-gone line is the
/// one posted in https://github.com/NVIDIA/nccl/issues/795.
const DEEPEP_PASSED: &str = "\
[testing] Running with BF16, without top-k (async=False, previous=False) ... passed
[testing] Running with BF16, with top-k (async=False, previous=False) ... passed
[testing] Running with FP8, with top-k (async=True, previous=True) ... passed
";
const DEEPEP_41_TEARDOWN: &str = "\
0bc8f5b83646:2374:2994 [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Resource temporarily unavailable
0bc8f5b83646:2374:2994 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0
0bc8f5b83646:2374:2994 [0] proxy.cc:1521 NCCL WARN [Proxy Service 0] Failed to execute operation Close from rank 0, retcode 3
";
const PEER_CLOSED: &str = "a100-st-p4d24xlarge-22:183006:183181 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer a100-st-p4d24xlarge-22<47861>\n";

fn explain_json(text: &str) -> serde_json::Value {
    let out = epdoctor().args(["explain", "--format", "json", "-"]).write_stdin(text.to_string()).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn outcome_comes_from_the_runs_markers_and_lists_them() {
    let v = explain_json(&format!("{DEEPEP_PASSED}{DEEPEP_41_TEARDOWN}{PEER_CLOSED}"));
    let o = &v["outcome"];
    assert_eq!(o["status"], "succeeded", "{o}");
    assert_eq!(o["success_markers"], 3, "{o}");
    assert_eq!(o["success"].as_array().unwrap().len(), 3, "{o}");
    assert_eq!(o["failure"].as_array().unwrap().len(), 0, "{o}");
    // The peer-gone WARN after the last passed line is teardown, read against the success.
    assert_eq!(v["verdict"], "benign", "{v}");
    let gone = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "nccl-peer-gone").unwrap();
    assert_eq!(gone["benign"], true);
    assert!(
        gone["context"].as_str().unwrap().contains("printed after the run's last success marker (<stdin>:3)"),
        "{gone}"
    );

    // The same WARN alone: the outcome is unknown (a warning never decides it), the verdict actionable.
    let v = explain_json(PEER_CLOSED);
    assert_eq!(v["outcome"]["status"], "unknown", "{v}");
    assert_eq!(v["verdict"], "actionable");

    // Before the work finished it is a real peer loss, whatever comes after.
    let v = explain_json(&format!("{PEER_CLOSED}{DEEPEP_PASSED}"));
    assert_eq!(v["outcome"]["status"], "succeeded");
    assert_eq!(v["verdict"], "actionable", "{v}");
}

#[test]
fn clean_is_earned_and_says_what_was_read() {
    epdoctor()
        .args(["explain", "-"])
        .write_stdin("host:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\nstep 10 loss=0.41\n")
        .assert()
        .code(0)
        .stdout(contains("clean  no warning or error in 2 lines of 1 input"));
    // A tar archive cut in its middle: what is left unread may hold the failure.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rank0.log");
    std::fs::write(&log, "host:1:2 [0] NCCL INFO chatter\n".repeat(2000)).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    b.append_path_with_name(&log, "rank0.log").unwrap();
    b.append_path_with_name(&log, "rank1.log").unwrap();
    let whole = b.into_inner().unwrap();
    let cut = dir.path().join("logs.tar");
    std::fs::write(&cut, &whole[..whole.len() * 3 / 4]).unwrap();
    let out = epdoctor().args(["explain", "--format", "json"]).arg(&cut).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "unknown");
    assert!(!v["unread"].as_array().unwrap().is_empty(), "{v}");
}

/// `EPDOCTOR_FORMAT=github` set for explain in a CI job must not break the commands without that
/// format: they write text and say why on stderr; explain still reads it; a bad `--format` given
/// on the command line is still an error (issue 28).
#[test]
fn a_format_variable_a_command_lacks_falls_back_to_text_with_a_note() {
    let out = epdoctor().env("EPDOCTOR_FORMAT", "github").args(["rules", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("nccl-abort-pair"), "the text table: {stdout}");
    assert!(
        stderr.contains("EPDOCTOR_FORMAT=github") && stderr.contains("epdoctor rules list") && stderr.contains("json"),
        "the note names the variable, the command and its formats: {stderr}"
    );
    // An explicit --format wins over the variable, and says nothing.
    let out = epdoctor().env("EPDOCTOR_FORMAT", "junit").args(["rules", "list", "--format", "json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok());
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // The command that has the format uses it.
    let out = epdoctor()
        .env("EPDOCTOR_FORMAT", "github")
        .args(["explain", "examples/h200-nccl-2.22.3-abort-teardown.log"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("::notice"), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("EPDOCTOR_FORMAT"));
    // A value no command has, and a bad flag, stay errors; the first names the variable (issue 43,
    // point 8: the command line holds no --format to look at).
    for (var, args) in [("nosuch", vec!["rules", "list"]), ("github", vec!["rules", "list", "--format", "github"])] {
        let out = epdoctor().env("EPDOCTOR_FORMAT", var).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{var} {args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"), "{var} {args:?}");
    }
    let out = epdoctor().env("EPDOCTOR_FORMAT", "xml").args(["explain", "examples/"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("EPDOCTOR_FORMAT=\"xml\"") && err.contains("from the environment"), "{err}");
}

/// The versions line of `explain` (text, md, json) and `report` on one log.
fn versions_everywhere(log: &str) -> (String, String, serde_json::Value, String) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(log.as_bytes()).unwrap();
    let run = |args: &[&str]| {
        let out = epdoctor().args(args).arg(f.path()).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["explain", "-v"]);
    let text = text.lines().find_map(|l| l.strip_prefix("versions: ")).unwrap_or_else(|| panic!("{text}")).to_string();
    let md = run(&["explain", "--format", "md"]);
    let md = md.lines().find(|l| l.starts_with("epdoctor ")).unwrap_or_else(|| panic!("{md}")).to_string();
    let json: serde_json::Value = serde_json::from_str(&run(&["explain", "--format", "json"])).unwrap();
    let report = run(&["report", "--python-timeout", "5"]);
    (text, md, json, report)
}

/// One wording of a version in text, md, json and report (issue 28, point 7): each version once,
/// with how it was found; a set of releases with a gap says the gap; a level word alone gives no
/// release below the catalogue; lines no one release prints say so; one release written two ways
/// is one version.
#[test]
fn a_version_is_said_one_way_everywhere() {
    // torch 2.4.1's watchdog line (tests/accuracy/dev/002, LLaMA-Factory#7396): torch inferred, NCCL its wheel's pin.
    let (text, md, json, report) = versions_everywhere("[80748] [rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.\n");
    let torch = "torch 2.4.1 (inferred from the file:line of torch's C++ log lines ProcessGroupNCCL.cpp:1664)";
    assert!(text.contains(torch) && md.contains(torch) && report.contains(torch), "{text}\n{md}\n{report}");
    assert_eq!(md.matches(" · torch ").count(), 1, "{md}");
    assert!(text.contains("NCCL 2.20.5 (inferred: the NCCL the PyPI wheel of torch 2.4.1 pins"), "{text}");
    let torch_note = json["versions"].as_array().unwrap().iter().find(|n| n["component"] == "torch").unwrap();
    assert_eq!((torch_note["value"].as_str(), torch_note["how"].as_str()), (Some("2.4.1"), Some("inferred")));

    // bootstrap.cc:122 prints this at v2.29.2-1..v2.29.3-1 and v2.30.3-1..v2.30.4-1 only (the catalogue):
    // two runs, not one span over 2.29.7 that does not print it there.
    let (text, md, json, report) = versions_everywhere(
        "gpu1:1:2 [0] bootstrap.cc:122 NCCL WARN NET/Socket : No usable listening interface found\n",
    );
    let said = "NCCL 2.29.2-2.29.3, 2.30.3-2.30.4 (inferred from the file:line of WARN sites bootstrap.cc:122)";
    assert!(text.contains(said) && md.contains(said) && report.contains(said), "{text}\n{md}\n{report}");
    let n = json["versions"].as_array().unwrap().iter().find(|n| n["component"] == "nccl").unwrap();
    assert_eq!(n["value"], "2.29.2-2.29.3, 2.30.3-2.30.4");
    assert!(json["nccl_version"].is_null());

    // `Cuda failure` is WARN in every catalogued release (2.18.1-2.32.3; INFO too in 2.30.7): the
    // word alone says nothing of the hand-written releases below the catalogue (2.17.1).
    let (text, md, _, _) = versions_everywhere("gpu1:1:2 [0] enqueue.cc:1 NCCL WARN Cuda failure 'out of memory'\n");
    assert!(text.contains("NCCL 2.18.1-2.32.3 (inferred from the level of WARN"), "{text}");
    assert!(!text.contains("2.17") && !md.contains("2.17"), "{text}\n{md}");

    // socket.cc:71 is 2.24.3-2.26.6 and proxy.cc:154 is 2.28.3-2.28.9 in the catalogue: no one
    // release prints both, and the reader is told so instead of a silent "unknown".
    let (text, md, json, report) = versions_everywhere(
        "n1:4101:4190 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer n1<48122>\n\
         n1:4101:4190 [0] proxy.cc:154 NCCL WARN Couldn't find opId=0x7f3c2c0a1b40\n",
    );
    let said = "NCCL unknown (conflicting: the log's NCCL lines fit no one release: misc/socket.cc:71 is 2.24.3-2.26.6; proxy.cc:154 is 2.28.3-2.28.9";
    assert!(text.replace("\n          ", " ").contains(said), "{text}");
    assert!(md.contains(said) && report.contains(said), "{md}\n{report}");
    let n = json["versions"].as_array().unwrap().iter().find(|n| n["component"] == "nccl").unwrap();
    assert_eq!((n["value"].as_str(), n["how"].as_str()), (Some("unknown"), Some("conflicting")));
    assert!(json["nccl_version"].is_null());

    // The version line and another with the CUDA suffix: one release, said once, no "several versions" note.
    let (text, _, json, _) = versions_everywhere(
        "n1:1:2 [0] NCCL INFO NCCL version 2.22.3+cuda12.5\nn1:1:3 [1] NCCL INFO NCCL version 2.22.3\n\
         n1:1:2 [0] enqueue.cc:1 NCCL WARN Cuda failure 'out of memory'\n",
    );
    assert!(text.starts_with("NCCL 2.22.3+cuda12.5 (stated: NCCL version line)"), "{text}");
    assert_eq!(json["nccl_version"], "2.22.3");
    assert!(!json["notes"].to_string().contains("several NCCL versions"), "{}", json["notes"]);
}

/// The README's quick start is two commands on a fresh machine, the first installing and running
/// the installed binary on a bundled log, and it says that a C compiler is needed (issue 28, point 1).
#[test]
fn the_quick_start_installs_and_runs_in_two_commands() {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let start = readme.split("## Quick start").nth(1).expect("a quick start section");
    let block = start.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a sh block");
    let cmds: Vec<&str> =
        block.lines().map(|l| l.split('#').next().unwrap().trim()).filter(|l| !l.is_empty()).collect();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    let (install, run) = cmds[0].split_once(" && ").expect("install && run");
    assert_eq!(install, "cargo install --locked --path .");
    let log = run.strip_prefix("epdoctor explain ").expect("the installed binary, by name");
    assert!(std::path::Path::new(log).is_file(), "{log}");
    assert_eq!(cmds[1], "cargo test --release");
    let before_next = start.split("\n## ").next().unwrap();
    assert!(before_next.contains("C compiler"), "{before_next}");
}

/// explain's PATH help names every input it reads, archives included (issue 28, point 5).
#[test]
fn explain_path_help_names_the_archives() {
    let out = epdoctor().args(["explain", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for kind in [".tar", ".tar.gz", ".tgz", ".zip", "gzip", "zstd"] {
        assert!(help.contains(kind), "{kind}:\n{help}");
    }
}

/// Issue 43, point 4: the Markdown says how the run ended and why the verdict is what it is, as
/// the text's first lines do (a benign report once never said the run succeeded).
#[test]
fn markdown_says_the_outcome_and_the_reason() {
    let out = epdoctor()
        .args(["explain", "examples/h200-nccl-2.22.3-abort-teardown.log", "--format", "md"])
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("**Outcome:** succeeded (2 success markers, first: "), "{md}");
    assert!(md.contains("**Why:** the run succeeded"), "{md}");
    // Where the markers are, not their log text: that stays in fenced blocks.
    let outcome = md.lines().find(|l| l.starts_with("**Outcome:**")).unwrap();
    assert!(!outcome.contains("epdoctor-harness"), "{outcome}");
}
