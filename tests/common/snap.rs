//! Snapshot files (tests/snapshots/NAME.snap: a `---` header, then the expected text): the output
//! with its unstable parts replaced by the filters must equal the file's body, trailing blank
//! lines aside. `EPDOCTOR_BLESS=1` writes the file instead (then review `git diff`).

use std::path::PathBuf;

use regex::Regex;

/// (regex, replacement), applied in order to the text before it is compared.
pub type Filters = Vec<(String, String)>;

/// The filters every snapshot takes: the version epdoctor prints.
pub fn version_filters() -> Filters {
    vec![
        (r"epdoctor \d+\.\d+\.\d+".into(), "epdoctor [VERSION]".into()),
        (r#""tool_version": "[^"]+""#.into(), r#""tool_version": "[VERSION]""#.into()),
    ]
}

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(format!("{name}.snap"))
}

fn normal(s: &str) -> String {
    s.replace("\r\n", "\n").trim_end().to_string()
}

pub fn assert_snapshot(name: &str, text: &str, filters: &Filters) {
    let mut got = text.to_string();
    for (re, rep) in filters {
        got = Regex::new(re).unwrap().replace_all(&got, rep.as_str()).into_owned();
    }
    let file = path(name);
    if std::env::var_os("EPDOCTOR_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&file, format!("---\nsource: tests/suite/snapshots.rs\n---\n{}\n", normal(&got))).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (EPDOCTOR_BLESS=1 writes it)", file.display()));
    let body = stored
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map(|(_, body)| body)
        .unwrap_or_else(|| panic!("{}: no `---` header", file.display()));
    let (want, got) = (normal(body), normal(&got));
    if want != got {
        let at = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "snapshot {} differs from line {} on (EPDOCTOR_BLESS=1 rewrites it)\n--- stored\n{}\n--- now\n{}",
            file.display(),
            at + 1,
            want.lines().skip(at).take(8).collect::<Vec<_>>().join("\n"),
            got.lines().skip(at).take(8).collect::<Vec<_>>().join("\n"),
        );
    }
}
