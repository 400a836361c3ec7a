//! What a cell left behind: its processes still alive (and whether they hold a GPU), NCCL
//! shared-memory files created during the cell, and NCCL's abstract UDS sockets.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::launch::{signal_group, HARNESS_PREFIX};

pub use crate::model::run::{LeftoverProcess, Leftovers};
use crate::sys::names::{ends_on_its_own, is_gpu_node, is_nccl_shm, is_nccl_socket};
use crate::sys::procs::{self, FdTarget};

/// How a process is recognised as the cell's: its process group, or this variable in its environment
/// (set on every process the cell starts, inherited by their children, even after setsid).
#[derive(Debug, Clone)]
pub struct Membership {
    pub pgids: Vec<i32>,
    /// None: the process groups only (under Slurm the nodes' probes look for the variable).
    pub env: Option<(String, String)>,
    /// Also epdoctor's adopted orphans (it is the children's subreaper): a descendant that scrubbed
    /// its environment and left the process group (`setsid env -i ...`) is still found.
    pub orphans: bool,
}

/// The harness.log lines about what a cell left behind.
pub fn lines(l: &Leftovers) -> Vec<String> {
    l.facts().into_iter().map(|f| format!("{HARNESS_PREFIX} {f}")).collect()
}

/// How long exiting processes get before they count as left behind.
const SETTLE: Duration = Duration::from_millis(500);
/// How long a helper that ends by itself (`names::ends_on_its_own`) gets beyond that, when it is
/// all that is left: it exits only after its last client has, and a rank's CUDA teardown can
/// keep a client around for seconds.
const HELPER_GRACE: Duration = Duration::from_secs(10);
const KILL_WAIT: Duration = Duration::from_secs(5);

/// This host's part of what a cell left behind: once its processes had `SETTLE` to exit, the
/// NCCL sockets those still alive hold and (with `shm`: the snapshot from before the cell and the
/// folder) the NCCL shm files new since; then the processes are killed and added.
pub fn collect_here(m: &Membership, shm: Option<(&Before, &Path)>, left: &mut Leftovers) {
    let mut procs = settle(m, SETTLE);
    // Sockets are looked at while their holders are still alive.
    if let Some((before, dir)) = shm {
        left.shm = new_shm(before, dir);
    }
    left.sockets.extend(held_sockets(&procs));
    kill_all(m, &mut procs, KILL_WAIT);
    left.processes.extend(procs);
}

/// Where NCCL's shm files are looked for: /dev/shm, or `EPDOCTOR_SHM_DIR` (a test hook, so tests
/// do not share /dev/shm with each other or with real jobs).
pub fn shm_dir() -> PathBuf {
    std::env::var_os("EPDOCTOR_SHM_DIR").map(PathBuf::from).unwrap_or_else(|| crate::sys::SHM_DIR.into())
}

/// NCCL shm files present before the cell, so only new ones count. (Files outlive their creators,
/// so they are attributed by time; sockets die with their holders and are attributed by holder.)
#[derive(Debug, Default)]
pub struct Before {
    shm: HashMap<String, u64>,
}

pub fn snapshot(dir: &Path) -> Before {
    Before { shm: shm_files(dir) }
}

/// name -> inode of our NCCL shm files.
fn shm_files(dir: &Path) -> HashMap<String, u64> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let Ok(rd) = std::fs::read_dir(dir) else { return HashMap::new() };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let md = e.metadata().ok()?;
            (is_nccl_shm(&name) && md.is_file() && md.uid() == uid).then(|| (name, md.ino()))
        })
        .collect()
}

/// (inode, name) of every abstract NCCL socket in this network namespace.
fn nccl_sockets() -> Vec<(u64, String)> {
    parse_sockets(&std::fs::read_to_string("/proc/net/unix").unwrap_or_default())
}

fn parse_sockets(text: &str) -> Vec<(u64, String)> {
    procs::parse_net_unix(text)
        .into_iter()
        .filter_map(|e| {
            let p = e.path?;
            is_nccl_socket(&p).then_some((e.inode, p))
        })
        .collect()
}

/// NCCL shm files that appeared since `before`.
pub fn new_shm(before: &Before, dir: &Path) -> Vec<String> {
    let mut shm: Vec<String> =
        shm_files(dir).into_iter().filter(|(n, ino)| before.shm.get(n) != Some(ino)).map(|(n, _)| n).collect();
    shm.sort();
    shm
}

/// NCCL shm files modified at or after `since` (unix seconds): a node's probe has no snapshot from
/// before the cell.
pub fn shm_since(dir: &Path, since: f64) -> Vec<String> {
    let mtime = |n: &str| {
        let md = std::fs::metadata(dir.join(n)).ok()?;
        md.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
    };
    let mut shm: Vec<String> = shm_files(dir).into_keys().filter(|n| mtime(n).is_some_and(|t| t >= since)).collect();
    shm.sort();
    shm
}

/// NCCL's abstract sockets held open by these processes.
pub fn held_sockets(procs: &[LeftoverProcess]) -> Vec<String> {
    let held: HashSet<u64> = procs.iter().flat_map(|p| p.socket_inodes.iter().copied()).collect();
    let mut sockets: Vec<String> =
        nccl_sockets().into_iter().filter(|(ino, _)| held.contains(ino)).map(|(_, p)| p).collect();
    sockets.sort();
    sockets.dedup();
    sockets
}

/// Live (not zombie) processes that belong to the cell, except epdoctor itself.
pub fn cell_processes(m: &Membership) -> Vec<LeftoverProcess> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for (pid, dir) in procs::pids(Path::new("/proc")) {
        if pid == me {
            continue;
        }
        let Some(stat) = procs::stat(&dir) else { continue };
        if !stat.is_live() {
            continue;
        }
        let member = m.pgids.contains(&stat.pgrp)
            || (m.orphans && stat.ppid == me)
            || m.env.as_ref().is_some_and(|(k, want)| procs::environ_var(&dir, k).is_some_and(|v| v == *want));
        if !member {
            continue;
        }
        let args = procs::cmdline(&dir);
        let cmd = if args.is_empty() { format!("[{}]", stat.comm) } else { one_line(&args.join(" ")) };
        let (gpu, socket_inodes) = open_files(&dir);
        out.push(LeftoverProcess { pid, pgid: stat.pgrp, cmd, gpu, survived_kill: false, node: None, socket_inodes });
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// A command line as one harness.log line: control characters (a `python -c` script's newlines)
/// become spaces, and it is cut at 400 characters.
fn one_line(cmd: &str) -> String {
    let flat: String = cmd.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() > 400 {
        format!("{}...", flat.chars().take(400).collect::<String>())
    } else {
        flat
    }
}

/// The GPU device nodes and the sockets a process (its /proc folder) has open.
fn open_files(dir: &Path) -> (Vec<String>, Vec<u64>) {
    let (mut devs, mut socks) = (Vec::new(), Vec::new());
    let Ok(fds) = procs::fd_targets(dir) else { return (devs, socks) };
    for fd in fds {
        match fd {
            FdTarget::Path(path) if is_gpu_node(&path.to_string_lossy()) => {
                devs.push(path.to_string_lossy().into_owned())
            }
            FdTarget::Socket(inode) => socks.push(inode),
            _ => {}
        }
    }
    devs.sort();
    devs.dedup();
    (devs, socks)
}

/// Wait up to `settle` for the cell's processes to finish exiting (up to `HELPER_GRACE` more while
/// only helpers that end by themselves are left), then return those still alive.
pub fn settle(m: &Membership, settle: Duration) -> Vec<LeftoverProcess> {
    let start = Instant::now();
    loop {
        let left = cell_processes(m);
        let limit = if left.iter().all(|p| ends_on_its_own(&p.cmd)) { settle + HELPER_GRACE } else { settle };
        if left.is_empty() || start.elapsed() >= limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// SIGKILL every leftover (and the cell's groups), wait for them to go, mark the ones that stay.
pub fn kill_all(m: &Membership, procs: &mut [LeftoverProcess], wait: Duration) {
    if procs.is_empty() {
        return;
    }
    for &g in &m.pgids {
        signal_group(g, Signal::SIGKILL);
    }
    for p in procs.iter() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid), Signal::SIGKILL);
    }
    let until = Instant::now() + wait;
    loop {
        // A leftover that is epdoctor's own child (a rank given up as unkillable) would stay a zombie.
        for p in procs.iter() {
            let _ =
                nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(p.pid), Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        }
        let alive: HashSet<i32> = cell_processes(m).into_iter().map(|p| p.pid).collect();
        let any = procs.iter().any(|p| alive.contains(&p.pid));
        if !any || Instant::now() >= until {
            for p in procs.iter_mut() {
                p.survived_kill = alive.contains(&p.pid);
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_stay_on_one_line() {
        assert_eq!(one_line("python3 -c \nimport x\n\tx.run()"), "python3 -c  import x  x.run()");
        assert_eq!(one_line(&"a".repeat(500)).len(), 403);
    }

    #[test]
    fn socket_table() {
        let text = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 31337 @/tmp/nccl-socket-0-deadbeef
0000000000000000: 00000002 00000000 00010000 0001 01 31338 /run/systemd/notify
0000000000000000: 00000003 00000000 00000000 0001 03 31339
garbage line that must not hide the others
0000000000000000: 00000002 00000000 00010000 0001 01 31340 @nccl-socket-1-cafe
";
        assert_eq!(
            parse_sockets(text),
            vec![(31337, "@/tmp/nccl-socket-0-deadbeef".to_string()), (31340, "@nccl-socket-1-cafe".to_string())],
            "both names NCCL's UDS service uses (env sees both, so must repro)"
        );
    }

    #[test]
    fn new_shm_file_and_held_abstract_socket_are_seen() {
        use std::os::linux::net::SocketAddrExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nccl-old"), b"").unwrap();
        let before = snapshot(dir.path());
        std::fs::write(dir.path().join("nccl-new"), b"").unwrap();
        std::fs::write(dir.path().join("torch_123"), b"").unwrap();
        assert_eq!(new_shm(&before, dir.path()), vec!["nccl-new".to_string()]);

        let name = format!("/tmp/nccl-socket-epdoctor-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        let (_, socket_inodes) = open_files(Path::new("/proc/self"));
        let me = LeftoverProcess { socket_inodes, ..Default::default() };
        assert!(held_sockets(&[me]).contains(&format!("@{name}")));
        assert!(held_sockets(&[LeftoverProcess::default()]).is_empty(), "held by nobody of the cell");
    }

    /// A stand-in for Python's resource tracker (one python3 process whose `-c` text starts as the
    /// tracker's does) that leaves 1.5 s after the cell is no leftover; the same sleep under
    /// another command line is one, as is the helper beside a process that stays.
    #[test]
    fn a_helper_that_ends_by_itself_gets_its_grace() {
        use std::os::unix::process::CommandExt;
        const TRACKER: &str = "from multiprocessing.resource_tracker import main";
        let spawn = |head: &str, secs: u32| {
            std::process::Command::new("python3")
                .args(["-c", &format!("{head}; import time; time.sleep({secs} / 10)")])
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let quick = Duration::from_millis(300);
        let mut tracker = spawn(TRACKER, 15);
        let m = Membership { pgids: vec![tracker.id() as i32], env: None, orphans: false };
        std::thread::sleep(Duration::from_millis(100));
        assert!(settle(&m, quick).is_empty(), "the tracker stand-in left within its grace");
        tracker.wait().unwrap();

        let mut other = spawn("import sys", 15);
        let m = Membership { pgids: vec![other.id() as i32], env: None, orphans: false };
        assert_eq!(settle(&m, quick).len(), 1, "any other process gets the short settle only");
        other.wait().unwrap();

        let (mut t, mut o) = (spawn(TRACKER, 300), spawn("import sys", 300));
        let m = Membership { pgids: vec![t.id() as i32, o.id() as i32], env: None, orphans: false };
        let started = Instant::now();
        assert_eq!(settle(&m, quick).len(), 2);
        assert!(started.elapsed() < HELPER_GRACE, "a process that stays does not wait for the helper's grace");
        for c in [&mut t, &mut o] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    #[test]
    fn finds_group_members_and_escapees_and_kills_them() {
        use std::os::unix::process::CommandExt;
        let marker = format!("epdoctor-test-{}", std::process::id());
        // A group leader that stays, and a process in a group of its own found by its env.
        let mut a = std::process::Command::new("sleep").arg("300").process_group(0).spawn().unwrap();
        let mut b = std::process::Command::new("sleep")
            .arg("301")
            .process_group(0)
            .env("EPDOCTOR_TEST_CELL", &marker)
            .spawn()
            .unwrap();
        let m =
            Membership { pgids: vec![a.id() as i32], env: Some(("EPDOCTOR_TEST_CELL".into(), marker)), orphans: false };
        let mut left = settle(&m, Duration::from_millis(50));
        let pids: Vec<i32> = left.iter().map(|p| p.pid).collect();
        assert!(pids.contains(&(a.id() as i32)) && pids.contains(&(b.id() as i32)), "{left:?}");
        assert!(left.iter().any(|p| p.cmd == "sleep 301"));
        // Reap them here too: they are this test's children.
        let reaper = std::thread::spawn(move || {
            let _ = a.wait();
            let _ = b.wait();
        });
        kill_all(&m, &mut left, Duration::from_secs(10));
        reaper.join().unwrap();
        assert!(left.iter().all(|p| !p.survived_kill));
        assert!(cell_processes(&m).is_empty());
        let lines = lines(&Leftovers { processes: left, ..Default::default() });
        assert!(lines.iter().any(|l| l.ends_with("cmd=sleep 301")), "{lines:?}");
    }
}
