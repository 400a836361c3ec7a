//! `lint`: paths -> files -> the checks (`crate::lint`) -> a writer -> an exit code.

use std::io::Write;

use anyhow::Result;

use crate::cli::LintArgs;
use crate::error::Typed;
use crate::lint;
use crate::rules::version::Version;

pub fn run(args: &LintArgs) -> Result<u8> {
    let torch = match &args.torch {
        Some(t) => Some(
            Version::parse(t)
                .ok_or_else(|| crate::error::usage_one(format!("--torch {t}: not a version (e.g. 2.6.0)")))?,
        ),
        None => None,
    };
    let files = lint::expand(&args.paths).input()?;
    let opts = lint::Options { torch, python: lint::Python::from_arg(args.python.as_deref()) };
    let report = lint::lint_files(&files, &opts).input()?;
    let text = crate::output::lint::render(&report, args.format);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(lint::exit_code(&report))
}
