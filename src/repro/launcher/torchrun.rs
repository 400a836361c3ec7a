//! `--launcher torchrun`: each cell runs one torchrun agent with `--log-dir <cell>/torchrun
//! --redirects 3`, so every rank's stdout and stderr is a file of its own
//! (`<run>/attempt_N/<local_rank>/{stdout,stderr}.log`), and the error file torchelastic gives each
//! rank (TORCHELASTIC_ERROR_FILE, `.../error.json`) is read into the cell. `--no-python`: the
//! workload or your command is started as it is (write `-- python3 train.py`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use super::{CellCtx, Finish, LaunchConfig, Launcher, Ranks};
use crate::model::run::{LauncherOut, RankError};
use crate::repro::launch::{Execution, Spec, HARNESS_PREFIX};
use regex::Regex;

/// The agent's `--log-dir`, under the cell folder.
pub const LOG_DIR: &str = "torchrun";

pub struct Torchrun {
    pub cfg: LaunchConfig,
    /// `--ranks` as given.
    pub ranks_flag: Option<usize>,
}

impl Launcher for Torchrun {
    fn describe(&self) -> Option<LauncherOut> {
        let args = agent_args(&self.cfg, Path::new("<cell>"), self.ranks_flag);
        let command = std::iter::once("torchrun".to_string())
            .chain(args.into_iter().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        Some(LauncherOut::Torchrun { command })
    }

    /// One agent, a local process in its own group (signals to the group reach torchrun, which
    /// stops its workers).
    fn start(&self, cell: &CellCtx) -> anyhow::Result<Vec<Spec>> {
        let (program, workload_args, env) = cell.work.one_program(cell.dir);
        let mut args = agent_args(&self.cfg, cell.dir, cell.ranks);
        args.push(program);
        args.extend(workload_args);
        Ok(vec![Spec {
            label: "torchrun".into(),
            program: "torchrun".into(),
            args,
            env,
            log: cell.dir.join("torchrun.log"),
            stopper: None,
        }])
    }

    fn finish(&self, cell: &CellCtx, specs: &[Spec], ex: &Execution) -> Finish {
        let rank_errors = rank_errors(cell.dir);
        let notes = rank_errors
            .iter()
            .map(|e| {
                format!(
                    "{HARNESS_PREFIX} local_rank={} attempt={} error file {}: {}",
                    e.local_rank, e.attempt, e.file, e.message
                )
            })
            .collect();
        Finish {
            processes: super::processes_of(specs, ex),
            launch: crate::model::run::CellLaunch { rank_errors, ..Default::default() },
            stop_lines: Vec::new(),
            notes,
        }
    }

    fn ranks(&self) -> Ranks {
        Ranks::Markers
    }
}

/// `torchrun ... --no-python PROGRAM ARGS`: the agent's arguments, before the workload's.
pub fn agent_args(l: &LaunchConfig, cell_dir: &Path, ranks: Option<usize>) -> Vec<OsString> {
    let per_node = l.ntasks_per_node.or(ranks).unwrap_or(2);
    let mut a: Vec<String> = vec![format!("--nnodes={}", l.nodes.unwrap_or(1)), format!("--nproc-per-node={per_node}")];
    match &l.rdzv_endpoint {
        Some(e) => a.extend(["--rdzv-backend=c10d".to_string(), format!("--rdzv-endpoint={e}")]),
        // One node, a rendezvous on a free local port.
        None => a.push("--standalone".into()),
    }
    a.push(format!("--log-dir={}", cell_dir.join(LOG_DIR).display()));
    a.extend(["--redirects=3".to_string(), "--no-python".to_string()]);
    a.into_iter().map(OsString::from).collect()
}

/// One rank's file in the agent's log tree.
#[derive(Debug, Clone, PartialEq)]
pub struct RankFile {
    pub attempt: u32,
    pub local_rank: usize,
    pub path: PathBuf,
}

static RANK_FILE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|/)attempt_(\d+)/(\d+)/(?:stdout|stderr)\.log$").unwrap());

/// Every rank's stdout.log and stderr.log under `<cell>/torchrun`, sorted by path.
pub fn rank_logs(cell_dir: &Path) -> Vec<RankFile> {
    let mut out = Vec::new();
    let mut stack = vec![cell_dir.join(LOG_DIR)];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                if let Some(c) = RANK_FILE.captures(&p.to_string_lossy()) {
                    out.push(RankFile {
                        attempt: c[1].parse().unwrap_or(0),
                        local_rank: c[2].parse().unwrap_or(0),
                        path: p.clone(),
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Every `attempt_N/<local_rank>/error.json` under `<cell>/torchrun`. A file that is not the
/// expected JSON is still listed, with what was wrong as its message.
pub fn rank_errors(cell_dir: &Path) -> Vec<RankError> {
    let mut out = Vec::new();
    let mut stack = vec![cell_dir.join(LOG_DIR)];
    static ERR: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?:^|/)attempt_(\d+)/(\d+)/error\.json$").unwrap());
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let Some(c) =
                ERR.captures(&p.to_string_lossy()).map(|c| (c[1].parse().unwrap_or(0), c[2].parse().unwrap_or(0)))
            else {
                continue;
            };
            let file = p.strip_prefix(cell_dir).unwrap_or(&p).to_string_lossy().into_owned();
            let (message, timestamp, where_) = match std::fs::read_to_string(&p) {
                Ok(text) => parse_error_file(&text),
                Err(e) => (format!("unreadable: {e}"), None, None),
            };
            out.push(RankError { attempt: c.0, local_rank: c.1, file, message, timestamp, where_ });
        }
    }
    out.sort_by_key(|e| (e.attempt, e.local_rank));
    out
}

/// `{"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}`
/// (torchelastic's format), or `{"message": "..."}`.
fn parse_error_file(text: &str) -> (String, Option<String>, Option<String>) {
    let v: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return (format!("not JSON: {e}"), None, None),
    };
    let m = &v["message"];
    let message = m["message"].as_str().or(m.as_str()).map(String::from);
    let info = &m["extraInfo"];
    let timestamp =
        info["timestamp"].as_str().map(String::from).or_else(|| v["timestamp"].as_i64().map(|t| t.to_string()));
    let where_ = info["py_callstack"]
        .as_str()
        .and_then(|s| s.lines().rev().map(str::trim).find(|l| l.starts_with("File ")).map(String::from));
    (message.unwrap_or_else(|| "no message in the error file".into()), timestamp, where_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_arguments() {
        let d = Path::new("/r/cells/001");
        let l = LaunchConfig { ntasks_per_node: Some(4), ..Default::default() };
        let a: Vec<String> = agent_args(&l, d, None).into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(
            a,
            [
                "--nnodes=1",
                "--nproc-per-node=4",
                "--standalone",
                "--log-dir=/r/cells/001/torchrun",
                "--redirects=3",
                "--no-python"
            ]
        );
        let l = LaunchConfig { nodes: Some(2), rdzv_endpoint: Some("n0:29500".into()), ..Default::default() };
        let a: Vec<String> = agent_args(&l, d, Some(8)).into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(&a[..4], ["--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d", "--rdzv-endpoint=n0:29500"]);
    }

    #[test]
    fn a_real_torchrun_log_tree() {
        // tests/fixtures/repro/torchrun-cell: torch 2.15 torchrun, rank 1 raising under `record`.
        let cell = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro/torchrun-cell");
        let logs: Vec<(u32, usize, String)> = rank_logs(&cell)
            .into_iter()
            .map(|f| (f.attempt, f.local_rank, f.path.file_name().unwrap().to_string_lossy().into_owned()))
            .collect();
        let want: Vec<(u32, usize, String)> =
            [(0, 0, "stderr.log"), (0, 0, "stdout.log"), (0, 1, "stderr.log"), (0, 1, "stdout.log")]
                .into_iter()
                .map(|(a, r, f)| (a, r, f.to_string()))
                .collect();
        assert_eq!(logs, want);
        let e = rank_errors(&cell);
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].attempt, e[0].local_rank), (0, 1));
        assert_eq!(e[0].message, "RuntimeError: stand-in failure on rank 1");
        assert!(e[0].file.starts_with("torchrun/") && e[0].file.ends_with("/attempt_0/1/error.json"), "{}", e[0].file);
        assert_eq!(e[0].timestamp.as_deref(), Some("1796156666"));
        assert!(e[0].where_.as_deref().unwrap().contains("standin-torch.py\", line 18, in main"));
    }

    #[test]
    fn error_file_shapes() {
        let (m, t, w) = parse_error_file(
            r#"{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/x/a.py\", line 3, in main\n    raise RuntimeError(\"boom\")\nRuntimeError: boom\n", "timestamp": "1764619125"}}}"#,
        );
        assert_eq!(m, "RuntimeError: boom");
        assert_eq!(t.as_deref(), Some("1764619125"));
        assert_eq!(w.as_deref(), Some("File \"/x/a.py\", line 3, in main"));
        assert_eq!(parse_error_file(r#"{"message": "plain"}"#).0, "plain");
        assert!(parse_error_file("{").0.starts_with("not JSON"));
    }
}
