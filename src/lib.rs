//! epdoctor: reproduce and triage NCCL / PyTorch distributed / NVSHMEM / DeepEP warnings.
//!
//! Data flows one way: input -> records (`log`) -> matches and verdict (`rules`) -> writers (`report`).
//! `repro` and `env` reuse that engine.

pub mod cli;
pub mod env;
pub mod exit;
pub mod explain;
pub mod flight;
pub mod log;
pub mod model;
pub mod report;
pub mod repro;
pub mod rules;
pub mod worker;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

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
    report::color::init(cli.color);
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::from(exit::OK),
        Err(e) => {
            report::color::print_error(&e);
            ExitCode::from(exit::ERROR)
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Explain(args) => explain::run(&args),
        Command::Repro(args) => repro::run(&args),
        Command::Env(args) => env::run(&args),
        Command::Report(args) => env::report_command(&args),
        Command::Clean(args) => env::clean(&args),
        Command::Rules(cmd) => rules::command(cmd),
        Command::Kernels(args) => worker::kernels_command(&args),
        Command::Worker(args) => worker::run(&args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "epdoctor", &mut std::io::stdout());
            Ok(exit::OK)
        }
        Command::Man => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(Cli::command()).render(&mut out)?;
            out.flush()?;
            Ok(exit::OK)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
