//! One cell from start to verdict: folder, processes (through the launcher), deadline, leftovers,
//! harness.log, markers, explain.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context;
use regex::Regex;

use super::launch::{self, Execution, Interrupts, Limits};
use super::launcher::{CellCtx, Finish, Launcher, Ranks, Work, WorkKind};
use super::leftovers;
use super::matrix::{CellPlan, Plan, Workload};
use super::stacks;
use super::CELL_ENV;
use crate::model::run::{AxisKind, Cell, CellStatus, Hung, Leftovers, Primary, RuleHit, HARNESS_FILE};
use crate::model::Analysis;
use crate::rules::Engine;
use crate::sys::markers::{self, RankMarkers};

/// Where PyTorch writes its Flight Recorder dumps (the rank is appended): the name before torch 2.9,
/// and the one after (with the old name set, torch 2.9+ warns on every rank).
pub const FR_FILE_ENV_OLD: &str = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";
pub const FR_FILE_ENV: &str = "TORCH_FR_DUMP_TEMP_FILE";

/// The dump-file variable for the torch a command imports (the old name when it is not known: every
/// release reads it).
pub fn fr_file_var(torch_version: Option<&str>) -> &'static str {
    use crate::model::version::Version;
    let v = torch_version.and_then(|v| Version::parse(v.split('+').next().unwrap_or(v)));
    match (v, Version::parse("2.9")) {
        (Some(v), Some(renamed)) if v >= renamed => FR_FILE_ENV,
        _ => FR_FILE_ENV_OLD,
    }
}

/// What every cell of a run shares.
pub struct Harness<'a> {
    pub launcher: &'a dyn Launcher,
    /// epdoctor itself, or the `EPDOCTOR_WORKER_CMD` stand-in.
    pub worker_program: OsString,
    pub size: crate::worker::Size,
    /// `--ranks` as given, exported to a user command as EPDOCTOR_RANKS.
    pub ranks_flag: Option<usize>,
    pub shm_dir: PathBuf,
    pub engine: &'a Engine,
    /// The variable that points a command's Flight Recorder dumps into the cell.
    pub fr_file_var: &'static str,
}

/// The harness's facts plus everything the engine said about one cell.
pub fn run_cell(
    h: &Harness,
    plan: &Plan,
    cp: &CellPlan,
    cell_dir: &Path,
    stop: &dyn Interrupts,
    tick: &mut dyn FnMut(),
) -> anyhow::Result<Cell> {
    std::fs::create_dir(cell_dir).with_context(|| format!("creating {}", cell_dir.display()))?;
    let tag = cell_dir.to_string_lossy().into_owned();
    let ranks = match plan.workload {
        Workload::Builtin { ranks } => Some(ranks),
        Workload::Command(_) => h.ranks_flag,
    };
    let work = work(h, plan, cp, cell_dir, &tag)?;
    let ctx = CellCtx { dir: cell_dir, tag, work, ranks, before: leftovers::snapshot(&h.shm_dir), shm_dir: &h.shm_dir };
    let specs = h.launcher.start(&ctx)?;
    let limits =
        Limits { timeout: Duration::from_secs_f64(plan.timeout_s), grace: Duration::from_secs_f64(plan.grace_s) };
    let mut stacks = Vec::new();
    let mut stack_notes = Vec::new();
    let mut ex = launch::execute(&specs, &limits, stop, tick, &mut |alive| {
        let cap = h.launcher.stacks(&ctx, alive);
        stacks = cap.stacks;
        stack_notes = cap.notes.iter().filter(|n| !n.contains("captured in")).cloned().collect();
        cap.notes
    });
    let (left, probe_lines) = h.launcher.leftovers(&ctx, &ex);
    let fin = h.launcher.finish(&ctx, &specs, &ex);
    // The status and the hung ranks are read from what the launcher reports of each process.
    ex.outcomes = fin.processes.iter().map(|p| p.outcome.clone()).collect();

    let all_markers = cell_markers(cell_dir);
    let stack_groups = stacks::group(&stacks, &fr_seqs(cell_dir));
    let hung = stacks::attach(hung_ranks(plan, &ex, &all_markers, h.launcher.ranks()), &stacks);
    write_harness_log(cell_dir, &ex, &fin, probe_lines, &hung, &left)?;

    let logs = log_files(cell_dir);
    let warn_lines = logs.iter().filter(|p| !p.ends_with(HARNESS_FILE)).map(|p| count_warn_lines(p)).sum();
    let (analysis, explain_error) = match super::explain_cell(&logs, h.engine) {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let status = status(&ex);
    let any_hung_in_teardown = hung.iter().any(|h| h.phase.as_deref() == Some("teardown-start"));
    let teardown_s = if any_hung_in_teardown {
        None
    } else {
        all_markers.values().filter_map(RankMarkers::teardown_s).reduce(f64::max)
    };
    let key = |k: &str| all_markers.values().find_map(|m| m.keys.get(k).cloned());
    let nccl_version = key("nccl_version").or_else(|| analysis.as_ref().and_then(|a| a.nccl_version.clone()));
    let transport = key("transport");
    let detail = detail(status, &ex, &hung, plan.timeout_s);

    Ok(Cell {
        index: cp.index,
        id: cell_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        repeat: cp.repeat,
        values: cp.values.clone(),
        env: plan.cell_env(cp),
        status,
        detail,
        wall_s: ex.wall_s,
        teardown_s,
        hung,
        processes: fin.processes,
        markers: all_markers,
        nccl_version,
        transport,
        warn_lines,
        verdict: analysis.as_ref().map(|a| a.verdict),
        rules: rule_hits(analysis.as_ref()),
        primary: primary(analysis.as_ref()),
        explain_error,
        leftovers: left,
        launch: fin.launch,
        stacks,
        stack_groups,
        stack_notes,
    })
}

/// Each rank's last enqueued collective from the Flight Recorder dumps the cell left in its folder.
fn fr_seqs(cell_dir: &Path) -> BTreeMap<String, i64> {
    let dumps: Vec<crate::flight::Dump> =
        log_files(cell_dir).iter().filter_map(|p| crate::flight::read_if_dump(p)).collect();
    crate::flight::last_enqueued(&dumps).into_iter().map(|(r, s)| (r.to_string(), s)).collect()
}

/// What the cell runs: the worker with the cell's teardown mode and library, or the command with
/// the variables that point it at the cell.
fn work(h: &Harness, plan: &Plan, cp: &CellPlan, cell_dir: &Path, tag: &str) -> anyhow::Result<Work> {
    let mut env = plan.cell_env(cp);
    env.insert(CELL_ENV.into(), Some(tag.to_string()));
    let lib = plan.value_of(cp, AxisKind::NcclLib).filter(|v| !v.is_empty());
    let debug_file = plan.set_debug_file;
    match &plan.workload {
        Workload::Builtin { ranks } => {
            let rdv = cell_dir.join("rendezvous");
            std::fs::create_dir(&rdv).with_context(|| format!("creating {}", rdv.display()))?;
            let config = crate::worker::Config {
                rank: None,
                world: None,
                rendezvous: rdv,
                teardown: plan.value_of(cp, AxisKind::Teardown).unwrap_or("clean").to_string(),
                nccl_lib: lib.map(PathBuf::from),
                size: h.size,
            };
            Ok(Work {
                program: h.worker_program.clone(),
                what: WorkKind::Worker { ranks: *ranks, config },
                env,
                debug_file,
            })
        }
        Workload::Command(cmd) => {
            // Flight Recorder dumps (when the user turns the recorder on) land in the cell, where
            // explain reads them with the logs.
            let set = |k: &str| env.contains_key(k) || std::env::var_os(k).is_some();
            if !set(FR_FILE_ENV) && !set(FR_FILE_ENV_OLD) {
                let dumps = cell_dir.join("nccl_trace_rank_").to_string_lossy().into_owned();
                env.insert(h.fr_file_var.into(), Some(dumps));
            }
            if let Some(n) = h.ranks_flag {
                env.insert("EPDOCTOR_RANKS".into(), Some(n.to_string()));
            }
            if let Some(lib) = lib {
                // A command loads NCCL itself; preloading the library makes it the one that runs.
                let pre = match std::env::var("LD_PRELOAD") {
                    Ok(old) if !old.is_empty() => format!("{lib}:{old}"),
                    _ => lib.to_string(),
                };
                env.insert("LD_PRELOAD".into(), Some(pre));
                env.insert("EPDOCTOR_NCCL_LIB".into(), Some(lib.to_string()));
            }
            let what = WorkKind::Command { args: cmd[1..].iter().map(OsString::from).collect() };
            Ok(Work { program: cmd[0].clone().into(), what, env, debug_file })
        }
    }
}

/// Marker lines of every rank, from every log of the cell.
fn cell_markers(cell_dir: &Path) -> BTreeMap<String, RankMarkers> {
    let mut all: BTreeMap<String, RankMarkers> = BTreeMap::new();
    for p in log_files(cell_dir).iter().filter(|p| !p.ends_with(HARNESS_FILE)) {
        for (rank, m) in markers_of_file(p) {
            let e = all.entry(rank).or_default();
            e.phases.extend(m.phases);
            e.keys.extend(m.keys);
            e.notes.extend(m.notes);
            if !m.last.is_empty() {
                e.last = m.last;
            }
        }
    }
    all
}

/// The markers of a log file, read with the engine's line reader (each line's length bounded), so
/// that a job printing gigabytes without a newline (a `\r` progress bar) costs no more than one line.
fn markers_of_file(path: &Path) -> BTreeMap<String, RankMarkers> {
    let mut out = BTreeMap::new();
    let Ok(mut r) = crate::log::input::open(&crate::log::input::Input::File(path.to_path_buf()), None) else {
        return out;
    };
    while let Ok(Some(line)) = r.next_line() {
        markers::feed(&mut out, line);
    }
    out
}

/// harness.log: what the harness did and saw, in the order it happened.
fn write_harness_log(
    cell_dir: &Path,
    ex: &Execution,
    fin: &Finish,
    probe_lines: Vec<String>,
    hung: &[Hung],
    left: &Leftovers,
) -> anyhow::Result<()> {
    let mut lines = ex.lines.clone();
    lines.extend(fin.stop_lines.iter().cloned());
    lines.extend(fin.processes.iter().filter_map(|p| launch::exit_line(&p.outcome)));
    lines.extend(fin.notes.iter().cloned());
    lines.extend(probe_lines);
    for h in hung {
        if let Some(p) = &h.phase {
            lines.push(format!("{} rank={} last phase={p}", launch::HARNESS_PREFIX, h.rank));
        }
    }
    lines.extend(leftovers::lines(left));
    let path = cell_dir.join(HARNESS_FILE);
    let mut f = std::fs::File::options()
        .create_new(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    for l in &lines {
        writeln!(f, "{l}")?;
    }
    Ok(())
}

fn status(ex: &Execution) -> CellStatus {
    if ex.outcomes.iter().any(|o| o.launch_error.is_some()) {
        CellStatus::LaunchError
    } else if ex.interrupted_by.is_some() {
        CellStatus::Interrupted
    } else if ex.deadline_hit {
        CellStatus::Hang
    } else if ex.outcomes.iter().all(|o| o.exit_code == Some(0)) {
        CellStatus::Ok
    } else {
        CellStatus::Failed
    }
}

fn rule_hits(a: Option<&Analysis>) -> Vec<RuleHit> {
    a.map(|a| {
        a.findings
            .iter()
            .map(|f| RuleHit { id: f.rule.clone(), count: f.count, benign: f.benign, severity: f.severity })
            .collect()
    })
    .unwrap_or_default()
}

fn primary(a: Option<&Analysis>) -> Option<Primary> {
    a.and_then(|a| a.primary.as_ref()).map(|p| Primary {
        rule: p.rule.clone(),
        title: p.title.clone(),
        evidence: p.evidence.first().map(|e| e.text.clone()),
        source: p
            .evidence
            .first()
            .map(|e| Path::new(&e.source).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()),
    })
}

/// Ranks stopped at the deadline, with the phase each was in. For a command, the ranks inside it
/// are known only from markers it printed.
fn hung_ranks(plan: &Plan, ex: &Execution, m: &BTreeMap<String, RankMarkers>, ranks: Ranks) -> Vec<Hung> {
    if !ex.deadline_hit {
        return Vec::new();
    }
    let hung = |rank: &str| {
        let phase = m.get(rank).and_then(RankMarkers::last_phase);
        let for_s = phase.and_then(|p| Some(ex.stop_unix? - m[rank].phases[p]));
        let last = m.get(rank).map(|x| x.last.clone()).filter(|l| !l.is_empty() && !l.starts_with("phase="));
        Hung { rank: rank.to_string(), phase: phase.map(String::from), for_s, last, waits: None }
    };
    match (ranks, &plan.workload) {
        (Ranks::Tasks { launcher }, _) => {
            ex.outcomes.iter().filter(|o| o.deadline && o.label != launcher).map(|o| hung(&o.label)).collect()
        }
        (Ranks::Processes, Workload::Builtin { .. }) => {
            ex.outcomes.iter().filter(|o| o.deadline).map(|o| hung(&o.label)).collect()
        }
        _ => {
            let inside: Vec<Hung> =
                m.iter().filter(|(_, v)| v.last_phase() != Some("teardown-end")).map(|(r, _)| hung(r)).collect();
            if inside.is_empty() {
                vec![Hung { rank: "cmd".into(), phase: None, for_s: None, last: None, waits: None }]
            } else {
                inside
            }
        }
    }
}

fn phase_words(p: &str) -> &str {
    match p {
        "teardown-start" => "teardown",
        "teardown-end" => "exit, after teardown",
        other => other,
    }
}

fn detail(status: CellStatus, ex: &Execution, hung: &[Hung], timeout: f64) -> String {
    match status {
        CellStatus::Ok => "ok".into(),
        CellStatus::Hang => {
            let who: Vec<String> = hung
                .iter()
                .map(|h| {
                    let r = match h.rank.as_str() {
                        "cmd" => "the command".to_string(),
                        r if r.starts_with("pid ") => r.to_string(),
                        r => format!("rank {r}"),
                    };
                    let at = match (&h.phase, h.for_s) {
                        (Some(p), Some(s)) => format!("{r} in {} for {s:.1} s", phase_words(p)),
                        (Some(p), None) => format!("{r} in {}", phase_words(p)),
                        _ => r,
                    };
                    let at = match &h.last {
                        Some(l) => format!("{at}, after `{l}`"),
                        None => at,
                    };
                    match &h.waits {
                        Some(w) => format!("{at}, waiting in `{w}`"),
                        None => at,
                    }
                })
                .collect();
            format!("hang: {}; stopped at the {timeout} s deadline", who.join(", "))
        }
        CellStatus::Interrupted => format!("interrupted by {}", ex.interrupted_by.as_deref().unwrap_or("a signal")),
        CellStatus::LaunchError => {
            ex.outcomes.iter().find_map(|o| o.launch_error.clone()).unwrap_or_else(|| "launch error".into())
        }
        CellStatus::Failed => ex
            .outcomes
            .iter()
            .filter(|o| o.exit_code != Some(0))
            .map(|o| {
                let who = match o.label.as_str() {
                    "cmd" => "command".to_string(),
                    l if l.parse::<usize>().is_ok() => format!("rank {l}"),
                    l => l.to_string(),
                };
                match (o.exit_code, &o.signal_name) {
                    (Some(c), _) => format!("{who} exit {c}"),
                    (None, Some(s)) => format!("{who} {s}"),
                    _ => format!("{who} ?"),
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Every regular file of the cell folder (logs and harness.log) and every rank's file of a torchrun
/// log tree, sorted. (srun's own messages in `slurm/` are turned into harness.log lines instead.)
pub fn log_files(cell_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cell_dir)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    v.extend(super::launcher::torchrun::rank_logs(cell_dir).into_iter().map(|f| f.path));
    v.sort();
    v
}

static WARN_LINE: LazyLock<Regex> = LazyLock::new(|| {
    // NCCL's WARN level and PyTorch's c10 warning prefix ([rank0]:[W1129 ... or [W ...).
    Regex::new(r"NCCL WARN |^(?:\[rank\d+\]:)?\[W(?:\d{3,4} | )").unwrap()
});

/// The number users count when they say "a wall of warnings". Lines are read with their length
/// bounded (a log may be one line of gigabytes).
pub fn count_warn_lines(path: &Path) -> u64 {
    let Ok(mut r) = crate::log::input::open(&crate::log::input::Input::File(path.to_path_buf()), None) else {
        return 0;
    };
    let mut n = 0;
    while let Ok(Some(l)) = r.next_line() {
        n += u64::from(WARN_LINE.is_match(&String::from_utf8_lossy(l)));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dump_file_variable_follows_the_torch_release() {
        assert_eq!(fr_file_var(Some("2.15.0+cu132")), "TORCH_FR_DUMP_TEMP_FILE");
        assert_eq!(fr_file_var(Some("2.9.0")), "TORCH_FR_DUMP_TEMP_FILE");
        assert_eq!(fr_file_var(Some("2.8.1")), "TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
        assert_eq!(fr_file_var(None), "TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
    }

    #[test]
    fn warn_lines_counted() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.log");
        std::fs::write(
            &p,
            "vm:468:478 [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed\n\
             vm:468:478 [0] NCCL INFO misc/socket.cc:47 -> 3\n\
             [rank0]:[W1129 13:54:38.758212116 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group()\n\
             [W ProcessGroupNCCL.cpp:1128] old style\n\
             [epdoctor] rank=0 phase=init t=1\n",
        )
        .unwrap();
        assert_eq!(count_warn_lines(&p), 3);
    }
}
