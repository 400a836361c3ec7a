//! epdoctor: reproduce and triage NCCL / PyTorch distributed / NVSHMEM / DeepEP warnings.
//!
//! Data flows one way: input -> records (`log`) -> matches and verdict (`rules`) -> writers (`report`).
//! `repro` and `env` reuse that engine.

pub mod cli;
pub mod commands;
pub mod env;
mod error;
pub mod exit;
pub mod flight;
pub mod lint;
pub mod log;
pub mod model;
pub mod os;
pub(crate) mod output;
pub mod repro;
pub mod rules;
pub mod worker;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// Built-in files (rules, fixtures, kernels) as (path relative to the repository, content).
pub static EMBEDDED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (rev ", env!("EPDOCTOR_GIT_REV"), ")");

/// Parse `args` (program name first) and run the command; the exit status follows src/exit.rs.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::ERROR } else { exit::OK });
        }
    };
    output::color::init(cli.color);
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::from(exit::OK),
        Err(e) => {
            output::color::print_error(&e);
            ExitCode::from(e.downcast_ref::<error::Error>().map_or(exit::ERROR, error::Error::exit_code))
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Explain(args) => commands::explain::run(&args),
        Command::Repro(args) => commands::repro::run(&args),
        Command::Env(args) => commands::env::run(&args),
        Command::Report(args) => commands::report::run(&args),
        Command::Clean(args) => commands::env::clean(&args),
        Command::Rules(cmd) => commands::rules::run(cmd),
        Command::Lint(args) => commands::lint::run(&args),
        Command::Kernels(args) => commands::worker::kernels(&args),
        Command::Worker(args) => commands::worker::worker(&args),
        Command::Completions { shell } => commands::man::completions(shell),
        Command::Man { dir } => commands::man::run(dir.as_deref()),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
