//! Stacks at the deadline: before the harness sends SIGTERM to a hung cell, the stack of every
//! process still running in it is taken (py-spy for Python, eu-stack or gdb for native code,
//! /proc otherwise), kept raw in the cell's `stacks/` folder, and folded to the frames that say
//! where the process waits (`ncclCommDestroy <- ProcessGroupNCCL::shutdown <- destroy_process_group
//! <- train.py:88`). The folded lines go to `stacks.log`, which the engine reads with the cell's
//! logs, so rules can match stack frames.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::model::run::stack::{fold, fold_full, Frame, Thread};
use std::collections::BTreeMap;

pub use crate::model::run::STACKS_LOG;
use crate::model::run::{Hung, LeftoverProcess, NodeStack, NodeStacks, ProcStack, StackGroup, STACKS_DIR};
pub const STACK_PREFIX: &str = "[epdoctor-stack]";
/// Which tools may be used, in order (`py-spy,eu-stack,gdb,proc`): a test hook, and a way to
/// leave out a tool that misbehaves on a machine.
pub const TOOLS_ENV: &str = "EPDOCTOR_STACK_TOOLS";
const TOOL_LIMIT: Duration = Duration::from_secs(30);

/// Everything a capture produced.
#[derive(Debug, Default)]
pub struct Capture {
    pub stacks: Vec<ProcStack>,
    /// Harness facts: how long it took, tools missing.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    PySpy,
    EuStack,
    Gdb,
    Proc,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::PySpy => "py-spy",
            Tool::EuStack => "eu-stack",
            Tool::Gdb => "gdb",
            Tool::Proc => "proc",
        }
    }
    fn from_name(s: &str) -> Option<Tool> {
        [Tool::PySpy, Tool::EuStack, Tool::Gdb, Tool::Proc].into_iter().find(|t| t.name() == s.trim())
    }
    /// The tool's command for one process.
    fn command(self, exe: &Path, pid: i32, native: bool) -> Command {
        let mut c = Command::new(exe);
        let p = pid.to_string();
        match self {
            Tool::PySpy if native => c.args(["dump", "--native", "--pid", &p]),
            Tool::PySpy => c.args(["dump", "--pid", &p]),
            Tool::EuStack => c.args(["-m", "-p", &p]),
            Tool::Gdb => c.args(["-batch", "-nx", "-p", &p, "-ex", "thread apply all bt"]),
            Tool::Proc => &mut c,
        };
        c
    }
}

/// The tools allowed here, each with its executable (`proc` needs none).
fn tools() -> Vec<(Tool, PathBuf)> {
    let wanted: Vec<Tool> = match std::env::var(TOOLS_ENV) {
        Ok(v) if !v.trim().is_empty() => v.split(',').filter_map(Tool::from_name).collect(),
        _ => vec![Tool::PySpy, Tool::EuStack, Tool::Gdb, Tool::Proc],
    };
    wanted
        .into_iter()
        .filter_map(|t| match t {
            Tool::Proc => Some((t, PathBuf::new())),
            _ => find_on_path(t.name()).map(|p| (t, p)),
        })
        .collect()
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// A Python interpreter: py-spy can read its frames.
fn is_python(pid: i32, cmd: &str) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let base = |s: &str| s.rsplit('/').next().unwrap_or("").to_string();
    exe.map(|e| base(&e.to_string_lossy()))
        .into_iter()
        .chain(cmd.split_whitespace().next().map(base))
        .any(|b| b.starts_with("python") || b.starts_with("pypy"))
}

/// The rank from the environment the process was started with: `RANK` (torchrun, our launchers),
/// or under Slurm `SLURM_PROCID` (`var`).
fn env_rank(pid: i32, var: &str) -> Option<String> {
    crate::sys::procs::environ_var(Path::new(&format!("/proc/{pid}")), var)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
}

/// The variable a process's rank is read from: RANK here, SLURM_PROCID on a Slurm node's probe.
pub const RANK_VAR: &str = "RANK";
pub const SLURM_RANK_VAR: &str = "SLURM_PROCID";

/// Take the stacks of `procs`. `labels` names the processes the harness started (label, pid):
/// a worker rank's label is its rank.
pub fn capture(procs: &[LeftoverProcess], labels: &[(String, i32)], cell_dir: &Path) -> Capture {
    let t0 = Instant::now();
    if procs.is_empty() {
        return Capture::default();
    }
    let here = take_here(procs, labels, cell_dir, RANK_VAR);
    write(cell_dir, vec![here], t0)
}

/// This host's part: each process's stack, raw under `stacks/`, with its `stacks.log` lines.
/// `rank_var`: where a process's rank is read from when the harness did not start it itself.
pub fn take_here(procs: &[LeftoverProcess], labels: &[(String, i32)], cell_dir: &Path, rank_var: &str) -> NodeStacks {
    let mut out = NodeStacks { cell: cell_dir.to_string_lossy().into_owned(), ..Default::default() };
    let dir = cell_dir.join(STACKS_DIR);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        out.notes.push(format!("stacks: could not create {}: {e}", dir.display()));
        return out;
    }
    let tools = tools();
    let results: Vec<(ProcStack, Vec<Thread>, Option<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = procs
            .iter()
            .map(|p| {
                let tools = &tools;
                let dir = &dir;
                s.spawn(move || one_process(p, labels, tools, dir, rank_var))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    out.notes = missing_tools(&tools, &results);
    // The user's command that started ranks of its own (they carry RANK) is their launcher: its
    // stack (waiting for its children) is listed, but no rule reads it as a hung rank.
    let ranked = results.iter().any(|(st, _, _)| st.rank.parse::<u64>().is_ok());
    for (st, threads, miss) in results {
        let launcher = ranked && (st.rank == "cmd" || st.rank.starts_with("pid "));
        out.stacks.push(NodeStack { lines: stack_lines(&st, &threads, launcher), stack: st });
        out.notes.extend(miss);
    }
    out
}

/// Every node's part into one capture: the stacks in group order (the odd group first, so that its
/// rank is the first stack the engine reads), `stacks.log`, the notes said once.
pub fn write(cell_dir: &Path, parts: Vec<NodeStacks>, t0: Instant) -> Capture {
    let mut cap = Capture::default();
    let mut all: Vec<NodeStack> = Vec::new();
    for mut p in parts {
        cap.notes.append(&mut p.notes);
        all.append(&mut p.stacks);
    }
    let order: Vec<ProcStack> = all.iter().map(|s| s.stack.clone()).collect();
    let rank_order: Vec<String> = group(&order, &BTreeMap::new()).into_iter().flat_map(|g| g.ranks).collect();
    all.sort_by_key(|s| rank_order.iter().position(|r| *r == s.stack.rank).unwrap_or(usize::MAX));
    let mut log = String::new();
    for s in all {
        for line in &s.lines {
            log.push_str(line);
            log.push('\n');
        }
        cap.stacks.push(s.stack);
    }
    cap.notes.sort();
    cap.notes.dedup();
    if let Err(e) = std::fs::write(cell_dir.join(STACKS_LOG), log) {
        cap.notes.push(format!("stacks: could not write {STACKS_LOG}: {e}"));
    }
    cap.notes.push(format!(
        "stacks: {} process(es) captured in {:.1} s before SIGTERM (raw in {STACKS_DIR}/)",
        cap.stacks.len(),
        t0.elapsed().as_secs_f64()
    ));
    cap
}

/// The tools a capture lacked, said once per cell with how to install them.
fn missing_tools(tools: &[(Tool, PathBuf)], results: &[(ProcStack, Vec<Thread>, Option<String>)]) -> Vec<String> {
    let has = |t: Tool| tools.iter().any(|(x, _)| *x == t);
    let mut out = Vec::new();
    let python = results.iter().any(|(st, _, _)| is_python(st.pid, &st.cmd) || st.tool == Tool::PySpy.name());
    if python && !has(Tool::PySpy) {
        out.push(format!(
            "stacks: py-spy not found on PATH, so no Python frames: install it with `pip install py-spy` \
             (it needs ptrace rights: root, or CAP_SYS_PTRACE in a container){}",
            if std::env::var_os(TOOLS_ENV).is_some() { format!(" ({TOOLS_ENV} is set)") } else { String::new() }
        ));
    }
    let native = results.iter().any(|(st, _, _)| st.tool == Tool::Proc.name() && !is_python(st.pid, &st.cmd));
    if native && !has(Tool::EuStack) && !has(Tool::Gdb) {
        out.push(
            "stacks: eu-stack not found on PATH (nor gdb), so native frames only from /proc: install it with \
             `apt-get install elfutils` (`dnf install elfutils` on RHEL)"
                .into(),
        );
    }
    out
}

/// `0-6, 8-15, cmd`: numeric ranks as ranges, then the others.
pub fn rank_ranges(ranks: &[String]) -> String {
    let mut nums: Vec<u64> = ranks.iter().filter_map(|r| r.parse().ok()).collect();
    nums.sort_unstable();
    nums.dedup();
    let mut parts = crate::model::runs(&nums);
    parts.extend(ranks.iter().filter(|r| r.parse::<u64>().is_err()).cloned());
    parts.join(", ")
}

/// Waiting for the others: in a collective or a synchronize (a victim when another rank is elsewhere).
fn waits_for_peers(waits: &str) -> bool {
    static PEER_WAIT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"Synchronize|synchronize|WorkNCCL|\b(?:all_reduce|all_gather\w*|reduce_scatter\w*|broadcast|barrier|all_to_all\w*|wait)\b|^nccl\w+",
        )
        .unwrap()
    });
    PEER_WAIT.is_match(waits)
}

/// Ranks whose main threads wait in the same place, one group each: the odd group first (the
/// smallest; among equals, a group not waiting for its peers before one that is, the launcher's
/// own process last), then by lowest rank. `fr`: each rank's last enqueued collective, from the
/// cell's Flight Recorder dumps.
pub fn group(stacks: &[ProcStack], fr: &BTreeMap<String, i64>) -> Vec<StackGroup> {
    let mut groups: Vec<StackGroup> = Vec::new();
    for st in stacks {
        let seq = fr.get(&st.rank).copied();
        match groups.iter_mut().find(|g| g.waits == st.waits && g.fr_seq == seq) {
            Some(g) => g.ranks.push(st.rank.clone()),
            None => groups.push(StackGroup {
                ranks: vec![st.rank.clone()],
                label: String::new(),
                waits: st.waits.clone(),
                fr_seq: seq,
            }),
        }
    }
    let launcher =
        |g: &StackGroup| g.ranks.iter().all(|r| r == "cmd" || r.starts_with("pid ") || r.contains("child pid"));
    let first_rank = |g: &StackGroup| g.ranks.iter().filter_map(|r| r.parse::<u64>().ok()).min().unwrap_or(u64::MAX);
    groups.sort_by_key(|g| (launcher(g), g.ranks.len(), waits_for_peers(&g.waits), first_rank(g)));
    for g in &mut groups {
        g.ranks.sort_by_key(|r| (r.parse::<u64>().unwrap_or(u64::MAX), r.clone()));
        let word = if g.ranks.len() == 1 { "rank" } else { "ranks" };
        g.label = match g.ranks.as_slice() {
            [one] if one.parse::<u64>().is_err() => one.clone(),
            rs => format!("{word} {}", rank_ranges(rs)),
        };
    }
    groups
}

/// A worker's label, else RANK from its environment, else `cmd` (the user's command itself), else `pid N`.
fn rank_of(p: &LeftoverProcess, labels: &[(String, i32)], rank_var: &str) -> String {
    let label = labels.iter().find(|(_, pid)| *pid == p.pid).map(|(l, _)| l.clone());
    if let Some(l) = label.as_ref().filter(|l| *l != "cmd") {
        return l.clone();
    }
    if let Some(r) = env_rank(p.pid, rank_var) {
        return r;
    }
    if let Some(l) = label {
        return l;
    }
    match labels.iter().find(|(_, pid)| *pid == p.pgid) {
        Some((l, _)) if l != "cmd" => format!("{l} (child pid {})", p.pid),
        _ => format!("pid {}", p.pid),
    }
}

fn one_process(
    p: &LeftoverProcess,
    labels: &[(String, i32)],
    tools: &[(Tool, PathBuf)],
    dir: &Path,
    rank_var: &str,
) -> (ProcStack, Vec<Thread>, Option<String>) {
    let rank = rank_of(p, labels, rank_var);
    let python = is_python(p.pid, &p.cmd);
    let mut raw = format!("# epdoctor stacks at the deadline: pid={} rank={rank}\n# cmd: {}\n", p.pid, p.cmd);
    let mut used = None;
    let mut threads = Vec::new();
    for (tool, exe) in tools {
        let attempts: &[bool] = match tool {
            Tool::PySpy if !python => continue,
            Tool::PySpy => &[true, false],
            Tool::Proc => break,
            _ => &[false],
        };
        for &native in attempts {
            let mut cmd = tool.command(exe, p.pid, native);
            let (ok, out) = run_limited(&mut cmd, TOOL_LIMIT);
            let label = if native { format!("{} --native", tool.name()) } else { tool.name().to_string() };
            raw.push_str(&format!("\n# {label} ({})\n{out}", if ok { "ok" } else { "failed" }));
            let parsed = match tool {
                Tool::PySpy => parse_py_spy(&out),
                Tool::EuStack => parse_eu_stack(&out),
                Tool::Gdb => parse_gdb(&out),
                Tool::Proc => Vec::new(),
            };
            if ok && parsed.iter().any(|t| !t.frames.is_empty()) {
                threads = parsed;
                used = Some(*tool);
                break;
            }
        }
        if used.is_some() {
            break;
        }
    }
    // Always: what the kernel says each thread waits on (cheap, and the only view without a tool).
    let proc_threads = proc_stacks(p.pid);
    raw.push_str("\n# /proc/PID/task/*/{wchan,syscall,stack}\n");
    for t in &proc_threads {
        let frames: Vec<&str> = t.frames.iter().map(|f| f.func.as_str()).collect();
        raw.push_str(&format!("task {} ({}): {}\n", t.tid.unwrap_or(0), t.name, frames.join(" <- ")));
    }
    if used.is_none() && tools.iter().any(|(t, _)| *t == Tool::Proc) {
        threads = proc_threads;
        used = Some(Tool::Proc);
    }
    // A tool that is there but failed (a missing one is said once per cell, by missing_tools).
    let has = |t: Tool| tools.iter().any(|(x, _)| *x == t);
    let missing = match used {
        Some(Tool::PySpy) | Some(Tool::EuStack) | Some(Tool::Gdb) => None,
        _ if python && has(Tool::PySpy) => Some(
            "stacks: py-spy could not read a Python process: it needs ptrace rights (root, or CAP_SYS_PTRACE in a container)".to_string(),
        ),
        _ if !python && (has(Tool::EuStack) || has(Tool::Gdb)) => {
            Some("stacks: eu-stack and gdb could not read a process: they need ptrace rights".to_string())
        }
        _ => None,
    };
    let file = format!("{}.pid{}.txt", sanitize(&rank), p.pid);
    let _ = std::fs::write(dir.join(&file), &raw);
    let main = main_thread(&threads, p.pid);
    let waits = main.map(|t| fold(&t.frames)).filter(|s| !s.is_empty()).unwrap_or_else(|| "?".into());
    let others = threads
        .iter()
        .filter(|t| main.is_none_or(|m| !std::ptr::eq(*t, m)))
        .map(|t| (t, fold(&t.frames)))
        .filter(|(_, f)| is_notable(f))
        .map(|(t, f)| format!("{}: {f}", t.name))
        .collect();
    let st = ProcStack {
        rank,
        pid: p.pid,
        cmd: p.cmd.clone(),
        tool: used.map(Tool::name).unwrap_or("none").into(),
        waits,
        others,
        raw: format!("{STACKS_DIR}/{file}"),
        node: None,
    };
    (st, threads, missing)
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// Threads that wait in the libraries whose hangs epdoctor explains.
fn is_notable(folded: &str) -> bool {
    let l = folded.to_ascii_lowercase();
    ["nccl", "c10d", "processgroup", "nvshmem", "deep_ep", "deepep"].iter().any(|k| l.contains(k))
}

fn main_thread(threads: &[Thread], pid: i32) -> Option<&Thread> {
    threads
        .iter()
        .find(|t| t.tid == Some(pid))
        .or_else(|| threads.iter().find(|t| t.name == "MainThread"))
        .or_else(|| threads.first())
}

/// The `stacks.log` lines of one process: main thread first (`launcher`: the ranks' own launcher,
/// `launcher=cmd`, which the hang rules do not read as a rank).
pub fn stack_lines(st: &ProcStack, threads: &[Thread], launcher: bool) -> Vec<String> {
    let who = if launcher { "launcher" } else { "rank" };
    let head = format!("{STACK_PREFIX} {who}={} pid={} via={}", st.rank.replace(' ', "_"), st.pid, st.tool);
    let main = main_thread(threads, st.pid);
    let full = main.map(|t| fold_full(&t.frames)).filter(|s| !s.is_empty()).unwrap_or_else(|| st.waits.clone());
    let mut v = vec![format!("{head} thread=main: {full}")];
    for t in threads {
        if main.is_some_and(|m| std::ptr::eq(t, m)) {
            continue;
        }
        let f = fold_full(&t.frames);
        if !f.is_empty() {
            v.push(format!("{head} thread={}: {f}", t.name.replace(' ', "_")));
        }
    }
    v
}

/// Run a stack tool with a time limit; (exited 0, stdout then stderr).
fn run_limited(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let mut child = match cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return (false, format!("(could not start: {e})\n")),
    };
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut b);
            }
            b
        })
    };
    let out = reader(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let until = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut text = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
    text.push_str(&String::from_utf8_lossy(&err.join().unwrap_or_default()));
    if status.is_none() {
        text.push_str(&format!("(stopped after {} s)\n", limit.as_secs()));
    }
    (status.is_some_and(|s| s.success()), text)
}

/// `futex` for 202: the syscalls a waiting thread sits in (x86-64 numbers).
fn syscall_name(nr: &str) -> Option<&'static str> {
    Some(match nr {
        "0" => "read",
        "7" => "poll",
        "23" => "select",
        "35" => "nanosleep",
        "61" => "wait4",
        "202" => "futex",
        "230" => "clock_nanosleep",
        "232" => "epoll_wait",
        "270" => "pselect6",
        "271" => "ppoll",
        "281" => "epoll_pwait",
        "441" => "epoll_pwait2",
        _ => return None,
    })
}

/// Each thread's kernel view: its kernel stack when readable (root), else its wait channel and
/// the system call it is in.
pub fn proc_stacks(pid: i32) -> Vec<Thread> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut tids: Vec<i32> = rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    tids.sort();
    tids.into_iter()
        .map(|tid| {
            let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/{f}")).unwrap_or_default();
            let name = read("comm").trim().to_string();
            let mut frames: Vec<Frame> = read("stack")
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .map(|f| Frame {
                    // `futex_wait_queue+0x63/0x90`, `sigsuspend.isra.0+0x1c/0x40`: the function.
                    func: f.split(['+', '.']).next().unwrap_or(f).to_string(),
                    loc: Some("kernel".into()),
                    python: false,
                })
                .collect();
            if frames.is_empty() {
                let w = read("wchan");
                let w = w.trim();
                if !w.is_empty() && w != "0" {
                    frames.push(Frame { func: w.to_string(), loc: Some("kernel".into()), python: false });
                }
            }
            let sc = read("syscall");
            if let Some(name) = sc.split_whitespace().next().and_then(syscall_name) {
                frames.push(Frame { func: format!("syscall {name}"), loc: Some("kernel".into()), python: false });
            } else if sc.trim() == "running" {
                frames.push(Frame { func: "running".into(), loc: None, python: false });
            }
            Thread { tid: Some(tid), name, frames }
        })
        .collect()
}

/// py-spy dump (with or without --native):
/// `Thread 123 (idle): "MainThread"` then `    func (file.py:12)` / `    func (libx.so)` / `    0x7f.. (libc.so.6)`.
pub fn parse_py_spy(text: &str) -> Vec<Thread> {
    let mut out: Vec<Thread> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Thread ") {
            let id = rest.split_whitespace().next().unwrap_or("");
            // `Thread 0x7F..` is a pthread id, not a tid.
            let tid = id.parse().ok();
            let name = rest.split_once('"').and_then(|(_, n)| n.rsplit_once('"').map(|(n, _)| n)).unwrap_or(id);
            out.push(Thread { tid, name: name.to_string(), frames: Vec::new() });
            continue;
        }
        let Some(t) = out.last_mut() else { continue };
        if !line.starts_with("    ") {
            continue;
        }
        let l = line.trim();
        let (func, loc) = match l.rsplit_once(" (") {
            Some((f, rest)) => (f.trim(), rest.strip_suffix(')').map(str::to_string)),
            None => (l, None),
        };
        // `(file.py:12)` is Python; `(linux.cc:195)` is a native frame with line info, `(libx.so)` one without.
        let python = loc.as_deref().is_some_and(|l| {
            l.rsplit_once(':').is_some_and(|(file, n)| {
                n.bytes().all(|b| b.is_ascii_digit()) && (file.ends_with(".py") || file.starts_with('<'))
            })
        });
        t.frames.push(Frame { func: func.to_string(), loc, python });
    }
    out
}

/// eu-stack -m: `TID 123:` then `#0  0x00007f.. func - /lib/libx.so` (func absent when unknown).
pub fn parse_eu_stack(text: &str) -> Vec<Thread> {
    let mut out: Vec<Thread> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("TID ") {
            let tid = rest.trim_end_matches(':').trim().parse().ok();
            out.push(Thread { tid, name: format!("tid {}", tid.unwrap_or(0)), frames: Vec::new() });
            continue;
        }
        let Some(t) = out.last_mut() else { continue };
        let Some(rest) = l.strip_prefix('#') else { continue };
        let mut it = rest.split_whitespace();
        let (_n, _addr) = (it.next(), it.next());
        let rest: Vec<&str> = it.collect();
        let (func, module) = match rest.iter().position(|w| *w == "-") {
            Some(i) => (rest[..i].join(" "), rest.get(i + 1).map(|m| m.to_string())),
            None => (rest.join(" "), None),
        };
        t.frames.push(Frame { func: if func.is_empty() { "??".into() } else { func }, loc: module, python: false });
    }
    out
}

/// gdb `thread apply all bt`: `Thread 2 (Thread 0x7f.. (LWP 124) "name"):` then
/// `#0  0x.. in func (args) at file.c:12` / `#1  func (args) from /lib/libx.so`.
pub fn parse_gdb(text: &str) -> Vec<Thread> {
    let mut out: Vec<Thread> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("Thread ") && l.ends_with("):") {
            let tid =
                l.split_once("LWP ").and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok());
            let name = l.split_once('"').and_then(|(_, n)| n.rsplit_once('"').map(|(n, _)| n)).unwrap_or("");
            out.push(Thread { tid, name: name.to_string(), frames: Vec::new() });
            continue;
        }
        let Some(rest) = l.strip_prefix('#') else { continue };
        if out.is_empty() {
            out.push(Thread { tid: None, name: String::new(), frames: Vec::new() });
        }
        let t = out.last_mut().unwrap();
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
        let rest = match rest.split_once(" in ") {
            Some((a, r)) if a.starts_with("0x") => r,
            _ => rest,
        };
        let (func, loc) = match (rest.split_once(" at "), rest.split_once(" from ")) {
            (Some((f, at)), _) => (f, Some(at.to_string())),
            (None, Some((f, from))) => (f, Some(from.to_string())),
            _ => (rest, None),
        };
        let func = func.split(" (").next().unwrap_or(func).trim();
        t.frames.push(Frame { func: func.to_string(), loc, python: false });
    }
    out
}

/// Each hung rank gets where it waited. A command's one entry ("the command") becomes one entry per
/// rank found among its processes (RANK in their environment), or per process when none has one.
pub fn attach(mut hung: Vec<Hung>, stacks: &[ProcStack]) -> Vec<Hung> {
    let named = |s: &&ProcStack| s.rank != "cmd" && !s.rank.starts_with("pid ");
    if hung.len() == 1 && hung[0].rank == "cmd" && !stacks.is_empty() {
        let ranked: Vec<&ProcStack> = stacks.iter().filter(named).collect();
        let shown: Vec<&ProcStack> = if ranked.is_empty() { stacks.iter().collect() } else { ranked };
        return shown
            .into_iter()
            .map(|s| Hung { rank: s.rank.clone(), phase: None, for_s: None, last: None, waits: Some(s.waits.clone()) })
            .collect();
    }
    // A rank the markers leave "inside" but that was no longer running (it exited early) did not hang;
    // known only when the stacks name ranks.
    if stacks.iter().any(|s| named(&s)) {
        let alive: Vec<Hung> = hung.iter().filter(|h| stacks.iter().any(|s| s.rank == h.rank)).cloned().collect();
        if !alive.is_empty() {
            hung = alive;
        }
    }
    for h in &mut hung {
        h.waits = stacks.iter().find(|s| s.rank == h.rank).map(|s| s.waits.clone());
    }
    hung
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_py_spy() {
        let text = "Process 19887: python3 /tmp/x.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n\
Thread 19887 (idle): \"MainThread\"\n    clock_nanosleep (libc.so.6)\n    time_sleep (libpython3.11.so.1.0)\n    wait_for_peer (x.py:3)\n    <module> (x.py:6)\n\
Thread 0x7F12 (active): \"pt_nccl_watchdg\"\n    ncclCommGetAsyncError (libnccl.so.2)\n    watchdogHandler (torch/x.py:4)\n";
        let t = parse_py_spy(text);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].tid, Some(19887));
        assert_eq!(t[0].name, "MainThread");
        assert_eq!(t[0].frames.len(), 4);
        assert!(t[0].frames[2].python && !t[0].frames[1].python);
        assert_eq!(fold(&t[0].frames), "wait_for_peer (x.py:3)");
        assert_eq!(t[1].tid, None);
        assert_eq!(fold(&t[1].frames), "ncclCommGetAsyncError <- watchdogHandler");
    }

    #[test]
    fn parses_eu_stack_and_gdb() {
        let eu = "PID 12 - process\nTID 12:\n#0  0x00007f wait4 - /usr/lib/x86_64-linux-gnu/libc.so.6\n#1  0x00005 - /tmp/libnccl.so.2\n#2  0x00007 ncclCommDestroy - /tmp/libnccl.so.2\nTID 13:\n#0  0x1 epoll_wait - /lib/libc.so.6\n";
        let t = parse_eu_stack(eu);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].tid, Some(12));
        assert_eq!(t[0].frames[1].func, "??");
        assert_eq!(fold(&t[0].frames), "ncclCommDestroy");
        assert_eq!(fold(&t[1].frames), "epoll_wait");
        let gdb = "[New LWP 13]\nThread 2 (Thread 0x7f (LWP 13) \"proxy\"):\n#0  0x00007f in poll () from /lib/x86_64-linux-gnu/libc.so.6\n\
Thread 1 (Thread 0x7e (LWP 12) \"epdoctor\"):\n#0  0x00007f in __futex_abstimed_wait_common () from /lib/libc.so.6\n#1  0x00007f in ncclCommDestroy () from /tmp/libnccl.so.2\n#2  epdoctor::worker::teardown (x=1) at src/worker/mod.rs:88\n";
        let t = parse_gdb(gdb);
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].tid, Some(12));
        assert_eq!(t[1].name, "epdoctor");
        assert_eq!(fold(&t[1].frames), "ncclCommDestroy <- worker::teardown");
        assert_eq!(main_thread(&t, 12).unwrap().name, "epdoctor");
    }

    #[test]
    fn proc_view_of_this_process() {
        let t = proc_stacks(std::process::id() as i32);
        assert!(!t.is_empty());
        assert!(t.iter().any(|t| t.tid == Some(std::process::id() as i32)));
    }
}
