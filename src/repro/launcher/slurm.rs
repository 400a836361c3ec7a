//! `--launcher slurm`: each cell is one job step of one allocation (the user's, when epdoctor runs
//! inside one, or one it asks `salloc` for and gives back at the end). Every task writes its own
//! file (`rank%t.log`), the tasks' ends come from srun's own report (`srun -v`), the deadline and
//! interrupts go through `scancel` on the step, and after the step a probe runs on every node of the
//! allocation (`epdoctor env --leftovers --cell TAG --kill`).
//!
//! The cell's variables reach the tasks through srun's own environment and `--export=ALL` (a value
//! holding a comma cannot be written in `--export=NAME=value` form).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::Signal;
use regex::Regex;

use super::{CellCtx, Finish, LaunchConfig, Launcher, Ranks};
use crate::model::run::{
    CellLaunch, LauncherOut, LeftoverProcess, Leftovers, NodeLeftovers, NodeStacks, Outcome, Process, SlurmAllocation,
};
use crate::repro::launch::{self, Execution, Interrupts, Limits, Spec, Stopper};
use crate::repro::leftovers::{self as lo, Membership};
use crate::repro::stacks::{self, Capture};
use crate::repro::CELL_ENV;

/// srun's own messages (its stderr), under the cell folder; not a rank's log.
pub const SRUN_LOG: &str = "slurm/srun.log";
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);
/// py-spy and eu-stack get 30 s each per process (stacks::TOOL_LIMIT), all processes at once.
const STACKS_TIMEOUT: Duration = Duration::from_secs(90);

/// The allocation the cells run in (`info`: what cells.json records of it); an allocation
/// epdoctor asked for is given back when this is dropped.
#[derive(Debug)]
pub struct Allocation {
    pub info: SlurmAllocation,
    geometry: Vec<String>,
    srun_args: Vec<String>,
    exe: PathBuf,
}

/// Each cell one job step of one allocation.
pub struct Slurm {
    alloc: Allocation,
    /// What the current cell's stopper did (cells run one at a time).
    stops: Arc<Mutex<Stops>>,
}

impl Slurm {
    pub fn new(alloc: Allocation) -> Slurm {
        Slurm { alloc, stops: Arc::default() }
    }

    fn take_stops(&self) -> Stops {
        std::mem::take(&mut *self.stops.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Launcher for Slurm {
    fn describe(&self) -> Option<LauncherOut> {
        Some(LauncherOut::Slurm { slurm: self.alloc.info.clone() })
    }

    /// One step: srun starts the same program once per task (the worker reads its place from
    /// Slurm's variables); the deadline and interrupts go through scancel.
    fn start(&self, cell: &CellCtx) -> anyhow::Result<Vec<Spec>> {
        self.take_stops();
        let (program, args, env) = cell.work.one_program(cell.dir);
        Ok(vec![self.alloc.step_spec(cell.dir, &program, &args, env, self.stops.clone())?])
    }

    /// Here only srun's own group: the tasks are found on their nodes by their tag.
    fn membership(&self, _cell: &CellCtx, pgids: Vec<i32>) -> Membership {
        Membership { pgids, env: None, orphans: false }
    }

    /// Every task's stack from its node; srun's own (this host) only when no node answered.
    fn stacks(&self, cell: &CellCtx, alive: &[(String, i32)]) -> Capture {
        let t0 = std::time::Instant::now();
        let (nodes, lines) = self.alloc.stacks(cell.dir, &cell.tag);
        let mut cap = if nodes.iter().any(|n| !n.stacks.is_empty()) {
            stacks::write(cell.dir, nodes, t0)
        } else {
            let here = lo::cell_processes(&self.membership(cell, alive.iter().map(|(_, p)| *p).collect()));
            let mut cap = stacks::capture(&here, alive, cell.dir);
            cap.notes.extend(nodes.into_iter().flat_map(|n| n.notes));
            cap
        };
        cap.notes.extend(lines);
        cap
    }

    /// Every node's probe, then what srun left on this host.
    fn leftovers(&self, cell: &CellCtx, ex: &Execution) -> (Leftovers, Vec<String>) {
        let (mut left, lines) = self.alloc.probe(cell.dir, &cell.tag, ex.start_unix);
        lo::collect_here(&self.membership(cell, ex.pgids.clone()), None, &mut left);
        (left, lines)
    }

    /// Each task from srun's report, then srun itself: a step whose srun failed is not ok even if
    /// every task was.
    fn finish(&self, cell: &CellCtx, _specs: &[Spec], ex: &Execution) -> Finish {
        let stops = self.take_stops();
        let (step, nodes) = Allocation::step_of(cell.dir);
        let processes = self
            .alloc
            .task_outcomes(cell.dir, ex, &stops)
            .into_iter()
            .map(|(outcome, log, node)| Process { outcome, log, node })
            .collect();
        Finish {
            processes,
            launch: CellLaunch { step, nodes, ..Default::default() },
            stop_lines: stops.lines,
            notes: Vec::new(),
        }
    }

    fn ranks(&self) -> Ranks {
        Ranks::Tasks { launcher: "srun" }
    }
}

/// What the stopper did to the step, for the per-task outcome: which tasks had ended when.
#[derive(Debug, Default)]
pub struct Stops {
    /// (signal sent, tasks whose end srun had reported by then)
    pub sent: Vec<(Signal, BTreeSet<usize>)>,
    pub lines: Vec<String>,
}

impl Allocation {
    /// The current allocation (SLURM_JOB_ID), else a new one from salloc (what it waits for goes
    /// to `say`; an interrupt or `--alloc-timeout` cancels the request).
    pub fn acquire(
        l: &LaunchConfig,
        ranks: Option<usize>,
        stop: &dyn Interrupts,
        say: &mut dyn FnMut(&str),
    ) -> anyhow::Result<Allocation> {
        let exe = std::env::current_exe().context("finding epdoctor's own executable for the leftovers probe")?;
        let mut geometry = Vec::new();
        if let Some(n) = l.nodes {
            geometry.push(format!("--nodes={n}"));
        }
        if let Some(k) = l.ntasks_per_node {
            geometry.push(format!("--ntasks-per-node={k}"));
        }
        if let Some(n) = ranks {
            geometry.push(format!("--ntasks={n}"));
        }
        let (job_id, owned) = match std::env::var("SLURM_JOB_ID") {
            Ok(j) if !j.trim().is_empty() => (j.trim().to_string(), false),
            _ => (salloc(l, &geometry, stop, say)?, true),
        };
        let info = SlurmAllocation { job_id, owned, nodes: Vec::new() };
        let mut a = Allocation { info, geometry, srun_args: l.srun_args.clone(), exe };
        // From here on, Drop gives an owned allocation back whatever happens.
        a.info.nodes = a.node_list()?;
        Ok(a)
    }

    fn node_list(&self) -> anyhow::Result<Vec<String>> {
        let list = output(Command::new("squeue").args(["--noheader", "--jobs", &self.info.job_id, "--format", "%N"]))?;
        let list = list.trim();
        if list.is_empty() {
            bail!("squeue lists no nodes for job {} (is it running?)", self.info.job_id);
        }
        let names = output(Command::new("scontrol").args(["show", "hostnames", list]))?;
        Ok(names.split_whitespace().map(String::from).collect())
    }

    /// The job step of one cell: srun starts `program args` once per task.
    pub fn step_spec(
        &self,
        cell_dir: &Path,
        program: &OsString,
        args: &[OsString],
        env: BTreeMap<String, Option<String>>,
        stops: Arc<Mutex<Stops>>,
    ) -> anyhow::Result<Spec> {
        let dir = cell_dir.to_string_lossy();
        if dir.contains('%') || dir.contains('\\') {
            bail!("the run folder {dir} holds % or \\, which srun reads as a file-name pattern; choose another --out");
        }
        std::fs::create_dir_all(cell_dir.join("slurm"))?;
        let tag = cell_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut a: Vec<OsString> = vec![
            format!("--jobid={}", self.info.job_id).into(),
            format!("--job-name=epdoctor-{tag}").into(),
            "--verbose".into(),
            "--kill-on-bad-exit=1".into(),
            "--export=ALL".into(),
            "--input=none".into(),
            format!("--output={dir}/rank%t.log").into(),
        ];
        a.extend(self.geometry.iter().map(OsString::from));
        a.extend(self.srun_args.iter().map(OsString::from));
        a.push(program.clone());
        a.extend(args.iter().cloned());
        let log = cell_dir.join(SRUN_LOG);
        let srun_log = log.clone();
        let stopper = Stopper(Arc::new(move |pid, sig| stop_step(&srun_log, pid, sig, &stops)));
        Ok(Spec { label: "srun".into(), program: "srun".into(), args: a, env, log, stopper: Some(stopper) })
    }

    /// One outcome per task from srun's report, with the harness's own part in its end (deadline,
    /// interrupt, SIGKILL) from what had ended when the stopper acted; srun's own outcome last.
    pub fn task_outcomes(
        &self,
        cell_dir: &Path,
        ex: &Execution,
        stops: &Stops,
    ) -> Vec<(Outcome, String, Option<String>)> {
        let report = Report::parse(&std::fs::read_to_string(cell_dir.join(SRUN_LOG)).unwrap_or_default());
        let mut out = Vec::new();
        for (&t, node) in &report.tasks {
            let mut o = Outcome { label: t.to_string(), ..Default::default() };
            match report.ends.get(&t) {
                Some(End::Exit(c)) => o.exit_code = Some(*c),
                Some(End::Signal(s)) => {
                    o.signal = Some(*s);
                    o.signal_name = Some(launch::signal_name(*s));
                }
                Some(End::Other(text)) => o.signal_name = Some(text.clone()),
                None => {}
            }
            // slurmstepd could not exec the program: the task never ran (as a local spawn failure).
            let log = cell_dir.join(format!("rank{t}.log"));
            if let Some(e) = exec_failure(&log).or_else(|| report.exec_errors.get(&t).cloned()) {
                o.launch_error = Some(format!("{e} (task {t} on {node})"));
            }
            for (sig, ended) in &stops.sent {
                if ended.contains(&t) {
                    continue;
                }
                match sig {
                    Signal::SIGKILL => o.sigkill = true,
                    _ if ex.deadline_hit => o.deadline = true,
                    _ => o.interrupted = true,
                }
            }
            out.push((o, format!("rank{t}.log"), Some(node.clone())));
        }
        if let Some(o) = ex.outcomes.first() {
            out.push((o.clone(), SRUN_LOG.into(), None));
        }
        out
    }

    /// The step's id (`JOB.STEP`) and nodes, for cells.json.
    pub fn step_of(cell_dir: &Path) -> (Option<String>, Vec<String>) {
        let r = Report::parse(&std::fs::read_to_string(cell_dir.join(SRUN_LOG)).unwrap_or_default());
        (r.step, r.tasks.values().cloned().collect::<BTreeSet<_>>().into_iter().collect())
    }

    /// Run the leftovers probe on every node of the allocation: each node lists (and kills) the
    /// processes carrying the cell's tag, its NCCL sockets and the /dev/shm files since `since`.
    pub fn probe(&self, cell_dir: &Path, tag: &str, since: f64) -> (Leftovers, Vec<String>) {
        let args = ["--leftovers", "--cell", tag, "--since", &format!("{since}"), "--kill"];
        let (nodes, lines) =
            self.on_every_node::<NodeLeftovers>(cell_dir, "probe", "leftovers probe", &args, PROBE_TIMEOUT);
        let lines = lines.into_iter().map(|l| format!("{} {l}", launch::HARNESS_PREFIX)).collect();
        let mut left = Leftovers::default();
        for nl in nodes {
            left.processes.extend(nl.leftovers.processes.into_iter().map(|mut p| {
                p.node = Some(nl.node.clone());
                p
            }));
            left.shm.extend(nl.leftovers.shm);
            left.sockets.extend(nl.leftovers.sockets);
            left.probed_nodes.push(nl.node);
        }
        (left, lines)
    }

    /// At the deadline, before scancel: every task's stack, taken on its node (py-spy, eu-stack,
    /// /proc there) by the stack probe, each labelled by the task's SLURM_PROCID.
    pub fn stacks(&self, cell_dir: &Path, tag: &str) -> (Vec<NodeStacks>, Vec<String>) {
        let (mut nodes, lines) = self.on_every_node::<NodeStacks>(
            cell_dir,
            "stacks",
            "stack probe",
            &["--stacks", "--cell", tag],
            STACKS_TIMEOUT,
        );
        for n in &mut nodes {
            for s in &mut n.stacks {
                s.stack.node = Some(n.node.clone());
            }
        }
        (nodes, lines)
    }

    /// `epdoctor env ARGS --format json` once on every node of the allocation, in a step that may
    /// run while the cell's step holds the CPUs (`--overlap`); each node's answer, and a line for
    /// each node or step that gave none.
    fn on_every_node<T: serde::de::DeserializeOwned>(
        &self,
        cell_dir: &Path,
        name: &str,
        what: &str,
        env_args: &[&str],
        timeout: Duration,
    ) -> (Vec<T>, Vec<String>) {
        let mut lines = Vec::new();
        let n = self.info.nodes.len().max(1);
        let dir = cell_dir.to_string_lossy();
        let args: Vec<OsString> = [
            format!("--jobid={}", self.info.job_id),
            format!("--job-name=epdoctor-{name}"),
            format!("--nodes={n}"),
            "--ntasks-per-node=1".into(),
            "--overlap".into(),
            "--export=ALL".into(),
            "--input=none".into(),
            format!("--output={dir}/slurm/{name}.%t.json"),
            // Anything on stderr must not spoil the JSON.
            format!("--error={dir}/slurm/{name}.%t.err"),
        ]
        .into_iter()
        .map(OsString::from)
        .chain([self.exe.clone().into(), "env".into()])
        .chain(env_args.iter().map(OsString::from))
        .chain(["--format".into(), "json".into()])
        .collect();
        // The probe itself must not carry the cell's tag.
        let env = BTreeMap::from([(CELL_ENV.to_string(), None)]);
        let log = format!("slurm/{name}.log");
        let spec =
            Spec { label: what.into(), program: "srun".into(), args, env, log: cell_dir.join(&log), stopper: None };
        struct Never;
        impl Interrupts for Never {
            fn count(&self) -> usize {
                0
            }
            fn name(&self) -> String {
                String::new()
            }
        }
        let limits = Limits { timeout, grace: Duration::from_secs(3) };
        let ex = launch::execute(&[spec], &limits, &Never, &mut || {}, &mut |_| Vec::new());
        let o = &ex.outcomes[0];
        if o.exit_code != Some(0) {
            lines.push(format!("{what} (srun on every node) ended {}; see {log}", o.short()));
        }
        let mut out = Vec::new();
        for t in 0..n {
            let p = cell_dir.join(format!("slurm/{name}.{t}.json"));
            match std::fs::read_to_string(&p)
                .map_err(|e| e.to_string())
                .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
            {
                Ok(v) => out.push(v),
                Err(e) => lines.push(format!("{what} task {t}: no answer ({}: {e})", p.display())),
            }
        }
        (out, lines)
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.info.owned && !self.info.job_id.is_empty() {
            let _ = Command::new("scancel").arg(&self.info.job_id).stdin(Stdio::null()).output();
        }
    }
}

/// Ask salloc for an allocation and wait for it, saying what salloc says and why the job is
/// pending; after `--alloc-timeout`, or on SIGINT/SIGTERM/SIGHUP to epdoctor, the request is
/// cancelled (scancel on the pending job, then salloc itself is stopped) and this fails.
fn salloc(
    l: &LaunchConfig,
    geometry: &[String],
    stop: &dyn Interrupts,
    say: &mut dyn FnMut(&str),
) -> anyhow::Result<String> {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    use std::time::Instant;
    let mut c = Command::new("salloc");
    c.args(["--no-shell", "--job-name=epdoctor-repro"]).args(geometry);
    if let Some(p) = &l.partition {
        c.arg(format!("--partition={p}"));
    }
    if let Some(t) = &l.time {
        c.arg(format!("--time={t}"));
    }
    if l.immediate {
        c.arg("--immediate");
    }
    // Its own process group: a Ctrl-C at the terminal reaches epdoctor only, which cancels in order.
    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).process_group(0);
    let mut child = c.spawn().context("starting salloc (is Slurm installed?)")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let err = child.stderr.take().context("salloc's stderr")?;
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait = Duration::from_secs_f64(l.alloc_timeout_s);
    let t0 = Instant::now();
    let mut said: Vec<String> = Vec::new();
    let mut job: Option<String> = None;
    let mut reason: Option<String> = None;
    let (mut next_look, mut next_say) = (t0, t0 + Duration::from_secs(10));
    // Each salloc line is said as it comes; `Pending job allocation J` gives the job to cancel.
    let take = |said: &mut Vec<String>, job: &mut Option<String>, line: String, say: &mut dyn FnMut(&str)| {
        if let Some(c) = PENDING.captures(&line) {
            *job = Some(c[1].to_string());
        }
        if !line.trim().is_empty() {
            say(line.trim());
        }
        said.push(line);
    };
    let give_up = loop {
        while let Ok(line) = rx.try_recv() {
            take(&mut said, &mut job, line, say);
        }
        if child.try_wait().context("waiting for salloc")?.is_some() {
            break None;
        }
        if stop.count() > 0 {
            break Some(format!("interrupted by {} while salloc waited for an allocation", stop.name()));
        }
        if t0.elapsed() >= wait {
            break Some(format!(
                "no allocation after {} s (--alloc-timeout; --immediate gives up at once)",
                l.alloc_timeout_s
            ));
        }
        let now = Instant::now();
        if let Some(j) = job.as_deref().filter(|_| now >= next_look) {
            next_look = now + Duration::from_secs(1);
            let r = pending_reason(j);
            if r.is_some() && (r != reason || now >= next_say) {
                next_say = now + Duration::from_secs(10);
                say(&format!(
                    "job {j} pending ({}), {:.0} s of {} s",
                    r.as_deref().unwrap_or("?"),
                    t0.elapsed().as_secs_f64(),
                    l.alloc_timeout_s
                ));
                reason = r;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if let Some(why) = give_up {
        let cancelled = cancel_request(&mut child, job.as_deref());
        let _ = reader.join();
        while let Ok(line) = rx.try_recv() {
            take(&mut said, &mut job, line, say);
        }
        let pending = reason.map(|r| format!(", pending: {r}")).unwrap_or_default();
        let what = match &job {
            Some(j) => format!("job {j}{pending}: {cancelled}"),
            None => format!("no job id yet: {cancelled}"),
        };
        bail!("salloc: {why}; {what}");
    }
    let _ = reader.join();
    while let Ok(line) = rx.try_recv() {
        take(&mut said, &mut job, line, say);
    }
    let status = child.wait().context("waiting for salloc")?;
    let err = said.join("\n");
    static GRANTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"Granted job allocation (\d+)").unwrap());
    match GRANTED.captures(&err) {
        Some(c) if status.success() => Ok(c[1].to_string()),
        _ => bail!("salloc did not grant an allocation ({status}): {}", err.trim()),
    }
}

// salloc's words while it waits (Slurm 22.05): `salloc: Pending job allocation 13`.
static PENDING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"Pending job allocation (\d+)").unwrap());

/// Why Slurm keeps job `job` pending (squeue's reason: Resources, Priority, PartitionConfig...).
fn pending_reason(job: &str) -> Option<String> {
    let out = output(Command::new("squeue").args(["--noheader", "--jobs", job, "--format", "%r"])).ok()?;
    Some(out.trim().to_string()).filter(|r| !r.is_empty() && r != "None")
}

/// Cancel a pending request: scancel the job when its id is known, then stop salloc (TERM, then
/// KILL), so neither a pending job nor an orphan salloc is left.
fn cancel_request(child: &mut std::process::Child, job: Option<&str>) -> String {
    let mut done = Vec::new();
    if let Some(j) = job {
        match Command::new("scancel").arg(j).stdin(Stdio::null()).output() {
            Ok(o) if o.status.success() => done.push(format!("scancel {j}: ok")),
            Ok(o) => done.push(format!("scancel {j} failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
            Err(e) => done.push(format!("scancel {j} could not start: {e}")),
        }
    }
    let pid = child.id() as i32;
    for sig in [Signal::SIGTERM, Signal::SIGKILL] {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        launch::signal_group(pid, sig);
        for _ in 0..100 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    done.push(match child.try_wait() {
        Ok(Some(s)) => format!("salloc ended ({s})"),
        _ => "salloc did not end after SIGKILL".to_string(),
    });
    done.join(", ")
}

fn output(c: &mut Command) -> anyhow::Result<String> {
    let what = format!("{c:?}");
    let out = c.stdin(Stdio::null()).output().with_context(|| format!("starting {what}"))?;
    if !out.status.success() {
        bail!("{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// SIGTERM: `scancel --signal=TERM` on the step; SIGKILL: `scancel --signal=KILL`, then `scancel`.
/// Before srun has launched the step (no step id yet), srun itself is signalled: it then cancels
/// what it asked for.
fn stop_step(srun_log: &Path, pid: i32, sig: Signal, stops: &Mutex<Stops>) {
    let report = Report::parse(&std::fs::read_to_string(srun_log).unwrap_or_default());
    let mut st = stops.lock().unwrap_or_else(|e| e.into_inner());
    st.sent.push((sig, report.ends.keys().copied().collect()));
    let Some(step) = report.step else {
        st.lines.push(format!("{} srun had no job step yet: sent {} to srun", launch::HARNESS_PREFIX, sig.as_str()));
        launch::signal_group(pid, sig);
        return;
    };
    let name = if sig == Signal::SIGKILL { "KILL" } else { "TERM" };
    let mut cmds = vec![vec![format!("--signal={name}"), step.clone()]];
    if sig == Signal::SIGKILL {
        cmds.push(vec![step.clone()]);
    }
    for c in cmds {
        let r = Command::new("scancel").args(&c).stdin(Stdio::null()).output();
        let how = match &r {
            Ok(o) if o.status.success() => "ok".to_string(),
            Ok(o) => format!("failed ({}): {}", o.status, String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => format!("could not start: {e}"),
        };
        st.lines.push(format!("{} scancel {}: {how}", launch::HARNESS_PREFIX, c.join(" ")));
    }
}

#[derive(Debug, Clone, PartialEq)]
enum End {
    Exit(i32),
    Signal(i32),
    /// srun's words for an end it did not describe as an exit code or a known signal.
    Other(String),
}

/// What srun said about its step: the step id, each task's node and each task's end.
#[derive(Debug, Default)]
struct Report {
    step: Option<String>,
    tasks: BTreeMap<usize, String>,
    ends: BTreeMap<usize, End>,
    /// slurmstepd's `execve(): PROGRAM: REASON` with a task label (`srun --label`), if srun got it.
    exec_errors: BTreeMap<usize, String>,
}

/// slurmstepd's `error: execve(): PROGRAM: REASON` in a task's own output (it writes there: the task's
/// stderr), read from the file's head only.
fn exec_failure(log: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(log).ok()?.take(8192).read_to_end(&mut head).ok()?;
    String::from_utf8_lossy(&head).lines().find_map(|l| EXECVE.captures(l).map(|c| c[1].to_string()))
}

// slurmstepd's format (src/slurmd/slurmstepd/exec_wait.c / task.c, 22.05): `slurmstepd[-HOST]: error:
// execve(): PROGRAM: strerror`.
static EXECVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|\s)(?:\d+: )?slurmstepd(?:-\S+)?: error: (execve\(\): .+: (?:No such file or directory|Permission denied|Exec format error))\s*$")
        .unwrap()
});

// srun's formats (Slurm 22.05, unchanged in later releases): `launching StepId=J.S on host H, N tasks: LIST`
// (--verbose) and `H: task(s) LIST: WHAT` after `error: ` or `_task_finish: `, WHAT being `Completed`
// (--verbose), `Exited with exit code N`, or the signal's strsignal text.
static LAUNCHING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"launching (?:StepId=)?(\d+\.\d+) on host (\S+), \d+ tasks?: \[?([0-9][0-9,\-]*)\]?").unwrap()
});
static TASK_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^srun: (?:error: |.*_task_finish: )(\S+): tasks? \[?([0-9][0-9,\-]*)\]?: (.+)$").unwrap()
});

impl Report {
    fn parse(text: &str) -> Report {
        let mut r = Report::default();
        for line in text.lines() {
            if let Some(c) = LAUNCHING.captures(line) {
                r.step = Some(c[1].to_string());
                for t in task_list(&c[3]) {
                    r.tasks.insert(t, c[2].to_string());
                }
            } else if let Some(c) = EXECVE.captures(line) {
                // Only with a task label (`0: slurmstepd...`): otherwise the task is not known here.
                if let Some(t) = line.trim_start().split(':').next().and_then(|t| t.trim().parse().ok()) {
                    r.exec_errors.insert(t, c[1].to_string());
                }
            } else if let Some(c) = TASK_END.captures(line) {
                let end = end_of(c[3].trim());
                for t in task_list(&c[2]) {
                    r.tasks.entry(t).or_insert_with(|| c[1].to_string());
                    // An exit code or signal wins over a later, vaguer word about the same task.
                    if !matches!(r.ends.get(&t), Some(End::Exit(_) | End::Signal(_))) {
                        r.ends.insert(t, end.clone());
                    }
                }
            }
        }
        r
    }
}

fn end_of(what: &str) -> End {
    if what == "Completed" {
        return End::Exit(0);
    }
    if let Some(c) = what.strip_prefix("Exited with exit code ").and_then(|c| c.trim().parse().ok()) {
        return End::Exit(c);
    }
    let text = what.trim_end_matches(" (core dumped)");
    match signal_by_text(text) {
        Some(s) => End::Signal(s),
        None => End::Other(what.to_string()),
    }
}

/// The signal whose strsignal(3) text srun printed (it prints exactly that).
fn signal_by_text(text: &str) -> Option<i32> {
    (1..=64).find(|&s| {
        // SAFETY: strsignal returns a NUL-terminated string; it is copied at once.
        let p = unsafe { libc::strsignal(s) };
        !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy() == text
    })
}

/// `0-2,5` -> 0, 1, 2, 5.
fn task_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b.min(a + 100_000));
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// This node's part of a cell's stacks at the deadline: each task's process carrying the tag, its
/// rank from SLURM_PROCID (srun, which carries the tag too when it runs on this node, has none).
pub fn stacks_here(cell: &str) -> NodeStacks {
    let m = Membership { pgids: Vec::new(), env: Some((CELL_ENV.into(), cell.into())), orphans: false };
    let mut procs = lo::cell_processes(&m);
    procs.retain(|p| {
        crate::sys::procs::environ_var(Path::new(&format!("/proc/{}", p.pid)), stacks::SLURM_RANK_VAR).is_some()
    });
    let mut n = stacks::take_here(&procs, &[], Path::new(cell), stacks::SLURM_RANK_VAR);
    n.node = crate::sys::hostname().unwrap_or_default();
    n
}

/// This node's part of a cell's leftovers: processes carrying the tag (killed with `kill`), the
/// NCCL sockets they hold, the NCCL /dev/shm files modified since `since`.
pub fn probe_here(cell: &str, since: Option<f64>, kill: bool) -> NodeLeftovers {
    let m = Membership { pgids: Vec::new(), env: Some((CELL_ENV.into(), cell.into())), orphans: false };
    // Longer than the local settle: the step's processes on this node get scancel's signal through
    // slurmstepd, a moment after srun has already returned.
    let mut procs: Vec<LeftoverProcess> = lo::settle(&m, Duration::from_secs(2));
    let shm = since.map(|t| lo::shm_since(&lo::shm_dir(), t)).unwrap_or_default();
    let sockets = lo::held_sockets(&procs);
    if kill {
        lo::kill_all(&m, &mut procs, Duration::from_secs(5));
    }
    let node = crate::sys::hostname().unwrap_or_default();
    NodeLeftovers {
        node,
        cell: cell.into(),
        leftovers: Leftovers { processes: procs, shm, sockets, probed_nodes: Vec::new() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real srun 22.05.8 output (the CI Slurm, `srun -v --kill-on-bad-exit=1 -n 2 ...`, task 1 exits 3,
    // task 0 then killed by the step's end; and a signalled task).
    const REPORT: &str = "\
srun: defined options
srun: jobid 6: nodes(1):`vm', cpu counts: 2(x1)
srun: launching StepId=6.0 on host vm, 2 tasks: [0-1]
srun: launch/slurm: _task_start: Node vm, 2 tasks started
srun: launch/slurm: _task_finish: Received task exit notification for 1 task of StepId=6.0 (status=0x0300).
srun: error: vm: task 1: Exited with exit code 3
srun: launch/slurm: _step_signal: Terminating StepId=6.0
srun: launch/slurm: _task_finish: Received task exit notification for 1 task of StepId=6.0 (status=0x000f).
srun: error: vm: task 0: Terminated
srun: Force Terminated StepId=6.0
";

    #[test]
    fn srun_report_gives_step_tasks_and_ends() {
        let r = Report::parse(REPORT);
        assert_eq!(r.step.as_deref(), Some("6.0"));
        assert_eq!(r.tasks, BTreeMap::from([(0, "vm".to_string()), (1, "vm".to_string())]));
        assert_eq!(r.ends[&1], End::Exit(3));
        assert_eq!(r.ends[&0], End::Signal(15));
        let r = Report::parse(
            "srun: launching StepId=5.0 on host vm, 1 tasks: 0\n\
             srun: launching StepId=5.0 on host vn, 2 tasks: [1-2]\n\
             srun: launch/slurm: _task_finish: vm: task 0: Completed\n\
             srun: error: vn: tasks 1-2: Segmentation fault (core dumped)\n",
        );
        assert_eq!(r.tasks[&2], "vn");
        assert_eq!(r.ends[&0], End::Exit(0));
        assert_eq!(r.ends[&2], End::Signal(11));
    }

    #[test]
    fn a_program_slurmstepd_could_not_exec() {
        // Real: `srun -n1 nosuchcmd` on the CI Slurm 22.05.8 (the line goes to the task's output).
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("rank0.log");
        std::fs::write(&log, "slurmstepd-vm: error: execve(): nosuchcmd: No such file or directory\n").unwrap();
        assert_eq!(exec_failure(&log).as_deref(), Some("execve(): nosuchcmd: No such file or directory"));
        std::fs::write(&log, "training step 1: error: loss is nan\n").unwrap();
        assert_eq!(exec_failure(&log), None);
        let r = Report::parse("0: slurmstepd: error: execve(): ./x.sh: Permission denied\n");
        assert_eq!(r.exec_errors[&0], "execve(): ./x.sh: Permission denied");
    }

    #[test]
    fn task_lists_and_unknown_words() {
        assert_eq!(task_list("0-2,5"), vec![0, 1, 2, 5]);
        assert_eq!(task_list("x"), Vec::<usize>::new());
        assert_eq!(end_of("Killed"), End::Signal(9));
        assert_eq!(end_of("Out of memory"), End::Other("Out of memory".into()));
    }
}
