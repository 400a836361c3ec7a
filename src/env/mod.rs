//! `env`, `report` and `clean`: the environment and leftovers a bug report needs.
use crate::cli::{CleanArgs, EnvArgs, ReportArgs};

pub fn run(_args: &EnvArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`env` is not built yet")
}
pub fn report_command(_args: &ReportArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`report` is not built yet")
}
pub fn clean(_args: &CleanArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`clean` is not built yet")
}
