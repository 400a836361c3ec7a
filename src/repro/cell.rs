//! One cell from start to verdict: folder, processes, deadline, leftovers, harness.log, markers,
//! explain.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use anyhow::Context;
use regex::Regex;

use super::launch::{self, Interrupts, Limits, Spec};
use super::leftovers::{self, Leftovers, Membership};
use super::matrix::{CellPlan, Plan, Workload};
use super::result::{AxisKind, Cell, CellStatus, Hung, Primary, Process, RuleHit, HARNESS_FILE};
use super::slurm::Stops;
use super::stacks;
use super::CELL_ENV;
use crate::rules::Engine;
use crate::sys::markers::{self, RankMarkers};

/// How long exiting processes get before they count as left behind.
const SETTLE: Duration = Duration::from_millis(500);
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Where PyTorch writes its Flight Recorder dumps (the rank is appended).
const FR_FILE_ENV: &str = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";

/// What starts the built-in worker (the lead's fixed interface) and how big its work is.
pub struct Launcher {
    /// epdoctor itself, or the `EPDOCTOR_WORKER_CMD` stand-in.
    pub program: OsString,
    /// `--tokens T --hidden H ...`, appended to every rank's arguments.
    pub workload_args: Vec<OsString>,
    /// `--ranks` as given, exported to a user command as EPDOCTOR_RANKS.
    pub ranks_flag: Option<usize>,
    pub shm_dir: PathBuf,
    pub via: Via,
}

/// What starts a cell's ranks.
pub enum Via {
    /// Local processes, each in its own process group.
    Local,
    /// One job step of this allocation (src/repro/slurm.rs).
    Slurm(super::slurm::Allocation),
    /// One torchrun agent (src/repro/torchrun.rs).
    Torchrun(super::LaunchConfig),
}

/// The harness's facts plus everything the engine said about one cell.
pub fn run_cell(
    plan: &Plan,
    cp: &CellPlan,
    cell_dir: &Path,
    launcher: &Launcher,
    engine: &Engine,
    stop: &dyn Interrupts,
    tick: &mut dyn FnMut(),
) -> anyhow::Result<Cell> {
    std::fs::create_dir(cell_dir).with_context(|| format!("creating {}", cell_dir.display()))?;
    let stops = Arc::new(Mutex::new(Stops::default()));
    let specs = specs(plan, cp, cell_dir, launcher, &stops)?;
    let before = leftovers::snapshot(&launcher.shm_dir);
    let limits =
        Limits { timeout: Duration::from_secs_f64(plan.timeout_s), grace: Duration::from_secs_f64(plan.grace_s) };
    let tag = cell_dir.to_string_lossy().into_owned();
    // Under Slurm the tasks are found on their nodes by their tag; here only srun's own group.
    let slurm = match &launcher.via {
        Via::Slurm(a) => Some(a),
        _ => None,
    };
    let cell_env = slurm.is_none().then(|| (CELL_ENV.to_string(), tag.clone()));
    let mut stacks = Vec::new();
    let mut ex = launch::execute(&specs, &limits, stop, tick, &mut |alive| {
        let m = Membership { pgids: alive.iter().map(|(_, pid)| *pid).collect(), env: cell_env.clone() };
        let cap = stacks::capture(&leftovers::cell_processes(&m), alive, cell_dir);
        stacks = cap.stacks;
        cap.notes
    });
    let (mut left, probe_lines) = match slurm {
        Some(a) => a.probe(cell_dir, &tag, ex.start_unix),
        None => (Leftovers::default(), Vec::new()),
    };
    let membership = Membership { pgids: ex.pgids.clone(), env: cell_env };
    let mut procs = leftovers::settle(&membership, SETTLE);
    // Sockets are looked at while their holders are still alive.
    if slurm.is_none() {
        left.shm = leftovers::new_shm(&before, &launcher.shm_dir);
    }
    left.sockets.extend(leftovers::held_sockets(&procs));
    leftovers::kill_all(&membership, &mut procs, KILL_WAIT);
    left.processes.extend(procs);

    // One process per rank: the local processes, or each task of the step (and srun itself).
    let stops = std::mem::take(&mut *stops.lock().unwrap_or_else(|e| e.into_inner()));
    let (step, nodes) = match slurm {
        Some(_) => super::slurm::Allocation::step_of(cell_dir),
        None => (None, Vec::new()),
    };
    let procs_out: Vec<(launch::Outcome, String, Option<String>)> = match slurm {
        Some(a) => a.task_outcomes(cell_dir, &ex, &stops),
        None => specs
            .iter()
            .zip(ex.outcomes.iter().cloned())
            .map(|(s, o)| (o, s.log.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), None))
            .collect(),
    };
    if slurm.is_some() {
        // The tasks, then srun itself: a step whose srun failed is not ok even if every task was.
        ex.outcomes = procs_out.iter().map(|p| p.0.clone()).collect();
    }
    let rank_errors = match launcher.via {
        Via::Torchrun(_) => super::torchrun::rank_errors(cell_dir),
        _ => Vec::new(),
    };

    let mut all_markers: BTreeMap<String, RankMarkers> = BTreeMap::new();
    for p in log_files(cell_dir).iter().filter(|p| !p.ends_with(HARNESS_FILE)) {
        for (rank, m) in markers::parse_file(p) {
            let e = all_markers.entry(rank).or_default();
            e.phases.extend(m.phases);
            e.keys.extend(m.keys);
            e.notes.extend(m.notes);
            if !m.last.is_empty() {
                e.last = m.last;
            }
        }
    }
    let per_task = !matches!(launcher.via, Via::Local | Via::Torchrun(_));
    let hung = stacks::attach(hung_ranks(plan, &ex, &all_markers, per_task), &stacks);

    let mut lines = ex.lines.clone();
    lines.extend(stops.lines.iter().cloned());
    lines.extend(procs_out.iter().filter_map(|p| launch::exit_line(&p.0)));
    for e in &rank_errors {
        lines.push(format!(
            "{} local_rank={} attempt={} error file {}: {}",
            launch::HARNESS_PREFIX,
            e.local_rank,
            e.attempt,
            e.file,
            e.message
        ));
    }
    lines.extend(probe_lines);
    for h in &hung {
        if let Some(p) = &h.phase {
            lines.push(format!("{} rank={} last phase={p}", launch::HARNESS_PREFIX, h.rank));
        }
    }
    lines.extend(left.lines());
    let mut f = std::fs::File::options()
        .create_new(true)
        .write(true)
        .open(cell_dir.join(HARNESS_FILE))
        .with_context(|| format!("writing {}", cell_dir.join(HARNESS_FILE).display()))?;
    for l in &lines {
        writeln!(f, "{l}")?;
    }
    drop(f);

    let logs = log_files(cell_dir);
    let warn_lines = logs.iter().filter(|p| !p.ends_with(HARNESS_FILE)).map(|p| count_warn_lines(p)).sum();
    let (analysis, explain_error) = match super::explain_cell(&logs, engine) {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };

    let status = if ex.outcomes.iter().any(|o| o.launch_error.is_some()) {
        CellStatus::LaunchError
    } else if ex.interrupted_by.is_some() {
        CellStatus::Interrupted
    } else if ex.deadline_hit {
        CellStatus::Hang
    } else if ex.outcomes.iter().all(|o| o.exit_code == Some(0)) {
        CellStatus::Ok
    } else {
        CellStatus::Failed
    };
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
        processes: procs_out.into_iter().map(|(outcome, log, node)| Process { outcome, log, node }).collect(),
        markers: all_markers,
        nccl_version,
        transport,
        warn_lines,
        verdict: analysis.as_ref().map(|a| a.verdict),
        rules: analysis
            .as_ref()
            .map(|a| {
                a.findings
                    .iter()
                    .map(|f| RuleHit { id: f.rule.clone(), count: f.count, benign: f.benign, severity: f.severity })
                    .collect()
            })
            .unwrap_or_default(),
        primary: analysis.as_ref().and_then(|a| a.primary.as_ref()).map(|p| Primary {
            rule: p.rule.clone(),
            title: p.title.clone(),
            evidence: p.evidence.first().map(|e| e.text.clone()),
            source: p.evidence.first().map(|e| {
                Path::new(&e.source).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            }),
        }),
        explain_error,
        leftovers: left,
        step,
        nodes,
        rank_errors,
        stacks,
    })
}

fn specs(
    plan: &Plan,
    cp: &CellPlan,
    cell_dir: &Path,
    l: &Launcher,
    stops: &Arc<Mutex<Stops>>,
) -> anyhow::Result<Vec<Spec>> {
    let local = local_specs(plan, cp, cell_dir, l)?;
    match &l.via {
        Via::Local => Ok(local),
        // One program for every task or rank: the first local spec without its rank flags (the
        // worker reads its place from Slurm's or torchrun's variables).
        Via::Slurm(a) => {
            let s = &local[0];
            let args = without_place(&s.args);
            let mut env = s.env.clone();
            if plan.set_debug_file {
                env.insert(
                    "NCCL_DEBUG_FILE".into(),
                    Some(cell_dir.join("nccl.%h.%p.log").to_string_lossy().into_owned()),
                );
            }
            Ok(vec![a.step_spec(cell_dir, &s.program, &args, env, stops.clone())?])
        }
        Via::Torchrun(t) => {
            let s = &local[0];
            let ranks = match plan.workload {
                Workload::Builtin { ranks } => Some(ranks),
                Workload::Command(_) => l.ranks_flag,
            };
            let mut args = super::torchrun::agent_args(t, cell_dir, ranks);
            args.push(s.program.clone());
            args.extend(without_place(&s.args));
            let mut env = s.env.clone();
            if plan.set_debug_file {
                env.insert(
                    "NCCL_DEBUG_FILE".into(),
                    Some(cell_dir.join("nccl.%h.%p.log").to_string_lossy().into_owned()),
                );
            }
            Ok(vec![Spec {
                label: "torchrun".into(),
                program: "torchrun".into(),
                args,
                env,
                log: cell_dir.join("torchrun.log"),
                stopper: None,
            }])
        }
    }
}

/// A worker's arguments without `--rank R --world N`.
fn without_place(args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--rank" || a == "--world" {
            it.next();
        } else {
            out.push(a.clone());
        }
    }
    out
}

fn local_specs(plan: &Plan, cp: &CellPlan, cell_dir: &Path, l: &Launcher) -> anyhow::Result<Vec<Spec>> {
    let mut env = plan.cell_env(cp);
    env.insert(CELL_ENV.into(), Some(cell_dir.to_string_lossy().into_owned()));
    let lib = plan.value_of(cp, AxisKind::NcclLib).filter(|v| !v.is_empty());
    let debug_file = |name: &str| Some(cell_dir.join(name).to_string_lossy().into_owned());
    match &plan.workload {
        Workload::Builtin { ranks } => {
            let rdv = cell_dir.join("rendezvous");
            std::fs::create_dir(&rdv).with_context(|| format!("creating {}", rdv.display()))?;
            let teardown = plan.value_of(cp, AxisKind::Teardown).unwrap_or("clean");
            Ok((0..*ranks)
                .map(|r| {
                    let mut args: Vec<OsString> = vec!["worker".into()];
                    let mut push = |k: &str, v: OsString| {
                        args.push(k.into());
                        args.push(v);
                    };
                    push("--rank", r.to_string().into());
                    push("--world", ranks.to_string().into());
                    push("--rendezvous", rdv.clone().into());
                    push("--teardown", teardown.into());
                    if let Some(lib) = lib {
                        push("--nccl-lib", lib.into());
                    }
                    args.extend(l.workload_args.iter().cloned());
                    let mut env = env.clone();
                    if plan.set_debug_file {
                        env.insert("NCCL_DEBUG_FILE".into(), debug_file(&format!("rank{r}.nccl.%p.log")));
                    }
                    Spec {
                        label: r.to_string(),
                        program: l.program.clone(),
                        args,
                        env,
                        log: cell_dir.join(format!("rank{r}.log")),
                        stopper: None,
                    }
                })
                .collect())
        }
        Workload::Command(cmd) => {
            if plan.set_debug_file {
                env.insert("NCCL_DEBUG_FILE".into(), debug_file("nccl.%p.log"));
            }
            // Flight Recorder dumps (when the user turns the recorder on) land in the cell, where
            // explain reads them with the logs.
            if !env.contains_key(FR_FILE_ENV) && std::env::var_os(FR_FILE_ENV).is_none() {
                env.insert(FR_FILE_ENV.into(), debug_file("nccl_trace_rank_"));
            }
            if let Some(n) = l.ranks_flag {
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
            Ok(vec![Spec {
                label: "cmd".into(),
                program: cmd[0].clone().into(),
                args: cmd[1..].iter().map(OsString::from).collect(),
                env,
                log: cell_dir.join("cmd.log"),
                stopper: None,
            }])
        }
    }
}

/// Ranks stopped at the deadline, with the phase each was in. For a command, the ranks inside it
/// are known only from markers it printed.
fn hung_ranks(plan: &Plan, ex: &launch::Execution, m: &BTreeMap<String, RankMarkers>, per_task: bool) -> Vec<Hung> {
    if !ex.deadline_hit {
        return Vec::new();
    }
    let hung = |rank: &str| {
        let phase = m.get(rank).and_then(RankMarkers::last_phase);
        let for_s = phase.and_then(|p| Some(ex.stop_unix? - m[rank].phases[p]));
        let last = m.get(rank).map(|x| x.last.clone()).filter(|l| !l.is_empty() && !l.starts_with("phase="));
        Hung { rank: rank.to_string(), phase: phase.map(String::from), for_s, last, waits: None }
    };
    match plan.workload {
        _ if per_task => {
            ex.outcomes.iter().filter(|o| o.deadline && o.label != "srun").map(|o| hung(&o.label)).collect()
        }
        Workload::Builtin { .. } if matches!(ex.outcomes.first(), Some(o) if o.label != "torchrun") => {
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

fn detail(status: CellStatus, ex: &launch::Execution, hung: &[Hung], timeout: f64) -> String {
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
    v.extend(super::torchrun::rank_logs(cell_dir).into_iter().map(|f| f.path));
    v.sort();
    v
}

static WARN_LINE: LazyLock<Regex> = LazyLock::new(|| {
    // NCCL's WARN level and PyTorch's c10 warning prefix ([rank0]:[W1129 ... or [W ...).
    Regex::new(r"NCCL WARN |^(?:\[rank\d+\]:)?\[W(?:\d{3,4} | )").unwrap()
});

/// The number users count when they say "a wall of warnings".
pub fn count_warn_lines(path: &Path) -> u64 {
    let Ok(f) = std::fs::File::open(path) else { return 0 };
    std::io::BufReader::new(f)
        .split(b'\n')
        .map_while(Result::ok)
        .filter(|l| WARN_LINE.is_match(&String::from_utf8_lossy(l)))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

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
