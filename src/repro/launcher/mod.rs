//! How a cell's ranks start: one [`Launcher`] per kind (local processes, a Slurm job step, a
//! torchrun agent). A launcher turns what the cell runs ([`Work`]) into the processes to start
//! (each with how it is stopped), takes their stacks at the deadline, finds what they left behind
//! and reports how each one ended. Adding one: a file here implementing the trait, and its kind in
//! [`acquire`] (the kinds themselves are `model::run::LauncherKind`).

pub mod local;
pub mod slurm;
pub mod torchrun;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use super::launch::{Execution, Spec};
use super::leftovers::{self, Before, Membership};
use super::matrix::Workload;
use super::stacks::{self, Capture};
use super::CELL_ENV;
pub use crate::model::run::LauncherKind;
use crate::model::run::{CellLaunch, LauncherOut, Leftovers, Process};

/// How each cell's ranks start (docs/repro.md, "Across nodes"); from `--launcher` and its flags.
#[derive(Debug, Clone, Default)]
pub struct LaunchConfig {
    pub launcher: LauncherKind,
    /// slurm, torchrun: nodes per cell.
    pub nodes: Option<usize>,
    /// slurm, torchrun: ranks per node.
    pub ntasks_per_node: Option<usize>,
    /// slurm: partition and time limit of the allocation epdoctor asks for.
    pub partition: Option<String>,
    pub time: Option<String>,
    /// slurm: how long a pending allocation request is waited for, and whether salloc may not wait at all.
    pub alloc_timeout_s: f64,
    pub immediate: bool,
    /// slurm: more arguments for every srun.
    pub srun_args: Vec<String>,
    /// torchrun: rendezvous endpoint HOST:PORT (None: a local one).
    pub rdzv_endpoint: Option<String>,
}

/// What one cell runs, before a launcher decides how its ranks start.
#[derive(Debug, Clone)]
pub struct Work {
    /// epdoctor (or the `EPDOCTOR_WORKER_CMD` stand-in), or the command's program.
    pub program: OsString,
    pub what: WorkKind,
    /// Every variable the cell's processes get (set) or lose (None), the harness's tag included.
    pub env: BTreeMap<String, Option<String>>,
    /// Point NCCL_DEBUG_FILE into the cell folder (the user did not set it).
    pub debug_file: bool,
}

#[derive(Debug, Clone)]
pub enum WorkKind {
    /// The built-in worker; `config` has no place (rank, world): a launcher that starts each rank
    /// itself sets it, others leave it to the worker, which reads its launcher's variables.
    Worker { ranks: usize, config: crate::worker::Config },
    /// The user's command: its arguments after the program.
    Command { args: Vec<OsString> },
}

impl Work {
    /// One program for every task or rank (Slurm, torchrun), NCCL's debug file named per host and
    /// process.
    pub fn one_program(&self, dir: &Path) -> (OsString, Vec<OsString>, BTreeMap<String, Option<String>>) {
        let args = match &self.what {
            WorkKind::Worker { config, .. } => worker_args(config),
            WorkKind::Command { args } => args.clone(),
        };
        let mut env = self.env.clone();
        if self.debug_file {
            env.insert("NCCL_DEBUG_FILE".into(), Some(dir.join("nccl.%h.%p.log").to_string_lossy().into_owned()));
        }
        (self.program.clone(), args, env)
    }
}

/// The worker's command line for `c`: the one place that writes it (`cli::WorkerArgs` reads it).
pub fn worker_args(c: &crate::worker::Config) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["worker".into()];
    let mut push = |k: &str, v: OsString| {
        args.push(k.into());
        args.push(v);
    };
    if let Some(r) = c.rank {
        push("--rank", r.to_string().into());
    }
    if let Some(w) = c.world {
        push("--world", w.to_string().into());
    }
    push("--rendezvous", c.rendezvous.clone().into());
    push("--teardown", c.teardown.clone().into());
    if let Some(lib) = &c.nccl_lib {
        push("--nccl-lib", lib.clone().into());
    }
    let s = c.size;
    for (k, v) in [
        ("--tokens", s.tokens),
        ("--hidden", s.hidden),
        ("--experts", s.experts),
        ("--topk", s.topk),
        ("--iters", s.iters),
    ] {
        push(k, v.to_string().into());
    }
    args
}

/// One cell as its launcher sees it.
pub struct CellCtx<'a> {
    pub dir: &'a Path,
    /// The cell folder: the value of `EPDOCTOR_CELL_DIR` that marks the cell's processes.
    pub tag: String,
    pub work: Work,
    /// Ranks of the cell: the built-in workload's, else `--ranks` as given.
    pub ranks: Option<usize>,
    /// NCCL shm files of this host before the cell (only new ones are the cell's).
    pub before: Before,
    pub shm_dir: &'a Path,
}

/// Which of a cell's processes are its ranks, when looking for the ones that hung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranks {
    /// Each process started (the built-in workload's ranks); a command's ranks are known only from
    /// the markers it printed.
    Processes,
    /// Each task the launcher reports, except the launcher's own process (labelled so).
    Tasks { launcher: &'static str },
    /// Only from the markers (the ranks run under an agent).
    Markers,
}

/// How a cell's processes ended, as its launcher reports them.
pub struct Finish {
    /// One per rank (or task), and the launcher's own where it has one.
    pub processes: Vec<Process>,
    pub launch: CellLaunch,
    /// Harness lines about stopping them, before their exit lines.
    pub stop_lines: Vec<String>,
    /// Harness lines after their exit lines.
    pub notes: Vec<String>,
}

pub trait Launcher {
    /// What cells.json records about it for the whole run (None: nothing beyond each process).
    fn describe(&self) -> Option<LauncherOut>;

    /// The processes that start one cell; a spec's stopper says how the deadline and interrupts
    /// stop it (none: signals to its process group).
    fn start(&self, cell: &CellCtx) -> anyhow::Result<Vec<Spec>>;

    /// How the cell's processes on this host are recognised, given the process groups started.
    fn membership(&self, cell: &CellCtx, pgids: Vec<i32>) -> Membership {
        // Cells run one at a time, so an orphan epdoctor adopted during this one is this cell's.
        Membership { pgids, env: Some((CELL_ENV.to_string(), cell.tag.clone())), orphans: true }
    }

    /// At the deadline, before any SIGTERM: the stacks of the cell's processes still running
    /// (`alive`: label and pid of each process started that still runs).
    fn stacks(&self, cell: &CellCtx, alive: &[(String, i32)]) -> Capture {
        let m = self.membership(cell, alive.iter().map(|(_, pid)| *pid).collect());
        stacks::capture(&leftovers::cell_processes(&m), alive, cell.dir)
    }

    /// Once the processes started have ended: what the cell left behind (killed), with harness
    /// lines about looking for it.
    fn leftovers(&self, cell: &CellCtx, ex: &Execution) -> (Leftovers, Vec<String>) {
        let mut left = Leftovers::default();
        let m = self.membership(cell, ex.pgids.clone());
        leftovers::collect_here(&m, Some((&cell.before, cell.shm_dir)), &mut left);
        (left, Vec::new())
    }

    /// How each process ended, and what the launcher says about the cell.
    fn finish(&self, _cell: &CellCtx, specs: &[Spec], ex: &Execution) -> Finish {
        Finish {
            processes: processes_of(specs, ex),
            launch: CellLaunch::default(),
            stop_lines: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn ranks(&self) -> Ranks;
}

/// One process per spec, its log named by file.
pub fn processes_of(specs: &[Spec], ex: &Execution) -> Vec<Process> {
    specs
        .iter()
        .zip(ex.outcomes.iter().cloned())
        .map(|(s, outcome)| Process {
            outcome,
            log: s.log.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            node: None,
        })
        .collect()
}

/// Whether the ranks run on this host, so that its GPU libraries can be checked before any cell
/// (under Slurm they run on the allocation's nodes, which this host cannot vouch for).
pub fn runs_here(kind: LauncherKind) -> bool {
    kind != LauncherKind::Slurm
}

/// The launcher of each kind. Under Slurm outside an allocation this asks salloc for one, so it
/// comes after every check.
pub fn acquire(
    cfg: &LaunchConfig,
    ranks_flag: Option<usize>,
    workload: &Workload,
    stop: &dyn super::launch::Interrupts,
    say: &mut dyn FnMut(&str),
) -> anyhow::Result<Box<dyn Launcher>> {
    Ok(match cfg.launcher {
        LauncherKind::Local => Box::new(local::Local),
        LauncherKind::Slurm => {
            // Without a size, the step gets the plan's ranks.
            let ranks = match (workload, cfg.nodes.or(cfg.ntasks_per_node)) {
                (_, _) if ranks_flag.is_some() => ranks_flag,
                (Workload::Builtin { ranks }, None) => Some(*ranks),
                _ => None,
            };
            Box::new(slurm::Slurm::new(slurm::Allocation::acquire(cfg, ranks, stop, say)?))
        }
        LauncherKind::Torchrun => Box::new(torchrun::Torchrun { cfg: cfg.clone(), ranks_flag }),
    })
}
