//! What a repro run wrote: `cells.json` in the run folder (`epdoctor report --repro DIR` reads it
//! back), and the pieces it holds: each process's end, what a cell left behind, each rank's markers,
//! the stacks at the deadline. Plain data; the harness (src/repro/) fills it, the writers read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::markers::RankMarkers;
use super::version::{boundary, Version};
use super::{Finding, Severity, Verdict};

pub mod stack;

pub const SCHEMA_VERSION: u32 = 1;
pub const CELLS_FILE: &str = "cells.json";
pub const REPORT_FILE: &str = "report.md";
pub const HARNESS_FILE: &str = "harness.log";
/// A cell's raw stacks at the deadline, under the cell folder.
pub const STACKS_DIR: &str = "stacks";
/// The cell's one-line-per-thread stacks (`[epdoctor-stack]` lines) that explain reads.
pub const STACKS_LOG: &str = "stacks.log";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Still running, or epdoctor itself was killed before it could finish: partial.
    Running,
    Complete,
    /// Stopped by SIGINT/SIGTERM/SIGHUP: partial.
    Interrupted,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub schema_version: u32,
    pub tool_version: String,
    pub status: RunStatus,
    pub interrupted_by: Option<String>,
    /// Local time the run started, `YYYY-MM-DD HH:MM:SS`.
    pub started: String,
    /// `builtin` or `command`.
    pub workload: String,
    /// The user's command (command workload).
    pub command: Vec<String>,
    /// Ranks per cell (built-in workload).
    pub ranks: Option<usize>,
    pub timeout_s: f64,
    pub grace_s: f64,
    pub repeat: usize,
    /// Variables every cell got (e.g. NCCL_DEBUG=WARN by default).
    pub fixed_env: BTreeMap<String, String>,
    pub axes: Vec<AxisOut>,
    /// How the cells' ranks started, when not as local processes (`--launcher slurm|torchrun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<LauncherOut>,
    pub cells_planned: usize,
    pub cells: Vec<Cell>,
    #[serde(default)]
    pub effects: Vec<Effect>,
    #[serde(default)]
    pub where_fired: Vec<Site>,
    /// What `lint` finds in the command's Python scripts, before any cell runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lint: Vec<Finding>,
    /// `--bisect-nccl`: the releases probed and the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bisect: Option<BisectOut>,
}

impl Run {
    pub fn is_partial(&self) -> bool {
        self.status != RunStatus::Complete
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AxisOut {
    pub name: String,
    pub kind: AxisKind,
    pub values: Vec<AxisValueOut>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AxisValueOut {
    /// The raw value: a library path ("" = the loader's choice), a mode, an env value ("" = unset).
    pub value: String,
    /// As tables and effects show it (e.g. `2.22.3 (lib1)`).
    pub label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellStatus {
    /// Every process exited 0.
    Ok,
    /// A process exited non-zero or died of a signal nobody sent it.
    Failed,
    /// Still running at the deadline; stopped by the harness.
    Hang,
    /// epdoctor was interrupted during this cell.
    Interrupted,
    /// A process could not be started.
    LaunchError,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Ok => "ok",
            CellStatus::Failed => "failed",
            CellStatus::Hang => "hang",
            CellStatus::Interrupted => "interrupted",
            CellStatus::LaunchError => "launch-error",
        }
    }
}

/// The ways a cell's ranks can start; the one list of them (`--launcher` takes these names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// Local processes, each in its own process group.
    #[default]
    Local,
    /// One Slurm job step per cell.
    Slurm,
    /// One torchrun agent per cell.
    Torchrun,
}

impl LauncherKind {
    pub const ALL: [LauncherKind; 3] = [LauncherKind::Local, LauncherKind::Slurm, LauncherKind::Torchrun];

    pub fn name(self) -> &'static str {
        match self {
            LauncherKind::Local => "local",
            LauncherKind::Slurm => "slurm",
            LauncherKind::Torchrun => "torchrun",
        }
    }
}

/// How the cells' ranks started, when not as local processes: the launcher's kind (`kind` in
/// cells.json) and what it says about the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LauncherOut {
    Slurm {
        /// The allocation every cell's job step ran in.
        slurm: SlurmAllocation,
    },
    Torchrun {
        /// What starts each cell, before the workload's own command.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        command: Vec<String>,
    },
}

impl LauncherOut {
    pub fn kind(&self) -> LauncherKind {
        match self {
            LauncherOut::Slurm { .. } => LauncherKind::Slurm,
            LauncherOut::Torchrun { .. } => LauncherKind::Torchrun,
        }
    }
}

/// The Slurm allocation the cells ran in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmAllocation {
    pub job_id: String,
    /// epdoctor asked salloc for it and cancels it at the end.
    #[serde(rename = "allocated_by_epdoctor")]
    pub owned: bool,
    pub nodes: Vec<String>,
}

/// What the launcher says about one cell, beyond its processes (nothing for local processes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CellLaunch {
    /// Slurm: the cell's job step (`JOB.STEP`) and its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// torchrun: each failed rank's error file (TORCHELASTIC_ERROR_FILE), as torchelastic wrote it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_errors: Vec<RankError>,
}

/// One process of a cell and its log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Process {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Its stdout + stderr, relative to the cell folder.
    pub log: String,
    /// Slurm: the node its task ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A process (or a rank inside the command) stopped at the deadline, and where it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hung {
    pub rank: String,
    /// Its last phase marker (`teardown-start` = stuck in teardown), if it printed any.
    pub phase: Option<String>,
    /// Seconds from that marker to the harness's SIGTERM.
    pub for_s: Option<f64>,
    /// Its last marker line (e.g. the last teardown step it finished).
    #[serde(default)]
    pub last: Option<String>,
    /// Where its main thread waited at the deadline, folded from its stack.
    #[serde(default)]
    pub waits: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RuleHit {
    pub id: String,
    pub count: u64,
    pub benign: bool,
    pub severity: Severity,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Primary {
    pub rule: String,
    pub title: String,
    /// The line that best identifies the cause.
    pub evidence: Option<String>,
    pub source: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    /// 1-based position in the run.
    pub index: usize,
    /// Folder name under `cells/`.
    pub id: String,
    pub repeat: usize,
    /// Index of this cell's value on each axis (same order as `Run::axes`).
    pub values: Vec<usize>,
    /// Every variable the cell set (value) or removed (null), besides the harness's own.
    pub env: BTreeMap<String, Option<String>>,
    pub status: CellStatus,
    /// One line: `hang: rank 0 in teardown for 45.0 s`, `rank 1 exit 3`, ...
    pub detail: String,
    pub wall_s: f64,
    /// Slowest rank's teardown, from the phase markers (absent when a rank never finished it).
    pub teardown_s: Option<f64>,
    pub hung: Vec<Hung>,
    pub processes: Vec<Process>,
    /// Marker lines per rank (`[epdoctor] rank=R ...`).
    pub markers: BTreeMap<String, RankMarkers>,
    /// The NCCL version the cell actually ran (worker marker, else the logs).
    pub nccl_version: Option<String>,
    pub transport: Option<String>,
    /// `NCCL WARN` lines and PyTorch `[W...]` lines in the cell's logs.
    pub warn_lines: u64,
    pub verdict: Option<Verdict>,
    pub rules: Vec<RuleHit>,
    pub primary: Option<Primary>,
    /// Why there is no verdict (the engine failed on this cell's logs).
    pub explain_error: Option<String>,
    pub leftovers: Leftovers,
    /// What the launcher says about the cell (cells.json keeps its fields at the cell's level).
    #[serde(flatten)]
    pub launch: CellLaunch,
    /// The stack of every process still running at the deadline.
    #[serde(default)]
    pub stacks: Vec<ProcStack>,
    /// The same stacks grouped: ranks whose main threads wait in the same place, the odd group first
    /// (absent from cells.json when no stack was taken).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack_groups: Vec<StackGroup>,
    /// What the stack capture could not do (a tool missing, with its install command).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack_notes: Vec<String>,
}

/// Ranks whose folded main-thread stacks are the same (the equivalence classes STAT draws for MPI
/// jobs), with the Flight Recorder's last enqueued collective of each rank where dumps exist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackGroup {
    /// `0`, `1`, ... (or `cmd`, `pid N`), in order.
    pub ranks: Vec<String>,
    /// `ranks 0-6, 8-15`, `rank 7`.
    pub label: String,
    pub waits: String,
    /// The last collective these ranks enqueued (default group), when the cell has dumps.
    #[serde(default)]
    pub fr_seq: Option<i64>,
}

impl Cell {
    /// Did the cell run to an end that can be compared (not cut short by epdoctor itself)?
    pub fn comparable(&self) -> bool {
        !matches!(self.status, CellStatus::Interrupted | CellStatus::LaunchError) && self.explain_error.is_none()
    }
}

/// What an axis varies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AxisKind {
    NcclLib,
    Teardown,
    Env,
}

/// One axis value against the axis' first value, everything else held equal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    pub axis: String,
    pub value: String,
    pub baseline: String,
    /// Pairs of cells compared (one per setting of the other axes where both ran).
    pub comparisons: usize,
    pub appear: Vec<Change>,
    pub vanish: Vec<Change>,
    /// WARN lines summed over the compared cells (mean over repeats).
    pub warn_baseline: f64,
    pub warn_value: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// A rule id, or `outcome:hang` / `outcome:failed` / `outcome:leftovers`.
    pub item: String,
    /// The settings of the other axes where it changed ("" when there are no other axes).
    pub contexts: Vec<String>,
}

/// Where one rule or outcome was seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    pub item: String,
    /// Settings (cells without repeats) where it was seen, out of `total` compared.
    pub fired: usize,
    pub total: usize,
    /// Axis values shared by every setting where it was seen (and not by all settings).
    pub when: Vec<(String, String)>,
    /// It was seen in every setting that has those values: "exactly when".
    pub exact: bool,
    /// Labels of the settings where it was seen.
    pub settings: Vec<String>,
}

/// What one process was doing at the deadline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcStack {
    /// `0`, `1` (the worker's label, or RANK from the process's environment), or `pid N`.
    pub rank: String,
    pub pid: i32,
    pub cmd: String,
    /// `py-spy`, `eu-stack`, `gdb` or `proc`.
    pub tool: String,
    /// The main thread, folded: where it waits.
    pub waits: String,
    /// Other threads inside NCCL, c10d, NVSHMEM or DeepEP, folded (`name: chain`).
    #[serde(default)]
    pub others: Vec<String>,
    /// The raw stacks, relative to the cell folder.
    pub raw: String,
    /// The node it ran on, when not this host (a Slurm task's, from the node's stack probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// How one process ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub label: String,
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    /// It was still running at the deadline and got SIGTERM.
    pub deadline: bool,
    /// It was still running when epdoctor was interrupted and got SIGTERM.
    pub interrupted: bool,
    /// It was still running after the grace period and got SIGKILL.
    pub sigkill: bool,
    /// It did not exit even after SIGKILL (stuck in the kernel or driver).
    pub unkillable: bool,
    pub launch_error: Option<String>,
    /// Seconds from the start of the cell to the end of this process.
    pub end_s: Option<f64>,
}

impl Outcome {
    /// `0`, `3`, `SIGKILL`, `deadline/SIGTERM`, ...: what the table shows for this process.
    pub fn short(&self) -> String {
        if self.launch_error.is_some() {
            return "not started".into();
        }
        if self.unkillable {
            return "unkillable".into();
        }
        let end = match (self.exit_code, &self.signal_name, self.signal) {
            (Some(c), _, _) => c.to_string(),
            (None, Some(n), _) => n.clone(),
            (None, None, Some(s)) => format!("signal {s}"),
            _ => "?".into(),
        };
        if self.deadline {
            format!("deadline/{end}")
        } else if self.interrupted {
            format!("interrupted/{end}")
        } else {
            end
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeftoverProcess {
    pub pid: i32,
    pub pgid: i32,
    pub cmd: String,
    /// GPU device nodes it had open (/dev/nvidiaN): it still held a CUDA context and its memory.
    pub gpu: Vec<String>,
    /// Still there after SIGKILL.
    pub survived_kill: bool,
    /// The node it ran on (Slurm: from that node's leftovers probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Inodes of the sockets it holds (to attribute NCCL's abstract sockets).
    #[serde(skip)]
    pub socket_inodes: Vec<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Leftovers {
    pub processes: Vec<LeftoverProcess>,
    pub shm: Vec<String>,
    pub sockets: Vec<String>,
    /// Slurm: the nodes whose leftovers probe answered (shm files and sockets of all of them are above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probed_nodes: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.shm.is_empty() && self.sockets.is_empty()
    }

    /// `1 proc (GPU), 2 shm, 1 sock` or `-`.
    pub fn short(&self) -> String {
        let mut parts = Vec::new();
        if !self.processes.is_empty() {
            let gpu = if self.processes.iter().any(|p| !p.gpu.is_empty()) { " (GPU)" } else { "" };
            parts.push(format!("{} proc{gpu}", self.processes.len()));
        }
        if !self.shm.is_empty() {
            parts.push(format!("{} shm", self.shm.len()));
        }
        if !self.sockets.is_empty() {
            parts.push(format!("{} sock", self.sockets.len()));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(", ")
        }
    }

    /// What harness.log says about them, one fact a line (harness.log puts its prefix before each).
    pub fn facts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.processes {
            let node = p.node.as_ref().map(|n| format!(" node={n}")).unwrap_or_default();
            out.push(format!("leftover process pid={}{node} cmd={}", p.pid, p.cmd));
            for g in &p.gpu {
                out.push(format!("leftover gpu pid={} device={g}", p.pid));
            }
            if p.survived_kill {
                out.push(format!("leftover process pid={} survived SIGKILL", p.pid));
            }
        }
        for f in &self.shm {
            out.push(format!("leftover /dev/shm/{f}"));
        }
        for s in &self.sockets {
            out.push(format!("leftover socket {s}"));
        }
        out
    }
}

/// What one node's probe prints (`epdoctor env --leftovers --format json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeLeftovers {
    pub node: String,
    pub cell: String,
    #[serde(flatten)]
    pub leftovers: Leftovers,
}

/// What one node's stack probe prints (`epdoctor env --stacks --cell TAG --format json`): the
/// stacks of the cell's processes there, each with its `stacks.log` lines, and the probe's notes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStacks {
    pub node: String,
    pub cell: String,
    pub stacks: Vec<NodeStack>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeStack {
    pub stack: ProcStack,
    pub lines: Vec<String>,
}

/// A rank's TORCHELASTIC_ERROR_FILE, as written by torchelastic's `record` (or the rank itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankError {
    pub attempt: u32,
    pub local_rank: usize,
    /// Relative to the cell folder.
    pub file: String,
    /// `RuntimeError: ...`: the exception's type and text.
    pub message: String,
    /// Unix seconds, as torchelastic wrote them.
    pub timestamp: Option<String>,
    /// The last line of the Python call stack, when there is one.
    pub where_: Option<String>,
}

/// One line per effect, for text and Markdown.
pub fn effect_line(e: &Effect) -> String {
    let mut s = format!("{}={} vs {}={}", e.axis, e.value, e.axis, e.baseline);
    if e.comparisons == 0 {
        s.push_str(": no pair of finished cells to compare");
        return s;
    }
    let list = |sign: char, changes: &[Change]| -> String {
        changes
            .iter()
            .map(|c| {
                let ctx: Vec<&str> = c.contexts.iter().map(String::as_str).filter(|x| !x.is_empty()).collect();
                if c.contexts.len() == e.comparisons || ctx.is_empty() {
                    format!("{sign}{}", c.item)
                } else {
                    format!("{sign}{} (only with {})", c.item, ctx.join("; "))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !e.appear.is_empty() {
        parts.push(format!("appears {}", list('+', &e.appear)));
    }
    if !e.vanish.is_empty() {
        parts.push(format!("vanishes {}", list('-', &e.vanish)));
    }
    if parts.is_empty() {
        parts.push("no rule or outcome changes".into());
    }
    let pct = if e.warn_baseline > 0.0 {
        format!(" ({:+.0} %)", (e.warn_value - e.warn_baseline) / e.warn_baseline * 100.0)
    } else {
        String::new()
    };
    format!(
        "{s} ({} pair{}): {}; WARN lines {} -> {}{pct}",
        e.comparisons,
        if e.comparisons == 1 { "" } else { "s" },
        parts.join("; "),
        num(e.warn_baseline),
        num(e.warn_value)
    )
}

pub fn site_line(s: &Site) -> String {
    let cond = s.when.iter().map(|(a, v)| format!("{a}={v}")).collect::<Vec<_>>().join(" and ");
    let head = format!("{}: in {} of {} settings", s.item, s.fired, s.total);
    if s.fired == s.total {
        format!("{head}, every setting")
    } else if s.exact {
        format!("{head}, exactly when {cond}")
    } else if !cond.is_empty() {
        format!("{head}, only with {cond} (not in every such setting)")
    } else {
        format!("{head}: {}", s.settings.join("; "))
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// What cells.json keeps of the bisection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BisectOut {
    pub finding: String,
    pub range: String,
    /// Every release of the range, in order.
    pub releases: Vec<String>,
    pub probes: Vec<ProbeOut>,
    pub max_probes: usize,
    /// The answer in words, once the search ended.
    pub answer: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeOut {
    pub release: String,
    /// `seen`, `absent` or `inconclusive`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The cells (their indexes in the run) this release ran.
    pub cells: Vec<usize>,
}

/// Text lines of the bisection for the summaries (text and report.md).
pub fn bisect_lines(o: &BisectOut) -> Vec<String> {
    let mut v = vec![format!(
        "Bisection of `{}` over NCCL {} ({} releases: {}; at most {} probed):",
        o.finding,
        o.range,
        o.releases.len(),
        o.releases.join(", "),
        o.max_probes
    )];
    for (k, p) in o.probes.iter().enumerate() {
        let cells: Vec<String> = p.cells.iter().map(|c| c.to_string()).collect();
        let why = p.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
        v.push(format!("  probe {}: {:<14} {}{why}  [cell {}]", k + 1, p.release, p.state, cells.join(", ")));
    }
    match &o.answer {
        Some(a) => {
            v.push(format!("Answer: {a}"));
            v.push("  (a binary search: it assumes one change in the range; releases between the probed ones were not run)".into());
        }
        None => v.push("Answer: not reached (the run stopped first)".into()),
    }
    v
}

/// A plain run (the loader's NCCL only) of the built-in workload whose abort cells ran an NCCL
/// that no longer prints the abort-path warnings: say so, and give the command that shows them.
pub fn newer_nccl_hint(run: &Run) -> Option<String> {
    if run.workload != "builtin" || run.status != RunStatus::Complete || run.bisect.is_some() {
        return None;
    }
    let lib = run.axes.iter().position(|a| a.kind == AxisKind::NcclLib)?;
    if run.axes[lib].values.len() != 1 || !run.axes[lib].values[0].value.is_empty() {
        return None;
    }
    let td = run.axes.iter().position(|a| a.kind == AxisKind::Teardown)?;
    let abort = run.axes[td].values.iter().position(|v| v.value == "abort")?;
    let cells: Vec<_> = run.cells.iter().filter(|c| c.values[td] == abort).collect();
    let versions: Vec<Version> =
        cells.iter().filter_map(|c| c.nccl_version.as_deref().and_then(Version::parse)).collect();
    if cells.is_empty()
        || versions.len() != cells.len()
        || versions.iter().any(|v| *v < boundary::NCCL_ABORT_PAIR_SILENCED)
        || cells.iter().any(|c| c.rules.iter().any(|r| r.id == "nccl-abort-pair"))
    {
        return None;
    }
    let v = versions[0];
    Some(format!(
        "this machine's NCCL ({v}) no longer prints the abort-path warnings users report at teardown (`[Service thread] \
         Accept failed`, `Could not receive type from localRank`, `Failed to execute operation Close`): from {} on, \
         ncclCommAbort of healthy ranks is quiet. To see them: epdoctor repro --nccl {} --teardown abort",
        boundary::NCCL_ABORT_PAIR_SILENCED,
        SHOWS_ABORT_PAIR
    ))
}

/// The newest release that prints the abort-path trio (the one of DeepEP issue #41).
pub const SHOWS_ABORT_PAIR: &str = "2.22.3";

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's facts sit where cells.json has always had them: `step`, `nodes` and
    /// `rank_errors` at the cell's level after `leftovers`, `kind` and one detail for the run.
    #[test]
    fn launcher_details_keep_the_cells_json_shape() {
        let cell = Cell {
            index: 1,
            id: "001".into(),
            repeat: 1,
            values: vec![0],
            env: BTreeMap::new(),
            status: CellStatus::Ok,
            detail: "ok".into(),
            wall_s: 1.5,
            teardown_s: None,
            hung: vec![],
            processes: vec![],
            markers: BTreeMap::new(),
            nccl_version: None,
            transport: None,
            warn_lines: 0,
            verdict: None,
            rules: vec![],
            primary: None,
            explain_error: None,
            leftovers: Leftovers::default(),
            launch: CellLaunch {
                step: Some("6.0".into()),
                nodes: vec!["vm".into()],
                rank_errors: vec![RankError {
                    attempt: 0,
                    local_rank: 1,
                    file: "torchrun/x/attempt_0/1/error.json".into(),
                    message: "RuntimeError: boom".into(),
                    timestamp: None,
                    where_: None,
                }],
            },
            stacks: vec![],
            stack_groups: vec![],
            stack_notes: vec![],
        };
        let json = serde_json::to_string(&cell).unwrap();
        let want = concat!(
            r#"{"index":1,"id":"001","repeat":1,"values":[0],"env":{},"status":"ok","detail":"ok","wall_s":1.5,"#,
            r#""teardown_s":null,"hung":[],"processes":[],"markers":{},"nccl_version":null,"transport":null,"#,
            r#""warn_lines":0,"verdict":null,"rules":[],"primary":null,"explain_error":null,"#,
            r#""leftovers":{"processes":[],"shm":[],"sockets":[]},"step":"6.0","nodes":["vm"],"#,
            r#""rank_errors":[{"attempt":0,"local_rank":1,"file":"torchrun/x/attempt_0/1/error.json","#,
            r#""message":"RuntimeError: boom","timestamp":null,"where_":null}],"stacks":[]}"#
        );
        assert_eq!(json, want);
        let back: Cell = serde_json::from_str(&json).unwrap();
        assert_eq!(back.launch, cell.launch);
        // A local cell has none of them.
        let local = Cell { launch: CellLaunch::default(), ..cell };
        let json = serde_json::to_string(&local).unwrap();
        assert!(json.ends_with(r#""leftovers":{"processes":[],"shm":[],"sockets":[]},"stacks":[]}"#), "{json}");

        let slurm =
            LauncherOut::Slurm { slurm: SlurmAllocation { job_id: "6".into(), owned: true, nodes: vec!["vm".into()] } };
        let json = serde_json::to_string(&slurm).unwrap();
        assert_eq!(json, r#"{"kind":"slurm","slurm":{"job_id":"6","allocated_by_epdoctor":true,"nodes":["vm"]}}"#);
        assert_eq!(serde_json::from_str::<LauncherOut>(&json).unwrap(), slurm);
        let t = LauncherOut::Torchrun { command: vec!["torchrun".into(), "--nnodes=1".into()] };
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"kind":"torchrun","command":["torchrun","--nnodes=1"]}"#);
        assert_eq!(t.kind(), LauncherKind::Torchrun);
    }
}
