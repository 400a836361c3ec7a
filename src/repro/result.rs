//! What a run wrote: `cells.json` in the run folder. `epdoctor report --repro DIR` reads it back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::launch::Outcome;
use super::leftovers::Leftovers;
use crate::model::{Severity, Verdict};
use crate::sys::markers::RankMarkers;

pub const SCHEMA_VERSION: u32 = 1;
pub const CELLS_FILE: &str = "cells.json";
pub const REPORT_FILE: &str = "report.md";
pub const HARNESS_FILE: &str = "harness.log";

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
    pub lint: Vec<crate::model::Finding>,
    /// `--bisect-nccl`: the releases probed and the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bisect: Option<super::bisect::Outcome>,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LauncherOut {
    /// `slurm` or `torchrun`.
    pub kind: String,
    /// The allocation every cell's job step ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<super::slurm::Allocation>,
    /// What starts each cell, before the workload's own command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
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
    /// Slurm: the cell's job step (`JOB.STEP`) and its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// torchrun: each failed rank's error file (TORCHELASTIC_ERROR_FILE), as torchelastic wrote it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_errors: Vec<super::torchrun::RankError>,
    /// The stack of every process still running at the deadline.
    #[serde(default)]
    pub stacks: Vec<ProcStack>,
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
}
