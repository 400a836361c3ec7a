//! `repro`: run the built-in workload (or the user's command) under a matrix of settings, explain
//! every cell with the same engine as `explain`, and compare.
//!
//! Test hooks (environment variables read only here, documented in docs/repro.md):
//! `EPDOCTOR_WORKER_CMD` names a program started instead of `epdoctor worker` (stand-in ranks),
//! `EPDOCTOR_SHM_DIR` replaces /dev/shm when looking for leftover NCCL files.

pub mod bisect;
pub mod cell;
pub mod compare;
pub mod interrupt;
pub mod launch;
pub mod launcher;
pub mod leftovers;
pub mod matrix;
pub mod nccl_axis;
pub mod reporter;
pub mod stacks;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::error::Typed;
use crate::model::run::{
    self as result, AxisKind, AxisOut, AxisValueOut, CellStatus, Run, RunStatus, CELLS_FILE, REPORT_FILE,
};
use crate::model::Analysis;
use crate::output::repro as render;
use crate::rules::Engine;
use matrix::{Plan, Workload};
use reporter::{Event, Reporter};

pub const WORKER_CMD_ENV: &str = "EPDOCTOR_WORKER_CMD";
/// Names the cell's processes (and their children) in their environment; the value is the cell folder.
pub const CELL_ENV: &str = "EPDOCTOR_CELL_DIR";

/// The one call into the explain engine (built once per run, before any cell).
pub(crate) fn explain_cell(paths: &[PathBuf], engine: &Engine) -> anyhow::Result<Analysis> {
    let opts = crate::rules::Options { evidence: 5, one_job: true, ..Default::default() };
    crate::pipeline::explain_paths(engine, paths, &opts)
}

/// report.md is meant to be pasted into an issue: one redactor for it, knowing this machine's name.
fn report_md(run: &Run, dir: &Path) -> String {
    let mut r = crate::output::redact::Redactor::new();
    if let Some(h) = crate::sys::hostname() {
        r.learn_host(&h);
    }
    render::markdown(run, dir, &mut crate::output::markdown::Md::new(Some(&mut r)), 1)
}

struct SignalStop;

impl launch::Interrupts for SignalStop {
    fn count(&self) -> usize {
        interrupt::count()
    }
    fn name(&self) -> String {
        interrupt::last().map(|s| s.as_str().to_string()).unwrap_or_else(|| "a signal".into())
    }
}

/// What `repro` runs, from its flags (src/commands/repro.rs builds it from the command line).
#[derive(Debug, Clone)]
pub struct Config {
    /// Ranks per cell; None: the number of GPUs (at most 8), or 2 on one GPU.
    pub ranks: Option<usize>,
    /// Teardown modes (empty: all); built-in workload only.
    pub teardown: Vec<String>,
    /// Environment axes, `NAME=v1,v2`.
    pub env: Vec<String>,
    pub nccl_lib: Vec<PathBuf>,
    /// `--nccl`: releases, `system` or paths, resolved through src/nccl/ (nccl_axis.rs).
    pub nccl: Vec<String>,
    /// `--cuda`, `--offline`: how releases are resolved.
    pub cuda: Option<u32>,
    pub offline: bool,
    /// `--bisect-nccl FROM..TO --finding X` (bisect.rs).
    pub bisect_nccl: Option<String>,
    pub finding: Option<String>,
    pub repeat: usize,
    pub timeout: f64,
    pub grace: f64,
    pub out: Option<PathBuf>,
    pub size: crate::worker::Size,
    /// No progress bar, no per-cell lines, no notes while fetching NCCL releases.
    pub quiet: bool,
    pub rules: crate::rules::RuleSource,
    /// The user's command (empty: the built-in workload).
    pub command: Vec<String>,
    /// How each cell's ranks start (locally, as a Slurm step, under torchrun).
    pub launch: LaunchConfig,
}

pub use launcher::{LaunchConfig, LauncherKind};

/// A finished (or interrupted) run: what the writers and the exit status need.
pub struct Finished {
    pub run: Run,
    pub dir: PathBuf,
    /// Every cell of the built-in workload failed before starting it: rank 0's reason.
    pub never_started: Option<String>,
}

impl Finished {
    /// Whether the harness failed: a cell could not be launched, or the run was interrupted.
    pub fn harness_failed(&self) -> bool {
        self.run.is_partial() || self.run.cells.iter().any(|c| c.status == CellStatus::LaunchError)
    }
}

/// Run the matrix of `args`; what happens meanwhile goes to `reporter`.
pub fn run(args: &Config, reporter: &mut dyn Reporter) -> anyhow::Result<Finished> {
    // Every usage error, found before anything runs, in one message.
    let mut problems = Vec::new();
    // Orphans of the cells' processes come back to epdoctor, which ends them with the cell.
    crate::sys::become_subreaper();
    let host = matrix::Host::from_process();
    let engine = crate::rules::engine(&args.rules).map_err(|e| problems.push(format!("{e:#}"))).ok();
    // Everything but --nccl is checked first, so that a bad flag costs no download; then NCCL
    // releases by version (fetched, or from the cache) become library paths.
    if let Err(p) = matrix::plan(args, &host) {
        problems.extend(p);
    }
    let resolved = nccl_axis::resolve(args, &mut problems)?;
    let args = &resolved.config;
    let plan = if problems.is_empty() { matrix::plan(args, &host).map_err(|p| problems.extend(p)).ok() } else { None };
    if let (Some(b), Some(e)) = (&resolved.bisect, &engine) {
        if !b.finding.starts_with("outcome:") && !e.rules.iter().any(|r| r.def.id == b.finding) {
            problems.push(format!(
                "--finding {}: no rule has that id (`epdoctor rules list`); outcomes are hang, failed, leftovers",
                b.finding
            ));
        }
    }
    let program = worker_program().map_err(|e| problems.push(format!("{e:#}"))).ok();
    if let (Some(Workload::Builtin { .. }), None, true) = (
        plan.as_ref().map(|p| &p.workload),
        std::env::var_os(WORKER_CMD_ENV),
        launcher::runs_here(args.launch.launcher),
    ) {
        // The worker would fail the same way in every cell: say it once, before running anything.
        let need_nccl = resolved.uses_loader && crate::worker::libs::find_runtime_nccl().is_none();
        if let Err(e) = crate::worker::libs::check_present(need_nccl) {
            problems.push(format!("{e:#}"));
        }
    }
    crate::error::usage(problems)?;
    let (Some(plan), Some(engine), Some(program)) = (plan, engine, program) else {
        unreachable!("no problem was found, so each part was built")
    };
    // A run folder that cannot be made where the user asked is theirs to fix; any failure after
    // it exists is the harness's (exit 5).
    let dir = create_run_dir(args.out.as_deref()).map_err(|e| crate::error::usage_one(format!("{e:#}")))?;
    match resolved.bisect {
        Some(setup) => bisect::run(args, plan, &engine, program, dir, setup, reporter).harness(),
        None => run_cells(args, plan, &engine, program, dir, reporter).harness(),
    }
}

/// The runner: every cell in turn, the run folder's files after each, events to `reporter`.
fn run_cells(
    args: &Config,
    plan: Plan,
    engine: &Engine,
    program: OsString,
    dir: PathBuf,
    reporter: &mut dyn Reporter,
) -> anyhow::Result<Finished> {
    let (launcher, _signals) = start(args, &plan, &dir, reporter)?;
    let h = harness(args, launcher.as_ref(), program, engine);
    let mut run = new_run(&plan, args);
    run.launcher = launcher.describe();
    write_outputs(&dir, &mut run, &plan)?;

    let of = plan.cells.len();
    reporter.report(Event::Plan { dir: &dir, cells: of });
    let stop = SignalStop;
    for cp in &plan.cells {
        if interrupt::count() > 0 {
            break;
        }
        let name = cell_name(&plan, cp);
        reporter.report(Event::CellStarted { index: cp.index, name: &name });
        let cell_dir = dir.join("cells").join(&name);
        let cell = cell::run_cell(&h, &plan, cp, &cell_dir, &stop, &mut || reporter.report(Event::Tick))?;
        run.cells.push(cell);
        write_outputs(&dir, &mut run, &plan)?;
        reporter.report(Event::CellFinished { cell: &run.cells[run.cells.len() - 1], of, probe: None });
    }

    if interrupt::count() > 0 {
        let by = launch::Interrupts::name(&stop);
        reporter.report(Event::Interrupted { by: &by });
        run.status = RunStatus::Interrupted;
        run.interrupted_by = Some(by);
    } else {
        run.status = RunStatus::Complete;
    }
    reporter.report(Event::End { status: run.status });
    write_outputs(&dir, &mut run, &plan)?;
    let never_started = workload_never_started(&plan, &run, &dir);
    Ok(Finished { run, dir, never_started })
}

/// Every cell of the built-in workload failed before any rank printed a marker (no GPU, no driver,
/// no NCCL): the run measured nothing, which is an error, not a result.
fn workload_never_started(plan: &Plan, run: &Run, dir: &Path) -> Option<String> {
    let all_failed_silently = matches!(plan.workload, Workload::Builtin { .. })
        && run.status == RunStatus::Complete
        && !run.cells.is_empty()
        && run.cells.iter().all(|c| c.status == CellStatus::Failed && c.markers.is_empty());
    if !all_failed_silently {
        return None;
    }
    let c = &run.cells[0];
    let log = dir.join("cells").join(&c.id).join(&c.processes.first()?.log);
    Some(render::last_line(&log).unwrap_or_else(|| format!("nothing (see {})", log.display())))
}

/// Before the first cell: the signal handlers, the launcher (under Slurm outside an allocation it
/// asks salloc for one, so it comes after every check; a signal while salloc waits cancels the
/// request), the cells folder.
fn start(
    args: &Config,
    plan: &Plan,
    dir: &Path,
    reporter: &mut dyn Reporter,
) -> anyhow::Result<(Box<dyn launcher::Launcher>, interrupt::Guard)> {
    let signals = interrupt::install()?;
    let launcher = launcher::acquire(&args.launch, args.ranks, &plan.workload, &SignalStop, &mut |what| {
        reporter.report(Event::Waiting { what })
    })?;
    std::fs::create_dir(dir.join("cells")).with_context(|| format!("creating {}/cells", dir.display()))?;
    Ok((launcher, signals))
}

fn harness<'a>(
    args: &Config,
    launcher: &'a dyn launcher::Launcher,
    worker_program: OsString,
    engine: &'a Engine,
) -> cell::Harness<'a> {
    cell::Harness {
        launcher,
        worker_program,
        size: args.size,
        ranks_flag: args.ranks,
        shm_dir: leftovers::shm_dir(),
        engine,
        fr_file_var: cell::fr_file_var(command_torch(&args.command).as_deref()),
    }
}

/// The version of the torch a `-- CMD` imports (found without importing it), when CMD runs Python.
fn command_torch(cmd: &[String]) -> Option<String> {
    let python = crate::nccl::torch::python_of(cmd)?;
    crate::nccl::torch::find(&python, std::time::Duration::from_secs(10))?.version
}

/// What starts the built-in worker: epdoctor itself, or the `EPDOCTOR_WORKER_CMD` stand-in.
fn worker_program() -> anyhow::Result<OsString> {
    match std::env::var_os(WORKER_CMD_ENV) {
        Some(p) if !Path::new(&p).is_file() => bail!(
            "{WORKER_CMD_ENV}={} is not a file (it names the program started instead of the worker)",
            p.to_string_lossy()
        ),
        Some(p) => Ok(p),
        None => Ok(std::env::current_exe().context("finding epdoctor's own executable to start the worker")?.into()),
    }
}

/// `007-abort-lib2-NCCL_DEBUG=INFO` (`-r2` for repeats): the axis values that vary, safe as a file name.
pub fn cell_name(plan: &Plan, cp: &matrix::CellPlan) -> String {
    let mut parts: Vec<String> = plan
        .axes
        .iter()
        .zip(&cp.values)
        .filter(|(a, _)| a.values.len() > 1)
        .map(|(a, &i)| match a.kind {
            AxisKind::Env => format!("{}={}", a.name, a.label(i)),
            _ => a.label(i),
        })
        .collect();
    if plan.repeat > 1 {
        parts.push(format!("r{}", cp.repeat));
    }
    let slug: String = parts
        .join("-")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '=' | '+' | '-' | '_') { c } else { '_' })
        .take(80)
        .collect();
    if slug.is_empty() {
        format!("{:03}", cp.index)
    } else {
        format!("{:03}-{slug}", cp.index)
    }
}

/// A new run folder: `--out` (a missing or empty folder) or epdoctor-repro-<date>-<time>. Never
/// an existing one with something in it.
fn create_run_dir(out: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(d) = out {
        match std::fs::read_dir(d) {
            Ok(mut rd) => {
                if rd.next().is_some() {
                    bail!(
                        "--out {}: the folder exists and is not empty; a run folder is never overwritten",
                        d.display()
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            }
            Err(e) => return Err(e).with_context(|| format!("--out {}", d.display())),
        }
        return Ok(std::path::absolute(d)?);
    }
    let base = format!("epdoctor-repro-{}", local_time("%Y%m%d-%H%M%S"));
    for n in 1..1000 {
        let name = if n == 1 { base.clone() } else { format!("{base}-{n}") };
        match std::fs::create_dir(&name) {
            Ok(()) => return Ok(std::path::absolute(&name)?),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating the run folder {name}")),
        }
    }
    bail!("could not find a free name for the run folder ({base}-N); give one with --out")
}

fn local_time(fmt: &str) -> String {
    let fmt = std::ffi::CString::new(fmt).unwrap_or_default();
    let mut buf = [0u8; 64];
    // SAFETY: localtime_r fills `tm`; strftime writes at most buf.len() bytes.
    let n = unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm)
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn new_run(plan: &Plan, args: &Config) -> Run {
    let (workload, command, ranks) = match &plan.workload {
        Workload::Builtin { ranks } => ("builtin", Vec::new(), Some(*ranks)),
        Workload::Command(c) => ("command", c.clone(), args.ranks),
    };
    let lint = crate::lint::for_command(&command);
    Run {
        schema_version: result::SCHEMA_VERSION,
        tool_version: crate::meta::VERSION_LINE.to_string(),
        status: RunStatus::Running,
        interrupted_by: None,
        started: local_time("%Y-%m-%d %H:%M:%S"),
        workload: workload.into(),
        command,
        ranks,
        timeout_s: plan.timeout_s,
        grace_s: plan.grace_s,
        repeat: plan.repeat,
        fixed_env: plan.fixed_env.iter().cloned().collect(),
        axes: Vec::new(),
        launcher: None,
        cells_planned: plan.cells.len(),
        cells: Vec::new(),
        effects: Vec::new(),
        where_fired: Vec::new(),
        lint,
        bisect: None,
    }
}

/// Axis labels as shown: an NCCL library is named by the version its cells ran, when that is known
/// and tells it apart from the others.
fn axes_out(plan: &Plan, run: &Run) -> Vec<AxisOut> {
    plan.axes
        .iter()
        .enumerate()
        .map(|(a, axis)| {
            let mut labels: Vec<String> = (0..axis.values.len()).map(|i| axis.label(i)).collect();
            if axis.kind == AxisKind::NcclLib {
                let ran: Vec<Option<String>> = (0..axis.values.len())
                    .map(|i| {
                        let v: BTreeSet<&String> = run
                            .cells
                            .iter()
                            .filter(|c| c.values[a] == i)
                            .filter_map(|c| c.nccl_version.as_ref())
                            .collect();
                        (v.len() == 1).then(|| v.into_iter().next().unwrap().clone())
                    })
                    .collect();
                let distinct = ran.iter().flatten().collect::<BTreeSet<_>>().len() == ran.iter().flatten().count();
                for (i, r) in ran.into_iter().enumerate() {
                    if let (Some(r), true) = (r, distinct) {
                        labels[i] = if axis.values[i].is_empty() { format!("default ({r})") } else { r };
                    }
                }
            }
            AxisOut {
                name: axis.name.clone(),
                kind: axis.kind.clone(),
                values: axis
                    .values
                    .iter()
                    .zip(labels)
                    .map(|(v, label)| AxisValueOut { value: v.clone(), label })
                    .collect(),
            }
        })
        .collect()
}

/// cells.json and report.md, rewritten after every cell so that a run cut short still has both.
fn write_outputs(dir: &Path, run: &mut Run, plan: &Plan) -> anyhow::Result<()> {
    run.axes = axes_out(plan, run);
    run.effects = compare::effects(&run.axes, &run.cells);
    run.where_fired = compare::sites(&run.axes, &run.cells);
    let json = serde_json::to_string_pretty(&*run)? + "\n";
    write_atomic(&dir.join(CELLS_FILE), &json)?;
    write_atomic(&dir.join(REPORT_FILE), &report_md(run, dir))
}

fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Read a run folder's cells.json: the one loader (`epdoctor report --repro DIR`).
pub fn load_run(dir: &Path) -> anyhow::Result<Run> {
    let p = dir.join(CELLS_FILE);
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not an epdoctor repro result", p.display()))
}
