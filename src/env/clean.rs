//! `clean`: NCCL's /dev/shm files that no live process holds. A dry run unless `--yes`; a file
//! that any live process has open or mapped is never deleted, and neither is one we cannot be
//! sure about (some processes unreadable). Each file is checked again right before it is unlinked.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::checks::human_bytes;
use super::shm::{self, ShmFile, ShmState};
use crate::sys::procs::ProcScan;

pub struct Outcome {
    pub text: String,
    pub deleted: Vec<String>,
    pub failed: Vec<String>,
}

fn scan_for(proc_root: &Path, dir: &Path) -> ProcScan {
    ProcScan::scan(proc_root, &shm::map_prefixes(dir))
}

pub fn clean_dir(proc_root: &Path, dir: &Path, yes: bool) -> anyhow::Result<Outcome> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!("{} does not exist (see --dir)", dir.display())
        }
        Err(e) => anyhow::bail!("cannot read {} (see --dir): {e}", dir.display()),
        Ok(m) if !m.is_dir() => anyhow::bail!("{} is not a folder (see --dir)", dir.display()),
        Ok(_) => {}
    }
    let scan = scan_for(proc_root, dir);
    let files = shm::list(dir, &scan, crate::sys::names::is_nccl_shm)
        .with_context(|| format!("cannot list {}", dir.display()))?;
    let mut s = String::new();
    let mut out = Outcome { text: String::new(), deleted: Vec::new(), failed: Vec::new() };
    let _ = writeln!(s, "{}: {} nccl-* file(s)", dir.display(), files.len());
    for f in &files {
        let why = match f.state {
            ShmState::InUse if f.holders.is_empty() => {
                "open in a process /proc does not show (another pid namespace?)".to_string()
            }
            ShmState::InUse => format!("held by {}", fmt_holders(f)),
            ShmState::Stale => "no live process has it open or mapped".to_string(),
            ShmState::Unknown => "no holder seen, but some processes could not be inspected".to_string(),
        };
        let _ = writeln!(s, "  {:<7} {}  {}  {why}", f.state, f.path, human_bytes(f.size));
    }
    let stale: Vec<&ShmFile> = files.iter().filter(|f| f.state == ShmState::Stale).collect();
    let unknown = files.iter().filter(|f| f.state == ShmState::Unknown).count();
    if unknown > 0 {
        let who: Vec<String> = scan.unreadable.iter().take(5).map(|(pid, why)| format!("{pid} ({why})")).collect();
        let _ = writeln!(
            s,
            "{unknown} file(s) left alone: no lease could be taken on them and {} process(es) could not be inspected ({}); run as root or as the files' owner",
            scan.unreadable.len(),
            who.join(", ")
        );
    }
    let bytes: u64 = stale.iter().map(|f| f.size).sum();
    if stale.is_empty() {
        let _ = writeln!(s, "nothing to delete");
    } else if !yes {
        let _ =
            writeln!(s, "would delete {} file(s), {} (dry run; add --yes to delete)", stale.len(), human_bytes(bytes));
    } else {
        // Look again: a job may have started since the first scan.
        let again = scan_for(proc_root, dir);
        for f in stale {
            let p = Path::new(&f.path);
            let holders = again.holders_of(p);
            if !holders.is_empty() {
                let _ = writeln!(
                    s,
                    "  kept    {} (now held by {})",
                    f.path,
                    holders.iter().map(|h| h.pid.to_string()).collect::<Vec<_>>().join(", ")
                );
                continue;
            }
            match shm::unlink_if_unheld(p, again.unreadable.is_empty()) {
                Ok(shm::Unlink::Deleted) => {
                    let _ = writeln!(s, "  deleted {}", f.path);
                    out.deleted.push(f.path.clone());
                }
                Ok(shm::Unlink::Held) => {
                    let _ = writeln!(s, "  kept    {} (now open in another process)", f.path);
                }
                Ok(shm::Unlink::Unsure) => {
                    let _ = writeln!(s, "  kept    {} (cannot be sure nobody holds it)", f.path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let _ = writeln!(s, "  gone    {} (removed meanwhile)", f.path);
                }
                Err(e) => {
                    let _ = writeln!(s, "  failed  {}: {e}", f.path);
                    out.failed.push(f.path.clone());
                }
            }
        }
        let _ = writeln!(s, "deleted {} file(s)", out.deleted.len());
    }
    out.text = s;
    Ok(out)
}

fn fmt_holders(f: &ShmFile) -> String {
    f.holders.iter().map(|h| format!("{} ({})", h.pid, h.comm)).collect::<Vec<_>>().join(", ")
}
