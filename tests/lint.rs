//! `epdoctor lint` end to end: exit statuses, every output format, files that do not parse.

use std::path::PathBuf;

use predicates::prelude::*;
use serde_json::Value;

mod common;
use common::epdoctor;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rules/lint/fixtures").join(name)
}

fn json(args: &[&str]) -> (Value, i32) {
    let out = epdoctor().arg("lint").args(args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (v, out.status.code().unwrap())
}

#[test]
fn a_script_that_never_destroys_exits_1_and_says_so() {
    epdoctor()
        .arg("lint")
        .arg(fixture("never-destroyed.py"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains("never-destroyed.py:10:5: warning [destroy-missing]"))
        .stdout(predicate::str::contains("destroy_process_group"));
}

#[test]
fn try_finally_destroy_after_a_barrier_exits_0() {
    epdoctor()
        .arg("lint")
        .arg(fixture("try-finally-after-barrier.py"))
        .assert()
        .code(0)
        .stdout(predicate::str::contains("0 finding(s)"));
}

#[test]
fn json_carries_file_line_column_and_the_finding_fields() {
    let (v, code) = json(&[fixture("never-destroyed.py").to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 1);
    assert_eq!(v["schema_version"], 1);
    let f = &v["findings"][0];
    assert_eq!(f["rule"], "destroy-missing");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["evidence"][0]["line"], 10);
    assert_eq!(f["evidence"][0]["column"], 5);
    assert!(f["evidence"][0]["source"].as_str().unwrap().ends_with("never-destroyed.py"));
    assert_eq!(f["evidence"][0]["text"], "dist.init_process_group(\"nccl\")");
    for k in ["title", "root_cause", "fix", "context"] {
        assert!(!f[k].as_str().unwrap().is_empty(), "{k}");
    }
    assert!(!f["refs"].as_array().unwrap().is_empty());
    assert_eq!(v["findings"][1]["torch"], ">=2.3", "the check's torch range travels with the finding");
}

#[test]
fn torch_version_selects_the_checks() {
    let f = fixture("torchtitan-train.py");
    let (all, _) = json(&[f.to_str().unwrap(), "-f", "json"]);
    let rules = |v: &Value| {
        v["findings"].as_array().unwrap().iter().map(|f| f["rule"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert!(rules(&all).contains(&"no-barrier-before-destroy".to_string()));
    let (new, code) = json(&[f.to_str().unwrap(), "-f", "json", "--torch", "2.11.0+cu130"]);
    assert_eq!(new["torch_version"], "2.11.0");
    assert!(!rules(&new).contains(&"no-barrier-before-destroy".to_string()), "off from torch 2.6");
    assert_eq!(code, 0, "only an info finding is left");
    let (old, code) = json(&[f.to_str().unwrap(), "-f", "json", "--torch", "2.5.1"]);
    assert!(rules(&old).contains(&"no-barrier-before-destroy".to_string()));
    assert_eq!(code, 1);
}

#[test]
fn markdown_has_the_table_and_a_section_per_finding() {
    let out = epdoctor().args(["lint", "-f", "md"]).arg(fixture("never-destroyed.py")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.starts_with("## epdoctor lint\n"), "{s}");
    assert!(s.contains("| where | severity | check | title |"), "{s}");
    assert!(s.contains("| warning | destroy-missing |"), "{s}");
    assert!(s.contains("### destroy-missing at "), "{s}");
    assert!(s.contains("```text\ndist.init_process_group(\"nccl\")\n```"), "{s}");
}

/// The properties SARIF 2.1.0's schema requires, and the types it gives them, for what we emit.
fn assert_sarif(v: &Value) {
    assert_eq!(v["version"], "2.1.0");
    assert!(v["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let runs = v["runs"].as_array().expect("runs is an array");
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    let driver = &run["tool"]["driver"];
    assert_eq!(driver["name"], "epdoctor");
    let rules = driver["rules"].as_array().unwrap();
    for r in rules {
        assert!(r["id"].is_string());
        assert!(r["shortDescription"]["text"].is_string());
        assert!(["none", "note", "warning", "error"].contains(&r["defaultConfiguration"]["level"].as_str().unwrap()));
    }
    for inv in run["invocations"].as_array().unwrap() {
        assert!(inv["executionSuccessful"].is_boolean());
        for n in inv["toolExecutionNotifications"].as_array().unwrap() {
            assert!(n["message"]["text"].is_string());
        }
    }
    for res in run["results"].as_array().unwrap() {
        assert!(res["message"]["text"].is_string(), "result.message is required");
        let id = res["ruleId"].as_str().unwrap();
        let idx = res["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[idx]["id"], id, "ruleIndex points at the rule");
        assert!(["none", "note", "warning", "error"].contains(&res["level"].as_str().unwrap()));
        for loc in res["locations"].as_array().unwrap() {
            let pl = &loc["physicalLocation"];
            assert!(pl["artifactLocation"]["uri"].is_string());
            assert!(pl["region"]["startLine"].as_u64().unwrap() >= 1);
            assert!(pl["region"]["startColumn"].as_u64().unwrap() >= 1);
        }
    }
    // The schema types every optional property; none may be null.
    fn no_nulls(v: &Value, path: &str) {
        match v {
            Value::Null => panic!("null at {path}"),
            Value::Object(m) => m.iter().for_each(|(k, x)| no_nulls(x, &format!("{path}.{k}"))),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| no_nulls(x, &format!("{path}[{i}]"))),
            _ => {}
        }
    }
    no_nulls(v, "$");
}

#[test]
fn sarif_has_the_shape_code_scanning_reads() {
    let (v, code) = json(&["-f", "sarif", fixture("rank-exit.py").to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_sarif(&v);
    let results = v["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    let r = results.iter().find(|r| r["ruleId"] == "rank-exit-before-collective").unwrap();
    assert_eq!(r["level"], "warning");
    assert_eq!(r["locations"][0]["physicalLocation"]["region"]["startLine"], 15);
    let info = results.iter().find(|r| r["ruleId"] == "destroy-not-on-exception").unwrap();
    assert_eq!(info["level"], "note");
}

#[test]
fn a_file_that_does_not_parse_exits_2_naming_file_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.py");
    std::fs::write(&bad, "import torch\n\ndef f(:\n    pass\n").unwrap();
    std::fs::copy(fixture("never-destroyed.py"), dir.path().join("ok.py")).unwrap();
    epdoctor()
        .arg("lint")
        .arg(dir.path())
        .assert()
        .code(2)
        .stdout(predicate::str::contains("broken.py:3:7: error: does not parse"))
        // The other file is still linted.
        .stdout(predicate::str::contains("ok.py:10:5: warning [destroy-missing]"));
    let (v, code) = json(&["-f", "sarif", dir.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_sarif(&v);
    assert_eq!(v["runs"][0]["invocations"][0]["executionSuccessful"], false);
}

#[test]
fn usage_errors_exit_2() {
    epdoctor().args(["lint", "/no/such/file.py"]).assert().code(2).stderr(predicate::str::contains("/no/such/file.py"));
    epdoctor().arg("lint").assert().code(2);
    epdoctor().args(["lint", "--torch", "banana"]).arg(fixture("never-destroyed.py")).assert().code(2);
    let empty = tempfile::tempdir().unwrap();
    epdoctor().arg("lint").arg(empty.path()).assert().code(2).stderr(predicate::str::contains("no Python files"));
}

#[test]
fn deep_nesting_and_binary_input_are_errors_or_results_never_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.py");
    let n = 20_000;
    std::fs::write(&deep, format!("x = {}1{}\ndist.init_process_group('nccl')\n", "(".repeat(n), ")".repeat(n)))
        .unwrap();
    let out = epdoctor().arg("lint").arg(&deep).output().unwrap();
    assert!(matches!(out.status.code(), Some(0..=2)), "{out:?}");
    let mut ifs = String::new();
    for i in 0..300 {
        ifs.push_str(&format!("{}if rank == {i}:\n", "    ".repeat(i)));
    }
    ifs.push_str(&format!("{}return\ndist.barrier()\n", "    ".repeat(300)));
    let nested = dir.path().join("nested.py");
    std::fs::write(&nested, format!("def f(rank):\n{}", ifs.lines().map(|l| format!("    {l}\n")).collect::<String>()))
        .unwrap();
    let out = epdoctor().arg("lint").arg(&nested).output().unwrap();
    assert!(matches!(out.status.code(), Some(0..=2)), "{out:?}");
    let bin = dir.path().join("bin.py");
    std::fs::write(&bin, [0xffu8, 0xfe, 0x00, 0x9c, b'\n']).unwrap();
    epdoctor()
        .arg("lint")
        .arg(&bin)
        .assert()
        .code(2)
        .stdout(predicate::str::contains("bin.py:1:1: error: does not parse (not UTF-8 text (byte 0 is invalid))"));
}
