//! Whole jobs as users feed them to `explain` (issue 11): a folder of per-rank files, the same files
//! named one by one in every order, one `srun --label` stream, a `.tar.gz` of them. Each case is a
//! folder under tests/fixtures/job/ with its logs (real fragments of public threads, cited in its
//! case.toml) and what a practitioner must be told.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    source: String,
    summary: String,
    verdict: String,
    /// Substring of the primary's first evidence line.
    primary: Option<String>,
    primary_rule: Option<String>,
    primary_rank: Option<u32>,
    /// The primary's line belongs to no rank (a launcher's own line).
    #[serde(default)]
    primary_unranked: bool,
    outcome: Option<String>,
    /// At least this many unrelated Python warnings, counted apart.
    unrelated_min: Option<u64>,
    /// Also name the files one by one, in several orders: the result must not change.
    #[serde(default)]
    permute: bool,
    /// Also feed them as one stream, each line behind `srun --label`'s `N: ` (files `rankN.*`).
    #[serde(default)]
    srun_label: bool,
    /// Also feed them packed in a `.tar.gz`.
    #[serde(default)]
    archive: bool,
}

fn cases() -> Vec<(PathBuf, Case)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/job");
    let mut out: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let text = std::fs::read_to_string(p.join("case.toml")).unwrap();
            let case: Case = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!case.source.is_empty() && !case.summary.is_empty(), "{}: cite the source", p.display());
            (p, case)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty());
    out
}

fn logs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "case.toml"))
        .collect();
    v.sort();
    v
}

fn explain(args: &[&Path]) -> Value {
    let out = common::epdoctor().arg("explain").args(args).args(["--format", "json"]).output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn check(name: &str, how: &str, v: &Value, c: &Case) {
    let at = format!("{name} ({how})");
    assert_eq!(v["verdict"], c.verdict.as_str(), "{at}: {v:#}");
    let p = &v["primary"];
    if let Some(s) = &c.primary {
        let text = p["evidence"][0]["text"].as_str().unwrap_or("");
        assert!(text.contains(s.as_str()), "{at}: primary line {text:?} lacks {s:?}");
    }
    if let Some(r) = &c.primary_rule {
        assert_eq!(p["rule"], r.as_str(), "{at}");
    }
    if let Some(r) = c.primary_rank {
        assert_eq!(p["evidence"][0]["rank"], r, "{at}: {p:#}");
    }
    if c.primary_unranked {
        assert!(p["evidence"][0]["rank"].is_null(), "{at}: {p:#}");
    }
    if let Some(o) = &c.outcome {
        assert_eq!(v["outcome"]["status"], o.as_str(), "{at}");
    }
    if let Some(n) = c.unrelated_min {
        assert!(v["unrelated"]["count"].as_u64().unwrap() >= n, "{at}: {:#}", v["unrelated"]);
    }
}

/// What must not depend on how the files were handed over (their names stay the same).
fn core(v: &Value) -> (Value, Value, Value) {
    (v["verdict"].clone(), v["primary"].clone(), v["findings"].clone())
}

#[test]
fn jobs_as_users_feed_them() {
    for (dir, c) in cases() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let files = logs(&dir);
        let whole = explain(&[&dir]);
        check(&name, "a folder", &whole, &c);
        if c.permute {
            let n = files.len();
            for k in 0..n {
                let mut order: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
                order.rotate_left(k);
                if k % 2 == 1 {
                    order.reverse();
                }
                let v = explain(&order);
                assert_eq!(core(&v), core(&whole), "{name}: order {order:?} changed the result");
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        if c.srun_label {
            // srun interleaves the tasks' lines; each keeps its `N: ` label.
            let mut per: Vec<(u32, Vec<String>)> = files
                .iter()
                .map(|f| {
                    let stem = f.file_stem().unwrap().to_string_lossy();
                    let rank: u32 = stem.trim_start_matches("rank").parse().expect("srun_label needs rankN.* files");
                    (rank, std::fs::read_to_string(f).unwrap().lines().map(str::to_string).collect())
                })
                .collect();
            per.sort();
            let mut s = String::new();
            let most = per.iter().map(|p| p.1.len()).max().unwrap_or(0);
            for i in 0..most {
                for (r, lines) in &per {
                    if let Some(l) = lines.get(i) {
                        s.push_str(&format!("{r}: {l}\n"));
                    }
                }
            }
            let f = tmp.path().join("job.out");
            std::fs::write(&f, s).unwrap();
            check(&name, "one srun --label stream", &explain(&[&f]), &c);
        }
        if c.archive {
            let f = tmp.path().join("logs.tar.gz");
            let gz = flate2::write::GzEncoder::new(std::fs::File::create(&f).unwrap(), flate2::Compression::fast());
            let mut t = tar::Builder::new(gz);
            for p in &files {
                t.append_path_with_name(p, format!("job/{}", p.file_name().unwrap().to_string_lossy())).unwrap();
            }
            t.into_inner().unwrap().finish().unwrap().flush().unwrap();
            check(&name, "a .tar.gz", &explain(&[&f]), &c);
        }
    }
}

/// Issue 38, point 4: the bundled examples are two unrelated runs (and a script). Read together,
/// the DeepEP log must not borrow the H200 run's success markers: it stays `unknown` on its own,
/// the H200 one `benign`, and the whole is the worst of them.
#[test]
fn unrelated_files_are_explained_as_jobs_of_their_own() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let deepep = root.join("deepep-intranode-teardown.log");
    let h200 = root.join("h200-nccl-2.22.3-abort-teardown.log");
    let alone = |p: &Path| explain(&[p])["verdict"].clone();
    assert_eq!(alone(&deepep), "unknown");
    assert_eq!(alone(&h200), "benign");
    let v = explain(&[deepep.as_path(), h200.as_path()]);
    assert_eq!(v["verdict"], "unknown", "{v:#}");
    let jobs = v["jobs"].as_array().expect("two jobs");
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["verdict"], "unknown");
    assert_eq!(jobs[1]["verdict"], "benign");
    assert!(jobs[1]["outcome"]["status"] == "succeeded" && v["outcome"]["status"] == "unknown", "{v:#}");
    let out = common::epdoctor().arg("explain").args([&deepep, &h200]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("job 1 of 2") && text.contains("job 2 of 2"), "{text}");
    // Rank-named siblings of one folder stay one job (no `jobs` list).
    let ranks = logs(&root.parent().unwrap().join("tests/fixtures/job/culprit-oom-among-timeouts"));
    let one = explain(&ranks.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    assert!(one.get("jobs").is_none(), "{one:#}");
}

/// Issue 38, point 7: a 131,072-rank job, every rank's init line interleaved in one stream, then
/// one rank's OOM and 2,000 peers' closed sockets. The culprit's rank is named (the (host, pid)
/// map once stopped at 65,536 entries) and the peers' ranks are shown as ranges.
#[test]
fn the_culprit_of_a_131072_rank_job_is_named() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("job.log");
    let culprit = 100_003;
    common::big_job_log(131_072, culprit, 2_000, std::io::BufWriter::new(std::fs::File::create(&path).unwrap()));
    let v = explain(&[path.as_path()]);
    let p = &v["primary"];
    assert!(p["evidence"][0]["text"].as_str().unwrap().contains("out of memory"), "{p:#}");
    assert_eq!(p["evidence"][0]["rank"], culprit, "{p:#}");
    let peers = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] != p["rule"]).expect("the peers' finding");
    assert_eq!(peers["ranks"].as_array().unwrap().len(), 2_000, "{:#}", peers["rule"]);
    let out = common::epdoctor().arg("explain").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("rank {culprit}")) || text.contains(&format!("[{culprit}]")), "{text}");
}
