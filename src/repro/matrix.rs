//! The matrix: axes from the flags, validated once, and the cells (their cartesian product).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;
use serde::Serialize;

use super::result::AxisKind;

/// Teardown modes of the built-in worker, in the order the default matrix runs them. The worker's
/// list is the one list; `--teardown` is checked against it here, before anything runs.
pub fn teardown_mode_names() -> impl Iterator<Item = &'static str> {
    crate::worker::Teardown::ALL.into_iter().map(|m| m.name())
}

#[derive(Debug, Clone, Serialize)]
pub struct Axis {
    pub kind: AxisKind,
    /// `nccl-lib`, `teardown`, or the variable's name.
    pub name: String,
    /// Raw values: a library path ("" = the loader's choice), a mode, or an env value ("" = unset).
    pub values: Vec<String>,
}

impl Axis {
    /// How a value is shown in tables.
    pub fn label(&self, i: usize) -> String {
        let v = &self.values[i];
        match self.kind {
            AxisKind::NcclLib if v.is_empty() => "default".into(),
            // A release from the cache (or, in a bisection, one not fetched yet) by its name.
            AxisKind::NcclLib => crate::nccl::cache::release_of_lib(v).unwrap_or_else(|| {
                if v.contains('/') {
                    format!("lib{}", i + 1)
                } else {
                    v.clone()
                }
            }),
            AxisKind::Env if v.is_empty() => "(unset)".into(),
            _ => v.clone(),
        }
    }
}

/// What each cell runs.
#[derive(Debug, Clone)]
pub enum Workload {
    /// The built-in worker, `--ranks` processes.
    Builtin { ranks: usize },
    /// The user's command, once per cell.
    Command(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub workload: Workload,
    pub axes: Vec<Axis>,
    /// Variables set in every cell (e.g. the NCCL_DEBUG=WARN default).
    pub fixed_env: Vec<(String, String)>,
    /// Point NCCL_DEBUG_FILE into the cell folder (the user did not set it).
    pub set_debug_file: bool,
    pub repeat: usize,
    pub timeout_s: f64,
    pub grace_s: f64,
    pub cells: Vec<CellPlan>,
}

#[derive(Debug, Clone)]
pub struct CellPlan {
    /// 1-based position in the run.
    pub index: usize,
    /// Index into each axis' values, in axis order.
    pub values: Vec<usize>,
    /// 1-based repeat number.
    pub repeat: usize,
}

impl Plan {
    /// Variables to set (value Some) or remove (None) for a cell, fixed ones first.
    pub fn cell_env(&self, cell: &CellPlan) -> BTreeMap<String, Option<String>> {
        let mut env: BTreeMap<String, Option<String>> =
            self.fixed_env.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        for (axis, &i) in self.axes.iter().zip(&cell.values) {
            if axis.kind == AxisKind::Env {
                let v = &axis.values[i];
                env.insert(axis.name.clone(), (!v.is_empty()).then(|| v.clone()));
            }
        }
        env
    }

    pub fn value_of(&self, cell: &CellPlan, kind: AxisKind) -> Option<&str> {
        self.axes.iter().zip(&cell.values).find(|(a, _)| a.kind == kind).map(|(a, &i)| a.values[i].as_str())
    }
}

/// Everything about the process environment that planning reads, so tests can pass their own.
pub struct Host {
    /// Is a variable set in epdoctor's own environment?
    pub env_is_set: Box<dyn Fn(&str) -> bool>,
    /// GPUs visible to the ranks.
    pub gpus: usize,
}

impl Host {
    pub fn from_process() -> Self {
        Host { env_is_set: Box::new(|k| std::env::var_os(k).is_some()), gpus: count_gpus() }
    }
}

/// Validate the flags and build the plan; every usage error is found here, before any work, and
/// all of them are returned together (in the order of the flags they name).
pub fn plan(args: &super::Config, ctx: &Host) -> Result<Plan, Vec<String>> {
    let mut problems: Vec<String> = Vec::new();
    if args.repeat == 0 {
        problems.push("--repeat must be at least 1".into());
    }
    let wait = args.launch.alloc_timeout_s;
    if args.launch.launcher == super::launcher::LauncherKind::Slurm && !(wait.is_finite() && wait > 0.0) {
        problems.push(format!("--alloc-timeout must be a positive number of seconds, got {wait}"));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        problems.push(format!("--timeout must be a positive number of seconds, got {}", args.timeout));
    }
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        problems.push(format!("--grace must be zero or a positive number of seconds, got {}", args.grace));
    }
    let workload = workload(args, ctx, &mut problems);
    let mut axes = vec![lib_axis(&args.nccl_lib, &mut problems)];
    if matches!(workload, Workload::Builtin { .. }) {
        axes.push(teardown_axis(&args.teardown, &mut problems));
    }
    for spec in &args.env {
        match parse_env_axis(spec) {
            Err(e) => problems.push(format!("{e:#}")),
            Ok(axis) if axes.iter().any(|a| a.kind == AxisKind::Env && a.name == axis.name) => problems
                .push(format!("--env {} given twice; put every value in one --env {}=v1,v2", axis.name, axis.name)),
            Ok(axis) => axes.push(axis),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }

    let user_sets =
        |name: &str| (ctx.env_is_set)(name) || axes.iter().any(|a| a.kind == AxisKind::Env && a.name == name);
    let mut fixed_env = Vec::new();
    if !user_sets("NCCL_DEBUG") {
        fixed_env.push(("NCCL_DEBUG".to_string(), "WARN".to_string()));
    }
    let set_debug_file = !user_sets("NCCL_DEBUG_FILE");
    let cells = cells(&axes, args.repeat);
    Ok(Plan {
        workload,
        axes,
        fixed_env,
        set_debug_file,
        repeat: args.repeat,
        timeout_s: args.timeout,
        grace_s: args.grace,
        cells,
    })
}

/// The built-in worker (`--ranks` of them, else one per GPU up to 8, else 2) or the command.
fn workload(args: &super::Config, ctx: &Host, problems: &mut Vec<String>) -> Workload {
    if args.command.is_empty() {
        let ranks = match args.ranks {
            Some(0) => {
                problems.push("--ranks must be at least 1".into());
                1
            }
            Some(n) if n > 64 => {
                problems.push(format!("--ranks {n} is more than this harness runs on one host (64)"));
                n
            }
            Some(n) => n,
            None if ctx.gpus >= 2 => ctx.gpus.min(8),
            None => 2,
        };
        return Workload::Builtin { ranks };
    }
    if !args.teardown.is_empty() {
        problems.push(
            "--teardown applies to the built-in workload only; with `-- CMD` your command decides how it ends".into(),
        );
    }
    if args.command[0].is_empty() {
        problems.push("the command after `--` is empty".into());
    }
    Workload::Command(args.command.clone())
}

/// `--nccl-lib` (each an existing file, once), or the loader's choice.
fn lib_axis(paths: &[PathBuf], problems: &mut Vec<String>) -> Axis {
    let mut libs = Vec::new();
    for p in paths {
        // `--nccl system`: the loader's choice, as a value beside the libraries.
        if p.as_os_str().is_empty() {
            if libs.iter().any(String::is_empty) {
                problems.push("--nccl system given twice".into());
            } else {
                libs.push(String::new());
            }
            continue;
        }
        match std::fs::metadata(p) {
            Err(e) => problems.push(format!("--nccl-lib {}: {e}", p.display())),
            Ok(m) if !m.is_file() => {
                problems.push(format!("--nccl-lib {} is not a file (give the path of a libnccl.so)", p.display()))
            }
            Ok(_) => {
                let abs = std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p));
                let s = abs.to_string_lossy().into_owned();
                if libs.contains(&s) {
                    problems.push(format!("--nccl-lib {} given twice", p.display()));
                } else {
                    libs.push(s);
                }
            }
        }
    }
    if libs.is_empty() {
        libs.push(String::new());
    }
    Axis { kind: AxisKind::NcclLib, name: "nccl-lib".into(), values: libs }
}

/// `--teardown` (each a mode of the worker, once), or every mode.
fn teardown_axis(given: &[String], problems: &mut Vec<String>) -> Axis {
    let mut modes: Vec<String> = Vec::new();
    for m in given {
        let m = m.trim();
        if !teardown_mode_names().any(|k| k == m) {
            problems.push(format!(
                "unknown teardown mode {m:?}; the modes are: {}",
                teardown_mode_names().collect::<Vec<_>>().join(", ")
            ));
        } else if modes.iter().any(|x| x == m) {
            problems.push(format!("teardown mode {m:?} given twice"));
        } else {
            modes.push(m.to_string());
        }
    }
    if modes.is_empty() {
        modes = teardown_mode_names().map(String::from).collect();
    }
    Axis { kind: AxisKind::Teardown, name: "teardown".into(), values: modes }
}

/// The cartesian product of the axes, last axis fastest, each setting `repeat` times in a row.
fn cells(axes: &[Axis], repeat: usize) -> Vec<CellPlan> {
    let mut cells = Vec::new();
    let mut idx = vec![0usize; axes.len()];
    'outer: loop {
        for r in 1..=repeat {
            cells.push(CellPlan { index: cells.len() + 1, values: idx.clone(), repeat: r });
        }
        // Odometer over the axes, last axis fastest.
        for k in (0..axes.len()).rev() {
            idx[k] += 1;
            if idx[k] < axes[k].values.len() {
                continue 'outer;
            }
            idx[k] = 0;
        }
        break;
    }
    cells
}

/// `NAME=v1,v2,...`; an empty value means "unset".
pub fn parse_env_axis(spec: &str) -> anyhow::Result<Axis> {
    let Some((name, values)) = spec.split_once('=') else {
        bail!("--env {spec:?}: expected NAME=V1,V2,... (e.g. NCCL_DEBUG=WARN,INFO)");
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        bail!("--env {spec:?}: {name:?} is not a variable name (letters, digits, _; not starting with a digit)");
    }
    if name == super::CELL_ENV {
        bail!("--env {spec:?}: {name} marks the cell's processes for the harness and cannot be an axis");
    }
    let mut vals: Vec<String> = Vec::new();
    for v in values.split(',') {
        if v.contains('\0') {
            bail!("--env {spec:?}: a value contains a NUL byte");
        }
        if vals.iter().any(|x| x == v) {
            bail!("--env {spec:?}: value {v:?} given twice");
        }
        vals.push(v.to_string());
    }
    Ok(Axis { kind: AxisKind::Env, name: name.to_string(), values: vals })
}

/// GPUs the ranks would see: CUDA_VISIBLE_DEVICES when set, else the driver's /proc entries.
pub fn count_gpus() -> usize {
    if let Some(v) = std::env::var_os("CUDA_VISIBLE_DEVICES") {
        let v = v.to_string_lossy();
        // CUDA stops at the first invalid entry; "-1" or "" hides every GPU.
        return v.split(',').map(str::trim).take_while(|s| !s.is_empty() && !s.starts_with('-')).count();
    }
    crate::sys::procs::nvidia_gpu_count()
}
