//! `--launcher local` (the default): the ranks are local processes, each in its own process group,
//! stopped by signals to it; the cell's processes are found by their group or their tag.

use super::{CellCtx, Launcher, Ranks, WorkKind};
use crate::model::run::LauncherOut;
use crate::repro::launch::Spec;

pub struct Local;

impl Launcher for Local {
    fn describe(&self) -> Option<LauncherOut> {
        None
    }

    /// The worker: one process per rank, each told its place; a command: one process.
    fn start(&self, cell: &CellCtx) -> anyhow::Result<Vec<Spec>> {
        let w = &cell.work;
        let debug_file = |name: &str| Some(cell.dir.join(name).to_string_lossy().into_owned());
        Ok(match &w.what {
            WorkKind::Worker { ranks, config } => (0..*ranks)
                .map(|r| {
                    let place = crate::worker::Config { rank: Some(r), world: Some(*ranks), ..config.clone() };
                    let mut env = w.env.clone();
                    if w.debug_file {
                        env.insert("NCCL_DEBUG_FILE".into(), debug_file(&format!("rank{r}.nccl.%p.log")));
                    }
                    Spec {
                        label: r.to_string(),
                        program: w.program.clone(),
                        args: super::worker_args(&place),
                        env,
                        log: cell.dir.join(format!("rank{r}.log")),
                        stopper: None,
                    }
                })
                .collect(),
            WorkKind::Command { args } => {
                let mut env = w.env.clone();
                if w.debug_file {
                    env.insert("NCCL_DEBUG_FILE".into(), debug_file("nccl.%p.log"));
                }
                vec![Spec {
                    label: "cmd".into(),
                    program: w.program.clone(),
                    args: args.clone(),
                    env,
                    log: cell.dir.join("cmd.log"),
                    stopper: None,
                }]
            }
        })
    }

    fn ranks(&self) -> Ranks {
        Ranks::Processes
    }
}
