//! `kernels` and the hidden `worker` (one rank of the built-in workload, started by `repro`).
use anyhow::Result;

use crate::cli::{KernelsArgs, WorkerArgs};

pub fn kernels(args: &KernelsArgs) -> Result<u8> {
    crate::worker::kernels_command(&crate::worker::KernelsConfig { arch: args.arch.clone(), out: args.out.clone() })
}

pub fn worker(args: &WorkerArgs) -> Result<u8> {
    crate::worker::run(&args.config())
}
