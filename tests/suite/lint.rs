//! `epdoctor lint` end to end: exit statuses, every output format, files that do not parse, the
//! torch version from the environment, the file walk, SARIF paths and fixes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common;
use crate::common::cmd::contains;

/// The binary, reading no Python of this machine (each test says which torch it means).
fn epdoctor() -> common::cmd::Command {
    let mut c = common::epdoctor();
    c.env("EPDOCTOR_PYTHON", "none");
    c
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rules/lint/fixtures").join(name)
}

fn json(args: &[&str]) -> (Value, i32) {
    json_in(None, args)
}

fn json_in(dir: Option<&Path>, args: &[&str]) -> (Value, i32) {
    let mut c = epdoctor();
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.arg("lint").args(args).output().unwrap();
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
        .stdout(contains("never-destroyed.py:10:5: warning [destroy-missing]"))
        .stdout(contains("destroy_process_group"));
}

#[test]
fn try_finally_destroy_after_a_barrier_exits_0() {
    // No warning; the finally's destroy is also the exception path's, where abort is advised (info).
    epdoctor()
        .arg("lint")
        .arg(fixture("try-finally-after-barrier.py"))
        .assert()
        .code(0)
        .stdout(contains("1 finding(s): 0 error, 0 warning, 1 info"))
        .stdout(contains("[destroy-in-except]"));
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

/// `--format github` (issue 28, point 8): the same findings as SARIF, as Actions annotations at
/// their lines (a warning stays a warning, an info a notice), and one notice with the counts.
#[test]
fn github_format_annotates_each_finding_at_its_line() {
    let file = fixture("rank-exit.py");
    let out = epdoctor().args(["lint", "-f", "github"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let gh = String::from_utf8(out.stdout).unwrap();
    let at = format!("::warning file={},line=15,title=epdoctor rank-exit-before-collective::", file.display());
    assert!(gh.lines().any(|l| l.starts_with(&at)), "{at} missing:\n{gh}");
    assert!(
        gh.lines().any(|l| l.starts_with("::notice ") && l.contains("title=epdoctor destroy-not-on-exception")),
        "{gh}"
    );
    assert_eq!(gh.lines().filter(|l| l.contains(",title=epdoctor ")).count(), 4, "{gh}");
    assert!(gh.lines().last().unwrap().starts_with("::notice title=epdoctor lint::4 finding(s) in 1 file(s)"), "{gh}");
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
        .stdout(contains("broken.py:3:7: error: does not parse"))
        // The other file is still linted.
        .stdout(contains("ok.py:10:5: warning [destroy-missing]"));
    let (v, code) = json(&["-f", "sarif", dir.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_sarif(&v);
    assert_eq!(v["runs"][0]["invocations"][0]["executionSuccessful"], false);
}

#[test]
fn usage_errors_exit_2() {
    epdoctor().args(["lint", "/no/such/file.py"]).assert().code(2).stderr(contains("/no/such/file.py"));
    epdoctor().arg("lint").assert().code(2);
    epdoctor().args(["lint", "--torch", "banana"]).arg(fixture("never-destroyed.py")).assert().code(2);
    let empty = tempfile::tempdir().unwrap();
    epdoctor().arg("lint").arg(empty.path()).assert().code(2).stderr(contains("no Python files"));
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
        .stdout(contains("bin.py:1:1: error: does not parse (not UTF-8 text (byte 0 is invalid))"));
}

fn rules(v: &Value) -> Vec<(String, String)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap().to_string(), f["severity"].as_str().unwrap().to_string()))
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// torchtitan's end of training: close, then destroy with nothing that synchronises in between.
fn titan() -> String {
    std::fs::read_to_string(fixture("torchtitan-train.py")).unwrap()
}

#[test]
fn the_project_pins_decide_the_torch_checks_and_say_where_from() {
    let barrier = |v: &Value| rules(v).into_iter().find(|(r, _)| r == "no-barrier-before-destroy").map(|(_, s)| s);
    // Nothing known: said, but as info, and the exit status stays 0.
    let d = tempfile::tempdir().unwrap();
    let f = write(d.path(), "proj/train.py", &titan());
    std::fs::create_dir(d.path().join("proj/.git")).unwrap();
    let (v, code) = json(&[f.to_str().unwrap(), "-f", "json"]);
    assert_eq!(barrier(&v).as_deref(), Some("info"));
    assert_eq!(code, 0);
    assert!(v["torch_source"].as_str().unwrap().contains("no torch pin"), "{}", v["torch_source"]);
    // A requirement that needs torch >= 2.7: the < 2.6 check is off.
    write(d.path(), "proj/requirements.txt", "numpy\ntorch>=2.7  # the new teardown\n");
    let (v, _) = json(&[f.to_str().unwrap(), "-f", "json"]);
    assert_eq!(barrier(&v), None);
    assert!(v["torch_source"].as_str().unwrap().contains("torch>=2.7 in"), "{}", v["torch_source"]);
    assert!(v["torch_source"].as_str().unwrap().contains("requirements.txt"));
    // A lock file is believed first: exact, so the check applies as a warning.
    write(d.path(), "proj/uv.lock", "version = 1\n\n[[package]]\nname = \"torch\"\nversion = \"2.5.1\"\n");
    let (v, code) = json(&[f.to_str().unwrap(), "-f", "json"]);
    assert_eq!(barrier(&v).as_deref(), Some("warning"));
    assert_eq!(v["torch_version"], "2.5.1");
    assert_eq!(code, 1);
    // pyproject.toml in a subfolder closer to the file wins over the folder above.
    write(
        d.path(),
        "proj/sub/pyproject.toml",
        "[project]\nname = \"x\"\ndependencies = [\"torch==2.6.*\", \"torchvision\"]\n",
    );
    let g = write(d.path(), "proj/sub/train.py", &titan());
    let (v, _) = json(&[g.to_str().unwrap(), "-f", "json"]);
    assert_eq!(barrier(&v), None);
    assert!(v["torch_source"].as_str().unwrap().contains("pyproject.toml"));
    // --torch beats every pin.
    let (v, _) = json(&[g.to_str().unwrap(), "-f", "json", "--torch", "2.4.1"]);
    assert_eq!(barrier(&v).as_deref(), Some("warning"));
    assert_eq!(v["torch_source"], "--torch 2.4.1");
}

#[cfg(unix)]
#[test]
fn the_torch_installed_for_the_python_comes_before_the_pins() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let f = write(d.path(), "train.py", &titan());
    write(d.path(), "requirements.txt", "torch>=2.7\n");
    // A stand-in interpreter: prints the version the metadata query would.
    let py = write(d.path(), "bin/python", "#!/bin/sh\necho 2.5.1\n");
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (v, _) = json(&[f.to_str().unwrap(), "-f", "json", "--python", py.to_str().unwrap()]);
    assert_eq!(v["torch_version"], "2.5.1");
    assert!(v["torch_source"].as_str().unwrap().contains("installed for"), "{}", v["torch_source"]);
    assert!(rules(&v).contains(&("no-barrier-before-destroy".into(), "warning".into())));
    // One without torch: the pins decide.
    let none = write(d.path(), "bin/python-bare", "#!/bin/sh\nexit 1\n");
    std::fs::set_permissions(&none, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (v, _) = json(&[f.to_str().unwrap(), "-f", "json", "--python", none.to_str().unwrap()]);
    assert!(v["torch_source"].as_str().unwrap().contains("requirements.txt"), "{}", v["torch_source"]);
}

#[cfg(unix)]
#[test]
fn link_loops_finish_and_no_finding_is_repeated() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    std::fs::create_dir(r.join(".git")).unwrap();
    std::fs::copy(fixture("never-destroyed.py"), r.join("train.py")).unwrap();
    write(r, "pkg/sub/util.py", "x = 1\n");
    std::os::unix::fs::symlink("..", r.join("pkg/sub/up")).unwrap();
    std::os::unix::fs::symlink("../..", r.join("pkg/sub/top")).unwrap();
    std::os::unix::fs::symlink("../train.py", r.join("pkg/train_link.py")).unwrap();
    write(r, ".venv/lib/site.py", "import torch.distributed as d\nd.init_process_group('nccl')\n");
    write(r, "build/gen.py", "import torch.distributed as d\nd.init_process_group('nccl')\n");
    write(r, ".gitignore", "build/\n");
    let (v, code) = json_in(Some(r), &[".", "pkg", "train.py", "-f", "json"]);
    assert_eq!(code, 1);
    let files: Vec<&str> = v["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.contains(&"pkg/sub/util.py"), "{files:?}");
    let sites: Vec<(String, u64)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap().to_string(), f["evidence"][0]["line"].as_u64().unwrap()))
        .collect();
    let mut uniq = sites.clone();
    uniq.dedup();
    assert_eq!(sites, uniq, "one finding per site");
    assert!(sites.contains(&("destroy-missing".into(), 10)));
}

#[test]
fn sarif_uris_are_relative_to_the_working_directory_and_carry_mechanical_fixes() {
    let d = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(fixture("device-index.py")).unwrap();
    let f = write(d.path(), "my jobs/train.py", &src);
    // An absolute path under the working directory is made relative, and percent-encoded.
    let (v, code) = json_in(Some(d.path()), &["-f", "sarif", f.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_sarif(&v);
    let res = &v["runs"][0]["results"][0];
    assert_eq!(res["ruleId"], "accelerator-device-index-statement");
    assert_eq!(res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "my%20jobs/train.py");
    let change = &res["fixes"][0]["artifactChanges"][0];
    assert_eq!(change["artifactLocation"]["uri"], "my%20jobs/train.py");
    let rep = &change["replacements"][0];
    assert_eq!(rep["insertedContent"]["text"], "set_device_index");
    // Applying the replacement gives the call that sets the device.
    let r = &rep["deletedRegion"];
    let line = r["startLine"].as_u64().unwrap() as usize;
    let (a, b) = (r["startColumn"].as_u64().unwrap() as usize, r["endColumn"].as_u64().unwrap() as usize);
    let text = src.lines().nth(line - 1).unwrap();
    let fixed: String =
        text.chars().take(a - 1).chain("set_device_index".chars()).chain(text.chars().skip(b - 1)).collect();
    assert_eq!(fixed.trim(), "torch.accelerator.set_device_index(local_rank)");
    // A path outside the working directory stays absolute, as a file URI.
    let other = tempfile::tempdir().unwrap();
    let (v, _) = json_in(Some(other.path()), &["-f", "sarif", f.to_str().unwrap()]);
    let uri =
        v["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap();
    assert!(uri.starts_with("file:///") && uri.ends_with("my%20jobs/train.py"), "{uri}");
}

#[test]
fn a_fix_inserts_the_barrier_with_the_statements_indentation() {
    let (v, _) = json(&[fixture("torchtitan-train.py").to_str().unwrap(), "-f", "json", "--torch", "2.5.1"]);
    let i = v["findings"].as_array().unwrap().iter().position(|f| f["rule"] == "no-barrier-before-destroy").unwrap();
    let fix = v["fixes"].as_array().unwrap().iter().find(|x| x["finding"] == i).expect("a fix for the finding");
    let e = &fix["replacements"][0];
    assert_eq!(e["start_column"], 1);
    assert_eq!(e["start_line"], e["end_line"]);
    let text = e["text"].as_str().unwrap();
    assert!(text.trim_start().starts_with("torch.distributed.barrier()") && text.ends_with('\n'), "{text:?}");
    assert!(text.starts_with("            "), "indented as the destroy: {text:?}");
}

#[test]
fn a_file_declaring_latin_1_is_read_in_it() {
    let d = tempfile::tempdir().unwrap();
    let mut bytes =
        b"# -*- coding: latin-1 -*-\n# r\xe9sum\xe9 of the job\nimport torch.distributed as dist\n\n".to_vec();
    bytes.extend_from_slice(
        b"def main():\n    dist.init_process_group('nccl')  # caf\xe9\n\nif __name__ == '__main__':\n    main()\n",
    );
    let f = d.path().join("latin.py");
    std::fs::write(&f, &bytes).unwrap();
    let (v, code) = json(&[f.to_str().unwrap(), "-f", "json"]);
    assert!(v["errors"].as_array().unwrap().is_empty(), "{}", v["errors"]);
    assert_eq!(code, 1);
    let f0 = &v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "destroy-missing").unwrap()["evidence"][0];
    assert_eq!(f0["line"], 6);
    assert_eq!(f0["text"], "dist.init_process_group('nccl')  # caf\u{e9}");
    // Declared but unknown to lint: an error naming the encoding.
    std::fs::write(&f, b"# coding: shift_jis\nx = 1\n").unwrap();
    let (v, code) = json(&[f.to_str().unwrap(), "-f", "json"]);
    assert_eq!(code, 2);
    assert!(v["errors"][0]["text"].as_str().unwrap().contains("shift_jis"));
}

#[test]
fn a_message_quotes_the_whole_call() {
    let d = tempfile::tempdir().unwrap();
    let f = write(
        d.path(),
        "t.py",
        "import torch.distributed as dist\n\ndef main(rank, n):\n    dist.init_process_group(\n        backend=\"nccl\",\n        rank=rank,\n        world_size=n,\n    )\n\nif __name__ == \"__main__\":\n    main(0, 1)\n",
    );
    let (v, _) = json(&[f.to_str().unwrap(), "-f", "json"]);
    let f0 = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "destroy-missing").unwrap();
    let ctx = f0["context"].as_str().unwrap();
    assert!(ctx.starts_with("`dist.init_process_group(backend=\"nccl\", rank=rank, world_size=n,)` is never"), "{ctx}");
}

#[test]
fn many_files_give_the_same_report_every_time() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..40 {
        std::fs::copy(
            fixture(if i % 2 == 0 { "rank-exit.py" } else { "never-destroyed.py" }),
            d.path().join(format!("m{i:02}.py")),
        )
        .unwrap();
    }
    let (a, _) = json(&[d.path().to_str().unwrap(), "-f", "json"]);
    let (b, _) = json(&[d.path().to_str().unwrap(), "-f", "json"]);
    assert_eq!(a, b);
    assert_eq!(a["files"].as_array().unwrap().len(), 40);
    assert_eq!(a["files"][0].as_str().unwrap(), d.path().join("m00.py").to_str().unwrap());
}
