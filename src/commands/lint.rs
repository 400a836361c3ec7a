//! `lint`: paths -> files -> the checks (`crate::lint`) -> a writer -> an exit code.

use anyhow::Result;

use crate::cli::LintArgs;
use crate::error::Typed;
use crate::lint;
use crate::model::version::Version;
use crate::output;

pub fn run(args: &LintArgs) -> Result<u8> {
    let torch = match &args.torch {
        Some(t) => Some(
            Version::parse(t)
                .ok_or_else(|| crate::error::usage_one(format!("--torch {t}: not a version (e.g. 2.6.0)")))?,
        ),
        None => None,
    };
    let files = lint::expand(&args.paths).input()?;
    let opts = lint::Options { torch, python: lint::Python::from_arg(args.python.as_deref()), threads: None };
    let report = lint::lint_files(&files, &opts).input()?;
    match args.format.output() {
        output::Format::Json => output::print_json(&report)?,
        f => output::print(&output::render(&report, &output::Options::new(f))?)?,
    }
    Ok(crate::exit::of_lint(&report))
}
