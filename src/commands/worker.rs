//! `kernels` and the hidden `worker` (one rank of the built-in workload, started by `repro`).
use anyhow::Result;

use crate::cli::{KernelsArgs, WorkerArgs};
use crate::error::{usage, Error};
use crate::worker::{self, kernels};

pub fn kernels(args: &KernelsArgs) -> Result<u8> {
    let mut problems = Vec::new();
    if let Err(e) = kernels::check_arch(&args.arch) {
        problems.push(format!("{e:#}"));
    }
    if let Some(dir) = &args.out {
        for (u, _) in kernels::units() {
            let f = worker::ptx_path(dir, u, &args.arch);
            if f.exists() {
                problems.push(format!("{} already exists; not overwriting it (choose another --out)", f.display()));
            }
        }
    }
    usage(problems)?;
    if !kernels::nvrtc_present() {
        return Err(Error::MissingLibrary(anyhow::anyhow!(kernels::nvrtc_missing_message())).into());
    }
    worker::kernels_command(&worker::KernelsConfig { arch: args.arch.clone(), out: args.out.clone() })
}

pub fn worker(args: &WorkerArgs) -> Result<u8> {
    worker::run(&args.config())
}
