//! epdoctor: reproduce and triage NCCL / PyTorch distributed / NVSHMEM / DeepEP warnings.
//!
//! Data flows one way: input -> records (`log`) -> matches and verdict (`rules`) -> writers (`report`).
//! `repro` and `env` reuse that engine.

pub mod cli;
pub mod commands;
pub mod env;
mod error;
pub(crate) mod exit;
pub mod flight;
pub mod lint;
pub mod log;
pub mod meta;
pub mod model;
pub mod nccl;
pub(crate) mod output;
pub mod pipeline;
pub mod repro;
pub mod rules;
pub mod sys;
pub mod worker;

use std::ffi::OsString;
use std::process::ExitCode;

/// Parse `args` (program name first) and run the command; the exit status follows src/exit.rs.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match cli::parse(args) {
        Ok((cli, note)) => {
            if let Some(n) = note {
                eprintln!("{n}");
            }
            ExitCode::from(commands::run(cli))
        }
        Err(e) => {
            let _ = e.print();
            ExitCode::from(if e.use_stderr() { exit::ERROR } else { exit::OK })
        }
    }
}
