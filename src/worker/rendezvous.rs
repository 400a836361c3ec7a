//! Host-side coordination through the cell's rendezvous folder: the NCCL unique id, pid files,
//! marker files and a file barrier. Files are written to a temporary name and renamed, so a reader
//! never sees half a file. The GPU is never touched here: a host wait must not occupy the GPU
//! that ranks sharing it need for their timed kernels.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::sys::procs;

pub const NCCL_ID_FILE: &str = "nccl-id";

pub struct Rendezvous {
    pub dir: PathBuf,
    pub rank: usize,
    pub world: usize,
    pub timeout: Duration,
}

impl Rendezvous {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let dst = self.path(name);
        let tmp = self.path(&format!(".{name}.tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &dst).with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))
    }

    /// Wait for `name` to exist (up to the deadline) and return its bytes.
    pub fn wait_read(&self, name: &str, what: &str) -> Result<Vec<u8>> {
        let p = self.path(name);
        let start = Instant::now();
        loop {
            match std::fs::read(&p) {
                Ok(b) => return Ok(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
            }
            if start.elapsed() > self.timeout {
                bail!(
                    "waited {:.0} s for {what} ({}); the rank that writes it never got there",
                    self.timeout.as_secs_f64(),
                    p.display()
                );
            }
            std::thread::sleep(poll_interval(start));
        }
    }

    /// All ranks create `hb-<tag>-<rank>`; return when every rank's file exists.
    pub fn barrier(&self, tag: &str) -> Result<()> {
        self.write(&format!("hb-{tag}-{}", self.rank), b"")?;
        let start = Instant::now();
        for r in 0..self.world {
            let p = self.path(&format!("hb-{tag}-{r}"));
            while !p.exists() {
                if start.elapsed() > self.timeout {
                    bail!("host barrier '{tag}': rank {r} did not arrive within {:.0} s", self.timeout.as_secs_f64());
                }
                std::thread::sleep(poll_interval(start));
            }
        }
        Ok(())
    }

    pub fn write_pid(&self) -> Result<()> {
        self.write(&format!("pid-{}", self.rank), std::process::id().to_string().as_bytes())
    }

    pub fn pid_of(&self, rank: usize) -> Result<i32> {
        let b = self.wait_read(&format!("pid-{rank}"), &format!("rank {rank}'s pid file"))?;
        String::from_utf8_lossy(&b).trim().parse().with_context(|| format!("pid file of rank {rank} is not a number"))
    }

    /// Wait until the process is gone (or a zombie, which its launcher has yet to reap).
    pub fn wait_exited(&self, pid: i32) -> Result<Duration> {
        let start = Instant::now();
        while procs::alive(pid) {
            if start.elapsed() > self.timeout {
                bail!("process {pid} still running after {:.0} s", self.timeout.as_secs_f64());
            }
            std::thread::sleep(poll_interval(start));
        }
        Ok(start.elapsed())
    }
}

/// Fast at first (ranks usually arrive together), then gentler.
fn poll_interval(start: Instant) -> Duration {
    if start.elapsed() < Duration::from_secs(1) {
        Duration::from_micros(500)
    } else {
        Duration::from_millis(10)
    }
}

/// Seconds from an environment variable, or the default; a bad value is an error naming it.
pub fn env_secs(name: &str, default: f64) -> Result<Duration> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            let s: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0)
                .with_context(|| format!("{name}={v}: expected a positive number of seconds"))?;
            Ok(Duration::from_secs_f64(s))
        }
        _ => Ok(Duration::from_secs_f64(default)),
    }
}

/// This rank's place: the flags, else the launcher's variables (`--launcher slurm` starts one worker
/// per task, torchrun one per rank). The workload maps buffers between ranks with CUDA IPC, so every
/// rank must be on one node.
pub fn place(rank: Option<usize>, world: Option<usize>) -> Result<(usize, usize)> {
    place_from(rank, world, &|k| std::env::var(k).ok())
}

fn place_from(
    rank: Option<usize>,
    world: Option<usize>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(usize, usize)> {
    let var = |names: &[&str]| -> Result<Option<usize>> {
        for n in names {
            if let Some(v) = env(n) {
                return v.trim().parse().map(Some).with_context(|| format!("{n}={v}: expected a number"));
            }
        }
        Ok(None)
    };
    let rank = match rank {
        Some(r) => Some(r),
        None => var(&["SLURM_PROCID", "RANK"])?,
    };
    let world = match world {
        Some(w) => Some(w),
        None => var(&["SLURM_NTASKS", "WORLD_SIZE"])?,
    };
    let (Some(rank), Some(world)) = (rank, world) else {
        bail!("--rank and --world are needed (or SLURM_PROCID and SLURM_NTASKS as srun sets them, RANK and WORLD_SIZE as torchrun does)");
    };
    let nodes = var(&["SLURM_STEP_NUM_NODES"])?.into_iter().chain(var(&["GROUP_WORLD_SIZE"])?).max();
    if nodes.is_some_and(|n| n > 1) {
        bail!(
            "the built-in workload runs on one node (its ranks map each other's buffers with CUDA IPC), \
             and this launch spans {} nodes: across nodes, run your own command (`repro --launcher slurm -- CMD`)",
            nodes.unwrap_or(0)
        );
    }
    Ok((rank, world))
}

pub fn ensure_dir(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("--rendezvous {}: not a folder", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("--rendezvous {}: cannot create", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_and_files_between_threads() {
        let dir = std::env::temp_dir().join(format!("epdoctor-rdv-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mk = |rank| Rendezvous { dir: dir.clone(), rank, world: 3, timeout: Duration::from_secs(10) };
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let rv = mk(r);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20 * r as u64));
                    rv.barrier("t").unwrap();
                    if r == 0 {
                        rv.write("id", b"xyz").unwrap();
                    }
                    rv.wait_read("id", "the id").unwrap()
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), b"xyz");
        }
        let late = Rendezvous { timeout: Duration::from_millis(50), ..mk(1) };
        let e = late.wait_read("never", "a file nobody writes").unwrap_err().to_string();
        assert!(e.contains("a file nobody writes"), "{e}");
        let e = Rendezvous { world: 4, ..late }.barrier("u").unwrap_err().to_string();
        assert!(e.contains("did not arrive"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn place_from_flags_then_slurm_then_torchrun() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let slurm = env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4"), ("SLURM_STEP_NUM_NODES", "1"), ("RANK", "9")]);
        assert_eq!(place_from(None, None, &slurm).unwrap(), (3, 4));
        assert_eq!(place_from(Some(1), Some(2), &slurm).unwrap(), (1, 2));
        assert_eq!(place_from(None, None, &env(&[("RANK", "1"), ("WORLD_SIZE", "2")])).unwrap(), (1, 2));
        let e = place_from(None, None, &env(&[])).unwrap_err().to_string();
        assert!(e.contains("--rank and --world are needed"), "{e}");
        let e = place_from(None, None, &env(&[("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")])).unwrap_err().to_string();
        assert!(e.contains("SLURM_PROCID=x"), "{e}");
        let two = env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "16"), ("SLURM_STEP_NUM_NODES", "2")]);
        let e = place_from(None, None, &two).unwrap_err().to_string();
        assert!(e.contains("spans 2 nodes"), "{e}");
        let e = place_from(None, None, &env(&[("RANK", "0"), ("WORLD_SIZE", "16"), ("GROUP_WORLD_SIZE", "2")]));
        assert!(e.is_err());
    }

    #[test]
    fn env_secs_rejects_garbage() {
        assert_eq!(env_secs("EPDOCTOR_TEST_UNSET_VAR_XYZ", 2.5).unwrap(), Duration::from_millis(2500));
    }
}
