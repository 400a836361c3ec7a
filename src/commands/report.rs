//! `report`: one Markdown document for an issue from the models of explain (the logs), repro
//! (each run folder's cells.json) and env (this machine), written by `output::report` through one
//! redactor, so a host keeps the same pseudonym in every section.
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::cli::ReportArgs;
use crate::env;
use crate::model::run::{Run, CELLS_FILE};
use crate::output::redact::Redactor;

pub fn run(args: &ReportArgs) -> anyhow::Result<u8> {
    let mut problems = Vec::new();
    if !(args.python_timeout.is_finite() && args.python_timeout > 0.0) {
        problems.push(format!("--python-timeout must be a positive number of seconds, got {}", args.python_timeout));
    }
    // Fail on a bad -o or --repro before the slow parts.
    if let Some(o) = &args.output {
        let parent = o.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if o.exists() {
            problems
                .push(format!("{} already exists; report never overwrites a file (choose another -o)", o.display()));
        } else if !parent.is_dir() {
            problems.push(format!("-o {}: folder {} does not exist", o.display(), parent.display()));
        }
    }
    for l in &args.logs {
        if l.join(CELLS_FILE).is_file() {
            problems.push(format!(
                "{} is a repro run folder, not a log: give it with --repro (one folder per flag: --repro A --repro B)",
                l.display()
            ));
        }
    }
    let mut repros = Vec::new();
    for d in &args.repro {
        match load_run(d) {
            Ok(r) => repros.push((d.clone(), r)),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    crate::error::usage(problems)?;
    let analysis = if args.logs.is_empty() {
        None
    } else {
        Some(super::explain::analyze(&args.logs, &args.rule_opts.source()).context("explaining the logs")?)
    };
    let env = env::collect(&env::Sources::system(Duration::from_secs_f64(args.python_timeout)));
    let mut red = crate::output::env::redactor_for(&env);
    let doc = crate::output::report::Doc { env: &env, analysis: analysis.as_ref(), logs: &args.logs, repros: &repros };
    let doc = crate::output::report::markdown(&doc, (!args.no_redact).then_some(&mut red as &mut Redactor));
    match &args.output {
        None => crate::output::print(&doc)?,
        Some(o) => write_new(o, &doc)?,
    }
    Ok(crate::exit::OK)
}

/// A run folder given with --repro, read with repro's one loader.
fn load_run(dir: &Path) -> anyhow::Result<Run> {
    if !dir.is_dir() {
        bail!("--repro {}: not a folder", dir.display());
    }
    if !dir.join(CELLS_FILE).is_file() {
        bail!("--repro {}: no {CELLS_FILE} in it; is it a folder written by `epdoctor repro`?", dir.display());
    }
    crate::repro::load_run(dir).with_context(|| format!("--repro {}", dir.display()))
}

/// Create `path` and write `text`; refuse if it exists (also when it appears meanwhile).
pub fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!("{} already exists; report never overwrites a file (choose another -o)", path.display())
        } else {
            anyhow::anyhow!("cannot create {}: {e}", path.display())
        }
    })?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_new_never_overwrites() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.md");
        write_new(&p, "one").unwrap();
        let e = write_new(&p, "two").unwrap_err().to_string();
        assert!(e.contains("already exists"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "one");
    }
}
