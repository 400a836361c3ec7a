//! Snapshots of every output format of `explain`, on a fixed input and a fixed rule set
//! (tests/fixtures/snap/), with unstable parts (version, paths) filtered.

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
