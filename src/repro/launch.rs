//! Start the processes of one cell, each in its own process group with its output in its own
//! file, and stop them at the deadline: SIGTERM to the group, a grace period, SIGKILL.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// One process to start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `0`, `1`, ... for worker ranks, `cmd` for the user's command.
    pub label: String,
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Set (Some) or remove (None).
    pub env: BTreeMap<String, Option<String>>,
    /// stdout and stderr both go here, in the order they were written.
    pub log: PathBuf,
    /// How the deadline and interrupts stop it; None: signals to its process group.
    pub stopper: Option<Stopper>,
}

/// Stops a process some other way than by signalling its group (Slurm: `scancel` on the job step).
/// Called with the process's pid and SIGTERM (deadline, interrupt) or SIGKILL (after the grace period).
#[derive(Clone)]
pub struct Stopper(pub std::sync::Arc<dyn Fn(i32, Signal) + Send + Sync>);

impl std::fmt::Debug for Stopper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stopper")
    }
}

fn stop_one(spec: &Spec, pid: i32, sig: Signal) {
    match &spec.stopper {
        Some(s) => (s.0)(pid, sig),
        None => signal_group(pid, sig),
    }
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

#[derive(Debug, Clone)]
pub struct Limits {
    pub timeout: Duration,
    pub grace: Duration,
}

/// Interrupt state seen by the loop: signals received so far and the name of the last one.
pub trait Interrupts {
    fn count(&self) -> usize;
    fn name(&self) -> String;
}

pub struct Execution {
    pub outcomes: Vec<Outcome>,
    pub wall_s: f64,
    pub deadline_hit: bool,
    /// The signal that interrupted epdoctor during this cell.
    pub interrupted_by: Option<String>,
    /// Harness facts in the order they happened (without the exit lines, added by the caller).
    pub lines: Vec<String>,
    /// When the harness first sent SIGTERM (deadline or interrupt), unix seconds.
    pub stop_unix: Option<f64>,
    /// When the cell started, unix seconds (Slurm's leftovers probe looks for processes since).
    pub start_unix: f64,
    /// Process groups the cell used (one per started process).
    pub pgids: Vec<i32>,
}

pub use crate::sys::markers::HARNESS_PREFIX;

/// Seconds as the user wrote them: 45, 0.5.
pub fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

struct Running {
    child: Option<Child>,
    pid: i32,
}

/// Start every spec, wait for all of them, enforce the deadline and interrupts.
/// Called at the deadline with the (label, pid) of the processes still running; returns harness lines.
pub type AtDeadline<'a> = dyn FnMut(&[(String, i32)]) -> Vec<String> + 'a;

/// `tick` runs about every 10 ms while waiting (progress bar); `at_deadline` runs once at the
/// deadline, before any SIGTERM, with the (label, pid) of every process still running.
pub fn execute(
    specs: &[Spec],
    limits: &Limits,
    stop: &dyn Interrupts,
    tick: &mut dyn FnMut(),
    at_deadline: &mut AtDeadline,
) -> Execution {
    let start = Instant::now();
    let start_unix = unix_now();
    let base = stop.count();
    let mut ex = Execution {
        outcomes: specs.iter().map(|s| Outcome { label: s.label.clone(), ..Default::default() }).collect(),
        wall_s: 0.0,
        deadline_hit: false,
        interrupted_by: None,
        lines: Vec::new(),
        stop_unix: None,
        start_unix,
        pgids: Vec::new(),
    };
    let mut procs: Vec<Running> = Vec::new();
    let mut launch_failed = false;
    for (i, spec) in specs.iter().enumerate() {
        match spawn(spec) {
            Ok(child) => {
                let pid = child.id() as i32;
                ex.outcomes[i].pid = Some(child.id());
                ex.pgids.push(pid);
                procs.push(Running { child: Some(child), pid });
            }
            Err(e) => {
                let msg = format!("{:#}", e);
                ex.lines.push(format!("{HARNESS_PREFIX} rank={} launch failed: {msg}", spec.label));
                ex.outcomes[i].launch_error = Some(msg);
                procs.push(Running { child: None, pid: 0 });
                launch_failed = true;
            }
        }
    }

    let deadline = start + limits.timeout;
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    if launch_failed {
        // The cell cannot mean anything with a rank missing: stop the others now.
        for (i, p) in procs.iter().enumerate() {
            if p.child.is_some() {
                stop_one(&specs[i], p.pid, Signal::SIGKILL);
                ex.outcomes[i].sigkill = true;
            }
        }
        kill_at = Some(Instant::now());
    }
    loop {
        for (i, p) in procs.iter_mut().enumerate() {
            let Some(child) = p.child.as_mut() else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    let o = &mut ex.outcomes[i];
                    o.exit_code = status.code();
                    o.signal = status.signal();
                    o.signal_name = status.signal().map(signal_name);
                    o.end_s = Some(start.elapsed().as_secs_f64());
                    p.child = None;
                }
                Ok(None) => {}
                Err(_) => p.child = None,
            }
        }
        let running: Vec<usize> = (0..procs.len()).filter(|&i| procs[i].child.is_some()).collect();
        if running.is_empty() {
            break;
        }
        let now = Instant::now();
        let n = stop.count();
        if n > base && ex.interrupted_by.is_none() {
            let name = stop.name();
            for &i in &running {
                ex.lines.push(format!(
                    "{HARNESS_PREFIX} rank={} interrupted: epdoctor got {name}, sent SIGTERM",
                    specs[i].label
                ));
                ex.outcomes[i].interrupted = true;
                stop_one(&specs[i], procs[i].pid, Signal::SIGTERM);
            }
            ex.interrupted_by = Some(name);
            if term_at.is_none() {
                term_at = Some(now);
                ex.stop_unix = Some(unix_now());
            }
        }
        if term_at.is_none() && now >= deadline {
            ex.deadline_hit = true;
            let alive: Vec<(String, i32)> = running.iter().map(|&i| (specs[i].label.clone(), procs[i].pid)).collect();
            ex.lines.extend(at_deadline(&alive).into_iter().map(|l| format!("{HARNESS_PREFIX} {l}")));
            for &i in &running {
                ex.lines.push(format!(
                    "{HARNESS_PREFIX} rank={} deadline: still running after {}s, sent SIGTERM",
                    specs[i].label,
                    secs(limits.timeout)
                ));
                ex.outcomes[i].deadline = true;
                stop_one(&specs[i], procs[i].pid, Signal::SIGTERM);
            }
            // The grace period starts at the SIGTERM, after the stacks were taken.
            term_at = Some(Instant::now());
            ex.stop_unix = Some(unix_now());
        }
        // A second signal to epdoctor skips the grace period.
        let hurry = ex.interrupted_by.is_some() && n > base + 1;
        if kill_at.is_none() && term_at.is_some_and(|t| hurry || now >= t + limits.grace) {
            for &i in &running {
                ex.lines.push(format!("{HARNESS_PREFIX} rank={} killed after grace period (SIGKILL)", specs[i].label));
                ex.outcomes[i].sigkill = true;
                stop_one(&specs[i], procs[i].pid, Signal::SIGKILL);
            }
            kill_at = Some(now);
        }
        if kill_at.is_some_and(|t| now >= t + UNKILLABLE_AFTER) {
            // Stuck in uninterruptible sleep; report it instead of waiting for ever.
            for &i in &running {
                ex.lines.push(format!("{HARNESS_PREFIX} rank={} still running after SIGKILL", specs[i].label));
                ex.outcomes[i].unkillable = true;
                procs[i].child = None;
            }
            break;
        }
        tick();
        std::thread::sleep(POLL);
    }
    ex.wall_s = start.elapsed().as_secs_f64();
    ex
}

const POLL: Duration = Duration::from_millis(10);
const UNKILLABLE_AFTER: Duration = Duration::from_secs(10);

fn spawn(spec: &Spec) -> anyhow::Result<Child> {
    use anyhow::Context;
    let out = File::options()
        .create_new(true)
        .write(true)
        .open(&spec.log)
        .with_context(|| format!("creating {}", spec.log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args).stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    for (k, v) in &spec.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            // If epdoctor dies without cleaning up (SIGKILL), the rank goes with it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(126);
            }
            Ok(())
        });
    }
    cmd.spawn().with_context(|| format!("starting {}", spec.program.to_string_lossy()))
}

/// Signal a process group and its leader (in case the leader moved itself out of the group).
pub fn signal_group(pid: i32, sig: Signal) {
    if pid <= 0 {
        return;
    }
    let _ = killpg(Pid::from_raw(pid), sig);
    let _ = kill(Pid::from_raw(pid), sig);
}

pub fn signal_name(n: i32) -> String {
    Signal::try_from(n).map(|s| s.as_str().to_string()).unwrap_or_else(|_| format!("SIG{n}"))
}

/// The exit fact of one process, as harness.log states it.
pub fn exit_line(o: &Outcome) -> Option<String> {
    let r = &o.label;
    match (o.exit_code, o.signal) {
        (Some(c), _) => Some(format!("{HARNESS_PREFIX} rank={r} exit={c}")),
        // Say when the signal was ours (deadline or interrupt), so rules do not take it for a crash.
        (None, Some(s)) if o.deadline || o.interrupted || o.sigkill => {
            Some(format!("{HARNESS_PREFIX} rank={r} signal={s} ({}) sent by epdoctor", signal_name(s)))
        }
        (None, Some(s)) => Some(format!("{HARNESS_PREFIX} rank={r} signal={s} ({})", signal_name(s))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct NoStop;
    impl Interrupts for NoStop {
        fn count(&self) -> usize {
            0
        }
        fn name(&self) -> String {
            String::new()
        }
    }

    fn sh(dir: &std::path::Path, label: &str, script: &str) -> Spec {
        Spec {
            label: label.into(),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::new(),
            log: dir.join(format!("{label}.log")),
            stopper: None,
        }
    }

    fn limits(t: f64, g: f64) -> Limits {
        Limits { timeout: Duration::from_secs_f64(t), grace: Duration::from_secs_f64(g) }
    }

    #[test]
    fn exit_codes_signals_and_logs() {
        let d = tempfile::tempdir().unwrap();
        let specs = vec![sh(d.path(), "0", "echo out; echo err >&2; exit 3"), sh(d.path(), "1", "kill -9 $$")];
        let ex = execute(&specs, &limits(60.0, 1.0), &NoStop, &mut || {}, &mut |_| Vec::new());
        assert_eq!(ex.outcomes[0].exit_code, Some(3));
        assert_eq!(ex.outcomes[1].signal, Some(9));
        assert_eq!(exit_line(&ex.outcomes[1]).unwrap(), "[epdoctor-harness] rank=1 signal=9 (SIGKILL)");
        assert_eq!(exit_line(&ex.outcomes[0]).unwrap(), "[epdoctor-harness] rank=0 exit=3");
        assert!(!ex.deadline_hit);
        let log = std::fs::read_to_string(d.path().join("0.log")).unwrap();
        assert_eq!(log, "out\nerr\n");
    }

    #[test]
    fn deadline_term_then_kill() {
        let d = tempfile::tempdir().unwrap();
        let specs = vec![
            sh(d.path(), "0", "exec sleep 300"),
            sh(d.path(), "1", "trap '' TERM; while :; do sleep 1; done"),
            sh(d.path(), "2", "exit 0"),
        ];
        let ex = execute(&specs, &limits(3.0, 1.0), &NoStop, &mut || {}, &mut |_| Vec::new());
        assert!(ex.deadline_hit);
        let o = &ex.outcomes;
        assert!(o[0].deadline && !o[0].sigkill);
        assert_eq!(o[0].signal_name.as_deref(), Some("SIGTERM"));
        assert!(o[1].deadline && o[1].sigkill);
        assert_eq!(o[1].signal_name.as_deref(), Some("SIGKILL"));
        assert!(!o[2].deadline && o[2].exit_code == Some(0));
        assert_eq!(o[1].short(), "deadline/SIGKILL");
        assert!(ex.lines.contains(&"[epdoctor-harness] rank=1 deadline: still running after 3s, sent SIGTERM".into()));
        assert!(ex.lines.contains(&"[epdoctor-harness] rank=1 killed after grace period (SIGKILL)".into()));
        assert!(!ex.lines.iter().any(|l| l.contains("rank=2")));
    }

    #[test]
    fn interrupt_stops_and_second_signal_skips_grace() {
        struct After(Cell<usize>, usize);
        impl Interrupts for After {
            fn count(&self) -> usize {
                self.0.set(self.0.get() + 1);
                // One signal after ~20 polls, a second after ~40.
                (self.0.get() / 20).min(self.1)
            }
            fn name(&self) -> String {
                "SIGINT".into()
            }
        }
        let d = tempfile::tempdir().unwrap();
        let specs = vec![sh(d.path(), "cmd", "trap '' TERM; while :; do sleep 1; done")];
        // A grace period far longer than the test: only the second signal can end it.
        let ex = execute(&specs, &limits(600.0, 600.0), &After(Cell::new(0), 2), &mut || {}, &mut |_| Vec::new());
        assert_eq!(ex.interrupted_by.as_deref(), Some("SIGINT"));
        assert!(ex.outcomes[0].interrupted && ex.outcomes[0].sigkill);
        assert!(!ex.deadline_hit);
        assert!(ex.lines[0].contains("rank=cmd interrupted: epdoctor got SIGINT, sent SIGTERM"));
    }

    #[test]
    fn launch_failure_is_reported_and_stops_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let mut bad = sh(d.path(), "1", "");
        bad.program = "/nonexistent/epdoctor-standin".into();
        let specs = vec![sh(d.path(), "0", "exec sleep 300"), bad];
        let ex = execute(&specs, &limits(600.0, 600.0), &NoStop, &mut || {}, &mut |_| Vec::new());
        assert!(ex.outcomes[1].launch_error.as_deref().unwrap().contains("/nonexistent/epdoctor-standin"));
        assert_eq!(ex.outcomes[0].signal_name.as_deref(), Some("SIGKILL"));
        assert!(
            ex.lines[0].starts_with("[epdoctor-harness] rank=1 launch failed: starting /nonexistent/epdoctor-standin")
        );
    }

    #[test]
    fn own_process_group_and_env() {
        let d = tempfile::tempdir().unwrap();
        let mut s = sh(d.path(), "0", "echo pgid=$(cut -d' ' -f5 /proc/$$/stat) pid=$$ x=${X-unset} h=${HOME-unset}");
        s.env.insert("X".into(), Some("1".into()));
        s.env.insert("HOME".into(), None);
        let ex = execute(&[s], &limits(60.0, 1.0), &NoStop, &mut || {}, &mut |_| Vec::new());
        let pid = ex.outcomes[0].pid.unwrap();
        let log = std::fs::read_to_string(d.path().join("0.log")).unwrap();
        assert_eq!(log.trim(), format!("pgid={pid} pid={pid} x=1 h=unset"));
        assert_eq!(ex.pgids, vec![pid as i32]);
    }
}
