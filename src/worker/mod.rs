//! One rank of the built-in intranode workload, and the `kernels` command.
use crate::cli::{KernelsArgs, WorkerArgs};

pub fn run(_args: &WorkerArgs) -> anyhow::Result<u8> {
    anyhow::bail!("the workload is not built yet")
}
pub fn kernels_command(_args: &KernelsArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`kernels` is not built yet")
}
