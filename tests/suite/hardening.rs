//! Hostile inputs (issue 8): whatever a pasted log, a folder or a pipe holds, `explain` must not
//! crash, hang, leak memory or lie. Each test drives the real binary.
//!
//! Memory bounds are asserted from the child's peak RSS as the kernel reports it to `wait4`
//! (deterministic, unlike timing). Time limits below only guard against hangs; they are generous
//! multiples of the real run time and never a measurement.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::common::cmd::Command;

/// A hang guard, not a measurement: far above what any of these runs needs, even in a debug build
/// on a loaded two-core machine.
const HANG: Duration = Duration::from_secs(120);

use crate::common;
use crate::common::{guard, std_epdoctor, wait_with_peak_rss, ABORT_PAIR};

fn epdoctor() -> Command {
    let mut c = common::epdoctor();
    c.timeout(HANG);
    c
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}), exit {}:\n{}\n{}", self.code, self.stdout, self.stderr))
    }
}

fn run(args: &[&std::ffi::OsStr]) -> Out {
    let o = epdoctor().args(args).output().expect("epdoctor ran (and did not hang)");
    Out {
        code: o.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8(o.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(o.stderr).expect("stderr is UTF-8"),
    }
}

fn explain_json(paths: &[&Path]) -> Out {
    let mut args: Vec<&std::ffi::OsStr> = vec!["explain".as_ref(), "--format".as_ref(), "json".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    run(&args)
}

// ---------------------------------------------------------------------------------------------
// 0 bytes

#[test]
fn zero_bytes_in_every_form() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, b"").unwrap();
    // A valid gzip stream and a valid zstd frame of nothing.
    let gz = dir.path().join("empty.gz");
    std::fs::write(&gz, flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()).finish().unwrap())
        .unwrap();
    let zst = dir.path().join("empty.zst");
    std::fs::write(&zst, zstd::encode_all(&b""[..], 3).unwrap()).unwrap();
    for p in [&empty, &gz, &zst] {
        // Nothing read is never `clean`: unknown, saying so.
        let o = explain_json(&[p]);
        assert_eq!((o.code, o.json()["verdict"].as_str().unwrap()), (3, "unknown"), "{}: {}", p.display(), o.stderr);
        assert_eq!(o.json()["inputs"][0]["lines"], 0);
        assert!(o.json()["unread"].to_string().contains("nothing was read"), "{}", o.stdout);
    }
    // A folder of empty files, and an empty stdin, in every format.
    let folder = dir.path().join("ranks");
    std::fs::create_dir(&folder).unwrap();
    for i in 0..4 {
        std::fs::write(folder.join(format!("rank{i}.log")), b"").unwrap();
    }
    assert_eq!(explain_json(&[&folder]).json()["inputs"].as_array().unwrap().len(), 4);
    for format in ["text", "md", "json"] {
        epdoctor().args(["explain", "--format", format]).write_stdin("").assert().code(3);
    }
}

// ---------------------------------------------------------------------------------------------
// NUL bytes and invalid UTF-8

#[test]
fn nul_bytes_are_dropped_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nul.log");
    let mut data = Vec::new();
    data.extend_from_slice(b"\0\0\0\0\n");
    data.extend_from_slice(&vec![0u8; 100_000]);
    data.extend_from_slice(b"\nvm:1:2 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive\0 type from localRank 0, res=3, closed=0\n");
    data.extend_from_slice(b"\0vm:1:2 [0] misc/y.cc:3 NCCL WARN half\0a line\0\n");
    std::fs::write(&p, &data).unwrap();
    for format in ["text", "md", "json"] {
        let o = run(&["explain".as_ref(), "--format".as_ref(), format.as_ref(), p.as_os_str()]);
        assert!([0, 1, 3].contains(&o.code), "{format}: exit {} {}", o.code, o.stderr);
        assert!(!o.stdout.contains('\0'), "{format}: a NUL byte reached the output");
        if format == "json" {
            let v = o.json();
            assert_eq!(v["inputs"][0]["lines"], 4);
            assert!(o.stdout.contains("Could not receive type"), "NUL removed, line matched: {}", o.stdout);
        }
    }
    // A sparse file: 64 MiB of NUL bytes and no newline at all.
    let sparse = dir.path().join("sparse.log");
    std::fs::File::create(&sparse).unwrap().set_len(64 << 20).unwrap();
    let o = explain_json(&[&sparse]);
    // NUL bytes only: read, but not text, so never `clean`.
    assert_eq!((o.code, o.json()["verdict"].as_str().unwrap()), (3, "unknown"));
    assert!(o.stdout.contains("longer than 1 MiB were cut"));
    assert!(o.json()["unread"].to_string().contains("does not look like text"), "{}", o.stdout);
}

#[test]
fn invalid_utf8_anywhere_gives_valid_utf8_output() {
    let dir = tempfile::tempdir().unwrap();
    // A file name that is not UTF-8, and lines with bad bytes in the rank prefix, the host, the
    // message, overlong encodings, encoded surrogates and a lone continuation byte.
    let name = std::ffi::OsStr::from_bytes(b"rank\xff\xfe0.log");
    let p = dir.path().join(name);
    std::fs::write(
        &p,
        b"[rank\xc0\xaf1]:[W1129 13:54:38.758 ProcessGroupNCCL.cpp:1575] bad \xed\xa0\x80 surrogate\n\
          h\xffst:1:2 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0 \x80\n\
          \xf8\x88\x80\x80\x80 five-byte form\n\
          vm:1:2 [0] misc/z.cc:9 NCCL WARN truncated multibyte \xe2\x82\n",
    )
    .unwrap();
    for format in ["text", "md", "json"] {
        // `run` asserts that stdout and stderr are UTF-8.
        let o = run(&["explain".as_ref(), "--format".as_ref(), format.as_ref(), p.as_os_str()]);
        assert!([0, 1, 3].contains(&o.code), "{format}: exit {} {}", o.code, o.stderr);
        assert!(o.stdout.contains('\u{fffd}'), "{format}: bad bytes become U+FFFD:\n{}", o.stdout);
    }
    // The folder form reaches the same file through the directory walk.
    let o = explain_json(&[dir.path()]);
    assert_eq!(o.json()["inputs"].as_array().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Truncated and corrupt gzip / zstd: a clear error naming the file, or a partial result with a note.

#[test]
fn truncated_and_corrupt_compressed_inputs_never_hang() {
    let log = std::fs::read("examples/deepep-intranode-teardown.log").unwrap().repeat(40);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&log).unwrap();
    let gz = enc.finish().unwrap();
    let zst = zstd::encode_all(&log[..], 3).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for (kind, full) in [("gz", &gz), ("zst", &zst)] {
        // (Fewer than 4 bytes of a zstd frame are not its magic number: that file is plain text.)
        let first = if kind == "zst" { 4 } else { 2 };
        for cut in [first, 5, 10, 12, 20, full.len() / 3, full.len() / 2, full.len() - 1] {
            cases.push((format!("{kind}-cut-{cut}"), full[..cut.min(full.len())].to_vec()));
        }
        let mut flipped = full.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        flipped[mid + 1] ^= 0x55;
        cases.push((format!("{kind}-flipped"), flipped));
        let mut trailing = full.clone();
        trailing.extend_from_slice(b"trailing garbage that is not a second member\n");
        cases.push((format!("{kind}-trailing"), trailing));
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in &cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let o = explain_json(&[&p]);
        match o.code {
            2 => assert!(o.stderr.contains(name.as_str()), "{name}: the error names the file: {}", o.stderr),
            0 | 1 | 3 => {
                let v = o.json();
                let lines = v["inputs"][0]["lines"].as_u64().unwrap();
                let complete = lines == log.iter().filter(|&&b| b == b'\n').count() as u64;
                let noted = v["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains(name.as_str()));
                assert!(complete || noted, "{name}: a partial read must say so: {}", o.stdout);
            }
            c => panic!("{name}: exit {c}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A folder of 10 000 files, and symlink loops.

#[test]
fn folder_of_ten_thousand_files() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..10_000 {
        let body = if i == 7777 { ABORT_PAIR.to_string() } else { format!("vm:{i}:1 [0] NCCL INFO rank {i} ok\n") };
        std::fs::write(dir.path().join(format!("rank{i:05}.log")), body).unwrap();
    }
    let o = explain_json(&[dir.path()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = o.json();
    assert_eq!(v["inputs"].as_array().unwrap().len(), 10_000);
    assert_eq!(v["verdict"], "benign");
    assert!(v["primary"]["evidence"][0]["source"].as_str().unwrap().ends_with("rank07777.log"));
}

#[test]
fn symlink_loops_do_not_trap_the_walk() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("logs");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/rank0.log"), ABORT_PAIR).unwrap();
    symlink(".", d.join("self")).unwrap();
    symlink("..", d.join("sub/up")).unwrap();
    symlink(&d, d.join("sub/abs")).unwrap();
    symlink("a", d.join("b")).unwrap();
    symlink("b", d.join("a")).unwrap();
    symlink("nowhere", d.join("dangling")).unwrap();
    let o = explain_json(&[&d]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = o.json();
    assert_eq!(v["inputs"].as_array().unwrap().len(), 1, "{}", o.stdout);
    assert_eq!(v["verdict"], "benign");
    // Through the looping link itself: a folder reached by a link is read once, not forever.
    assert_eq!(explain_json(&[&d.join("self")]).json()["inputs"].as_array().unwrap().len(), 1);
    // A link loop named directly is an error that names it.
    for name in ["a", "dangling"] {
        let o = explain_json(&[&d.join(name)]);
        assert_eq!(o.code, 2);
        assert!(o.stderr.contains(d.join(name).to_str().unwrap()), "{}", o.stderr);
    }
}

// ---------------------------------------------------------------------------------------------
// A stdin that never ends: --max-bytes stops it, with or without newlines.

fn endless_stdin(line: &'static [u8], max_bytes: &str) -> (i32, serde_json::Value, u64) {
    let mut child = std_epdoctor()
        .args(["explain", "--max-bytes", max_bytes, "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stop = guard(&child, HANG);
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // Writes until the reader is gone (EPIPE): the stream has no end of its own.
        let mut sent = 0u64;
        while stdin.write_all(line).is_ok() {
            sent += line.len() as u64;
        }
        sent
    });
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let (code, _) = wait_with_peak_rss(&mut child);
    let _ = stop.send(());
    let sent = writer.join().unwrap();
    (code, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")), sent)
}

#[test]
fn endless_stdin_stops_at_max_bytes() {
    let (code, v, sent) = endless_stdin(b"host:1:2 [0] NCCL INFO chatter\n", "300000");
    // What was not read may hold the failure: unknown.
    assert_eq!(code, 3);
    assert_eq!(v["verdict"], "unknown");
    assert!(sent >= 300_000);
    let bytes = v["inputs"][0]["bytes"].as_u64().unwrap();
    assert!(bytes <= 300_000, "read {bytes} bytes past --max-bytes 300000");
    assert!(v["notes"].to_string().contains("--max-bytes"), "{v}");
}

#[test]
fn endless_stdin_without_newlines_stops_at_max_bytes() {
    // One line that never ends: the limit must hold inside a line too.
    let (code, v, _) = endless_stdin(b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "5000000");
    assert_eq!(code, 3);
    assert!(v["inputs"][0]["bytes"].as_u64().unwrap() <= 5_000_000, "{v}");
    assert!(v["notes"].to_string().contains("--max-bytes"), "{v}");
}

#[test]
fn dev_zero_stops_at_max_bytes() {
    let o = run(&[
        "explain".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--max-bytes".as_ref(),
        "3000000".as_ref(),
        "/dev/zero".as_ref(),
    ]);
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert!(o.json()["inputs"][0]["bytes"].as_u64().unwrap() <= 3_000_000);
}

// ---------------------------------------------------------------------------------------------
// Rule files: every mistake is an error that names the file and the line or the rule.

const GOOD_RULE: &str = "[[rule]]\nid = \"my-rule\"\ntitle = \"t\"\ncategory = \"c\"\nseverity = \"error\"\npatterns = ['boom \\d+']\nroot_cause = \"r\"\nfix = \"f\"\n";

fn rule_error(files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        paths.push(p.to_str().unwrap().to_string());
    }
    let out = epdoctor()
        .args(["explain", "--rules", &paths.join(":"), "examples/deepep-intranode-teardown.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad rule file is exit 2");
    assert!(out.stdout.is_empty(), "no verdict printed from a bad rule base");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn rule_file_errors_name_file_and_line_or_id() {
    // Invalid TOML: file and line.
    let e = rule_error(&[("broken.toml", "[[rule]]\nid = \"x\"\ntitle = \"unterminated\n")]);
    assert!(e.contains("broken.toml") && e.contains("line 3"), "{e}");
    // Unknown field: file, line and the field.
    let e = rule_error(&[("unknown.toml", &GOOD_RULE.replace("fix = \"f\"", "fix = \"f\"\nsevirity = \"x\""))]);
    assert!(e.contains("unknown.toml") && e.contains("line 9") && e.contains("sevirity"), "{e}");
    // Wrong type: file and line.
    let e = rule_error(&[("types.toml", &GOOD_RULE.replace("patterns = ['boom \\d+']", "patterns = 'boom'"))]);
    assert!(e.contains("types.toml") && e.contains("line 6"), "{e}");
    // Bad regex: file, rule id and which pattern.
    let e = rule_error(&[("regex.toml", &GOOD_RULE.replace("boom \\d+", "boom (\\d+"))]);
    assert!(e.contains("regex.toml") && e.contains("my-rule") && e.contains("pattern 1"), "{e}");
    // A regex too big to compile is the same kind of error, not a hang or an abort.
    let e = rule_error(&[("huge.toml", &GOOD_RULE.replace("boom \\d+", "(\\w{500}){500}"))]);
    assert!(e.contains("huge.toml") && e.contains("my-rule"), "{e}");
    // Duplicate id in one file: file and id.
    let e = rule_error(&[("dup.toml", &format!("{GOOD_RULE}\n{GOOD_RULE}"))]);
    assert!(e.contains("dup.toml") && e.contains("my-rule") && e.contains("twice"), "{e}");
    // Duplicate id across two user files: both files and the id.
    let e = rule_error(&[("one.toml", GOOD_RULE), ("two.toml", GOOD_RULE)]);
    assert!(e.contains("one.toml") && e.contains("two.toml") && e.contains("my-rule"), "{e}");
    // A dependency on a rule that does not exist, a bad version range, a match-everything pattern.
    let e = rule_error(&[("dep.toml", &GOOD_RULE.replace("fix = \"f\"", "fix = \"f\"\nrequires = [\"no-such\"]"))]);
    assert!(e.contains("dep.toml") && e.contains("my-rule") && e.contains("no-such"), "{e}");
    let e = rule_error(&[("range.toml", &GOOD_RULE.replace("fix = \"f\"", "fix = \"f\"\nnccl = \">=banana\""))]);
    assert!(e.contains("range.toml") && e.contains("my-rule") && e.contains("nccl"), "{e}");
    let e = rule_error(&[("all.toml", &GOOD_RULE.replace("boom \\d+", "x*"))]);
    assert!(e.contains("all.toml") && e.contains("my-rule"), "{e}");
    // A bad id, a file that is not UTF-8, an empty rule folder.
    let e = rule_error(&[("id.toml", &GOOD_RULE.replace("my-rule", "my rule!"))]);
    assert!(e.contains("id.toml") && e.contains("my rule!"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let bin_rule = dir.path().join("latin1.toml");
    std::fs::write(&bin_rule, b"[[rule]]\nid = \"caf\xe9\"\n").unwrap();
    let o = run(&[
        "explain".as_ref(),
        "--rules".as_ref(),
        bin_rule.as_os_str(),
        "examples/deepep-intranode-teardown.log".as_ref(),
    ]);
    assert!(o.code == 2 && o.stderr.contains("latin1.toml"), "{}", o.stderr);
    let empty = dir.path().join("empty-folder");
    std::fs::create_dir(&empty).unwrap();
    let o = run(&[
        "explain".as_ref(),
        "--rules".as_ref(),
        empty.as_os_str(),
        "examples/deepep-intranode-teardown.log".as_ref(),
    ]);
    assert!(o.code == 2 && o.stderr.contains("empty-folder"), "{}", o.stderr);
}

// ---------------------------------------------------------------------------------------------
// Output never runs anything from a log, and never passes terminal control sequences through.

#[test]
fn output_runs_nothing_and_passes_no_control_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let canary = dir.path().join("PWNED");
    let c = canary.display();
    let log = format!(
        "vm:1:2 [0] misc/a.cc:1 NCCL WARN $(touch {c}) `touch {c}` ; touch {c} | sh -c 'touch {c}'\n\
         vm:1:2 [0] misc/a.cc:2 NCCL WARN \x1b]0;title\x07 \x1b]52;c;Y2xpcGJvYXJk\x07 \x1b[2J\x1b[H \u{9b}31m C1 \x1bPq sixel\x1b\\ bell\x07\n\
         vm:1:2 [0] misc/a.cc:3 NCCL WARN {{{{7*7}}}} %n%s%x ${{IFS}} \u{202e}reversed\n"
    );
    // The file name carries escape sequences too.
    let p = dir.path().join("evil\x1b]0;owned\x07\x1b[31m.log");
    std::fs::write(&p, &log).unwrap();
    for format in ["text", "md", "json"] {
        let o = epdoctor().current_dir(dir.path()).args(["explain", "--format", format]).arg(&p).output().unwrap();
        let out = String::from_utf8(o.stdout).unwrap();
        assert_eq!(o.status.code(), Some(3), "{format}:\n{out}");
        assert!(out.contains("touch"), "{format}: the text is shown, not run");
        let ctl: Vec<char> = out
            .chars()
            .filter(|&c| c.is_control() && c != '\n' && c != '\t' && !(format == "json" && c == '\r'))
            .collect();
        assert!(ctl.is_empty(), "{format}: control characters {ctl:?} reached the output:\n{out}");
    }
    assert!(!canary.exists(), "something from the log was executed");
}

// ---------------------------------------------------------------------------------------------
// Markdown: log text cannot inject HTML, links, images or mentions into an issue.

/// The Markdown outside fenced code blocks, checking that every fence is closed.
fn outside_code_blocks(md: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<&str> = None;
    for l in md.lines() {
        match fence {
            Some(f) if l == f => fence = None,
            Some(_) => {}
            None if l.starts_with("```") => fence = Some(l.trim_end_matches("text")),
            None => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    assert!(fence.is_none(), "an unclosed code block:\n{md}");
    out
}

#[test]
fn markdown_neutralises_log_text() {
    let dir = tempfile::tempdir().unwrap();
    let evil = [
        "<img src=x onerror=alert(1)>",
        "</details><script>alert(1)</script>",
        "@octocat @org/team please look",
        "[click me](https://evil.example/phish) ![img](https://evil.example/t.png)",
        "https://evil.example/bare and www.evil.example",
        "``` closing the fence\n",
        "~~~",
        "<!-- hidden comment -->",
        "#1234 GH-1 fixes #1",
    ];
    let mut log = String::new();
    for (i, e) in evil.iter().enumerate() {
        log.push_str(&format!("vm:1:2 [0] misc/m.cc:{i} NCCL WARN {}\n", e.trim_end()));
    }
    log.push_str(ABORT_PAIR);
    // The file name is shown in notes and evidence too.
    let name = "<img src=x>@octocat[x](https:evil.example)``` www.evil.example.log";
    let p = dir.path().join(name);
    std::fs::write(&p, format!("{log}{}", "z".repeat(2 << 20))).unwrap();
    let o = epdoctor().args(["explain", "--format", "md", "--evidence", "9"]).arg(&p).output().unwrap();
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(md.contains("longer than 1 MiB"), "a note naming the file is part of the test:\n{md}");
    let prose = outside_code_blocks(&md);
    let lower = prose.to_ascii_lowercase();
    for bad in ["<img", "<script", "</details><", "<!--", "@octocat", "https://evil", "www.evil"] {
        assert!(!lower.contains(bad), "`{bad}` outside a code block:\n{prose}");
    }
    // No link or image syntax that is not escaped: every `](` comes as `\](`.
    for (i, _) in prose.match_indices("](") {
        assert!(prose[..i].ends_with('\\'), "an unescaped link outside a code block:\n{prose}");
    }
    // The evidence itself is still there to read, inside code blocks.
    assert!(md.contains("<img src=x onerror=alert(1)>"), "{md}");
}

// ---------------------------------------------------------------------------------------------
// Redaction in Markdown: hostnames, IPv4, IPv6, e-mail, home paths, tokens.

#[test]
fn markdown_redacts_identities_and_secrets() {
    let secrets = [
        "gpu-node-17.cluster.example",
        "gpu-node-18",
        "trainer-master",
        "c10d-store-host",
        "10.11.12.13",
        "192.168.7.200",
        "2001:db8:85a3::8a2e:370:7334",
        "2001:4860:4860:0000:0000:0000:0000:8888",
        "fe80::1ff:fe23:4567:890a",
        "::ffff:10.20.30.40",
        "alice.smith@example.com",
        "alice",
        "bob",
        "carol",
        "hf_abcdefghijklmnopqrstuvwxyz123456",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "sk-proj-abcdefghijklmnopqrstuvwx",
        "xoxb-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "s3cr3t-passw0rd",
        "Zm9vYmFyYmF6cXV4cXV1eA",
    ];
    let log = "\
gpu-node-17.cluster.example:2374:2994 [0] NCCL INFO Bootstrap : Using eth0:10.11.12.13<0>
gpu-node-17.cluster.example:2374:2994 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer gpu-node-18<41234>
[rank1]:[W1129 13:54:38.758212116 socket.cpp:752] [c10d] The client socket has failed to connect to [trainer-master]:29500 (errno: 111 - Connection refused).
[rank1]:[E1129 13:54:39.000000000 socket.cpp:1] [c10d] The client socket has timed out after 900s while trying to connect to (c10d-store-host, 29500). 192.168.7.200
vm:1:2 [0] misc/a.cc:1 NCCL WARN peers 2001:db8:85a3::8a2e:370:7334 [fe80::1ff:fe23:4567:890a%eth0]:29500 and 2001:4860:4860:0000:0000:0000:0000:8888
vm:1:2 [0] misc/a.cc:2 NCCL WARN mapped ::ffff:10.20.30.40 by alice.smith@example.com
vm:1:2 [0] misc/a.cc:3 NCCL WARN in /home/alice/run.py, /Users/bob/x and /data/home/carol/y
vm:1:2 [0] misc/a.cc:4 NCCL WARN env HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456 ghp_abcdefghijklmnopqrstuvwxyz0123456789 github_pat_11ABCDEFG0123456789_abcdefghijklmnop
vm:1:2 [0] misc/a.cc:5 NCCL WARN keys sk-proj-abcdefghijklmnopqrstuvwx xoxb-1234567890-abcdefghij AKIAIOSFODNN7EXAMPLE AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
vm:1:2 [0] misc/a.cc:6 NCCL WARN Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U
vm:1:2 [0] misc/a.cc:7 NCCL WARN config {\"password\": \"s3cr3t-passw0rd\", \"api_key\": \"Zm9vYmFyYmF6cXV4cXV1eA\"}
";
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rank0.log");
    std::fs::write(&p, log).unwrap();
    let o = epdoctor().args(["explain", "--format", "md", "--evidence", "9"]).arg(&p).output().unwrap();
    let md = String::from_utf8(o.stdout).unwrap();
    for s in secrets {
        assert!(!md.contains(s), "`{s}` leaked into the Markdown:\n{md}");
    }
    // What is not identifying survives: times, NCCL file:line, ports, loopback.
    for keep in ["13:54:38.758212116", "socket.cc:71", "29500", "misc/a.cc:4"] {
        assert!(md.contains(keep), "`{keep}` was redacted too:\n{md}");
    }
    assert!(md.contains("host-") && md.contains("ip-") && md.contains("ip6-") && md.contains("user-"), "{md}");
}

// ---------------------------------------------------------------------------------------------
// A reader that goes away (`epdoctor explain ... | head -1`): no panic, no error message.

#[test]
fn closed_stdout_is_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("many.log");
    let mut log = String::new();
    for i in 0..3000 {
        log.push_str(&format!("vm:1:2 [0] misc/q.cc:{i} NCCL WARN unexplained number {i}\n"));
    }
    std::fs::write(&p, log).unwrap();
    for format in ["text", "md", "json"] {
        let mut child = std_epdoctor()
            .args(["explain", "--unexplained", "--format", format])
            .arg(&p)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stop = guard(&child, HANG);
        drop(child.stdout.take()); // the reader is gone before the first byte
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let (code, _) = wait_with_peak_rss(&mut child);
        let _ = stop.send(());
        assert!(!err.contains("panicked"), "{format}: {err}");
        assert!(code == 0 || code == 3, "{format}: exit {code}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// No lies from caps: INFO lines a gated-out rule matched are not "unexplained warnings", however
// many there are (only a sample of 32 is kept per group).

#[test]
fn gated_out_info_lines_are_not_unexplained_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("old.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nid = \"old-chatter\"\ntitle = \"t\"\ncategory = \"c\"\nseverity = \"warning\"\nnccl = \"<2.0\"\n\
         if_version_unknown = false\npatterns = ['chatter number \\d+']\nroot_cause = \"r\"\nfix = \"f\"\n",
    )
    .unwrap();
    let mut log = String::from("vm:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda13.0\n");
    for i in 0..100 {
        log.push_str(&format!("vm:1:1 [0] NCCL INFO chatter number {i}\n"));
    }
    log.push_str("vm:1:1 [0] misc/x.cc:1 NCCL WARN chatter number 100\n");
    let p = dir.path().join("rank0.log");
    std::fs::write(&p, log).unwrap();
    let o = run(&[
        "explain".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--rules".as_ref(),
        rules.as_os_str(),
        p.as_os_str(),
    ]);
    let v = o.json();
    assert_eq!(v["verdict"], "unknown", "{}", o.stdout);
    assert_eq!(v["unexplained"].as_array().unwrap().len(), 1, "only the WARN line: {}", o.stdout);
    assert!(!v["notes"].to_string().contains("unexplained warning/error lines in all"), "{}", o.stdout);
}
