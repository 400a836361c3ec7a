//! One module per command: its arguments -> a validated config -> the domain -> a writer -> an exit
//! code. Errors end here too: `exit_status` is the one place a typed error (src/error.rs) becomes
//! an exit status.
pub mod env;
pub mod explain;
pub mod kernels;
pub mod lint;
pub mod man;
pub mod nccl;
pub mod report;
pub mod repro;
pub mod rules;

use crate::cli::{Cli, Command};
use crate::exit;

/// Run the parsed command line; print an error and return its status if it fails.
pub(crate) fn run(cli: Cli) -> u8 {
    crate::output::color::init(cli.color.forced());
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => exit::OK,
        Err(e) => {
            crate::output::color::print_error(&e);
            exit::of_error(&e)
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Explain(args) => explain::run(&args),
        Command::Repro(args) => repro::run(&args),
        Command::Env(args) => env::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Clean(args) => env::clean(&args),
        Command::Rules(cmd) => rules::run(cmd),
        Command::Lint(args) => lint::run(&args),
        Command::Kernels(args) => kernels::kernels(&args),
        Command::Nccl(cmd) => nccl::run(cmd),
        Command::Worker(args) => kernels::worker(&args),
        Command::Completions { shell } => man::completions(shell),
        Command::Man { dir, force } => man::run(dir.as_deref(), force),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, Typed};
    use crate::rules::RuleSource;

    fn kind(e: &anyhow::Error) -> &'static str {
        match crate::error::kind_of(e) {
            Some(Error::Usage(_)) => "usage",
            Some(Error::Input(_)) => "input",
            Some(Error::Rules(_)) => "rules",
            Some(Error::MissingLibrary(_)) => "library",
            Some(Error::Harness(_)) => "harness",
            Some(Error::Fetch(_)) => "fetch",
            None => "untyped",
        }
    }

    #[test]
    fn what_the_user_gave_decides_the_error_and_its_status() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing.log");
        let e = explain::analyze(std::slice::from_ref(&missing), &RuleSource::builtin()).unwrap_err();
        assert_eq!((kind(&e), exit::of_error(&e)), ("input", exit::ERROR), "{e:#}");
        assert!(format!("{e:#}").starts_with(&format!("cannot read {}: ", missing.display())), "{e:#}");

        let empty = d.path().join("logs");
        std::fs::create_dir(&empty).unwrap();
        let e = explain::analyze(std::slice::from_ref(&empty), &RuleSource::builtin()).unwrap_err();
        assert_eq!(kind(&e), "input", "{e:#}");
        assert!(format!("{e:#}").contains("holds no log files"), "{e:#}");

        let bad = d.path().join("bad.toml");
        std::fs::write(&bad, "[[rule]]\nid = \"x\"\n").unwrap();
        let log = d.path().join("rank0.log");
        std::fs::write(&log, "hello\n").unwrap();
        let e = explain::analyze(&[log], &RuleSource { files: vec![bad], builtin: true }).unwrap_err();
        assert_eq!((kind(&e), exit::of_error(&e)), ("rules", exit::ERROR), "{e:#}");
    }

    #[test]
    fn a_typed_error_keeps_its_kind_and_its_text() {
        let e: anyhow::Result<()> = Err(anyhow::anyhow!("inner reason").context("cannot read x"));
        let e = e.rules().input().unwrap_err();
        assert_eq!(kind(&e), "rules", "the innermost typing wins");
        assert_eq!(format!("{e:#}"), "cannot read x: inner reason");
        let e = e.context("explaining the logs");
        assert_eq!(kind(&e), "rules", "context on top keeps the type");

        let h: anyhow::Result<()> = Err(anyhow::anyhow!("writing cells.json"));
        assert_eq!(exit::of_error(&h.harness().unwrap_err()), exit::HARNESS);
        assert_eq!(exit::of_error(&crate::error::usage_one("bad flag")), exit::ERROR);
        assert_eq!(exit::of_error(&anyhow::anyhow!("a bug")), exit::ERROR);
    }
}
