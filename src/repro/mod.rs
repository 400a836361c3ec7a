//! `repro`: run the workload or the user's command under a matrix of settings and compare.
use crate::cli::ReproArgs;

pub fn run(_args: &ReproArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`repro` is not built yet")
}
