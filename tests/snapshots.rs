//! Snapshots of every output format of `explain`, and of repro's report.md and report's document,
//! on fixed inputs and a fixed rule set (tests/fixtures/snap/), with unstable parts (version,
//! paths, times) filtered. env's Markdown is snapshotted in src/commands/env.rs on a fixed machine.

mod common;

fn explain(format: &str, extra: &[&str]) -> String {
    let out = common::epdoctor()
        .args(["explain", "--no-builtin-rules", "--rules", "tests/fixtures/snap/rules.toml", "--format", format])
        .args(extra)
        .arg("tests/fixtures/snap/two-ranks.log")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(r"epdoctor \d+\.\d+\.\d+", "epdoctor [VERSION]");
    s.add_filter(r#""tool_version": "[^"]+""#, r#""tool_version": "[VERSION]""#);
    s
}

#[test]
fn text() {
    settings().bind(|| insta::assert_snapshot!(explain("text", &[])));
}

#[test]
fn markdown_redacted() {
    settings().bind(|| insta::assert_snapshot!(explain("md", &[])));
}

#[test]
fn json() {
    settings().bind(|| insta::assert_snapshot!(explain("json", &[])));
}

/// A repro run of tests/fixtures/snap/repro-cmd.sh under a two-value axis, with the snapshot rules.
fn repro_run(dir: &std::path::Path) -> std::path::PathBuf {
    let run = dir.join("run");
    let out = common::std_epdoctor()
        .env_remove("NCCL_DEBUG")
        .env_remove("NCCL_DEBUG_FILE")
        .args(["repro", "-q", "--no-builtin-rules", "--rules", "tests/fixtures/snap/rules.toml", "--out"])
        .arg(&run)
        .args(["--env", "MODE=ok,fail", "--", "sh", "tests/fixtures/snap/repro-cmd.sh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    run
}

/// Times, dates and the temporary folder vary from run to run.
fn repro_settings(tmp: &std::path::Path) -> insta::Settings {
    let mut s = settings();
    s.add_filter(&regex_escape(&tmp.display().to_string()), "[TMP]");
    s.add_filter(r"\(rev [^)]+\)", "(rev [REV])");
    s.add_filter(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "started [DATE]");
    s.add_filter(r"wall \d+\.\d s", "wall [S] s");
    s.add_filter(r"\| \d+\.\d \|", "| [S] |");
    s
}

fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '/' { c.to_string() } else { format!("\\{c}") }).collect()
}

#[test]
fn repro_markdown() {
    let d = tempfile::tempdir().unwrap();
    let run = repro_run(d.path());
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    repro_settings(d.path()).bind(|| insta::assert_snapshot!(md));
}

#[test]
fn report_markdown_up_to_the_environment() {
    let d = tempfile::tempdir().unwrap();
    let run = repro_run(d.path());
    // NCCL_DEBUG unset: its check warns, so the checks line is there on every machine.
    let out = common::epdoctor()
        .env_remove("NCCL_DEBUG")
        .args(["report", "--python-timeout", "5", "--no-builtin-rules", "--rules", "tests/fixtures/snap/rules.toml"])
        .arg("tests/fixtures/snap/two-ranks.log")
        .arg("--repro")
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8(out.stdout).unwrap();
    // The environment section describes the machine the test runs on; env's own snapshot covers it.
    let md = md.split("\n## Environment").next().unwrap().to_string();
    let mut s = repro_settings(d.path());
    s.add_filter(r"- the machine `epdoctor report` ran on: .*", "- the machine `epdoctor report` ran on: [MACHINE]");
    s.add_filter(
        r"- environment checks to look at \(that machine\): .*",
        "- environment checks to look at (that machine): [CHECKS]",
    );
    s.bind(|| insta::assert_snapshot!(md));
}
