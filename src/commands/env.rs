//! `env` and `clean`: flags -> the environment model (or the stale-file sweep) -> a writer.
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::cli::{CleanArgs, EnvArgs, Format};
use crate::env;
use crate::error::Typed;
use crate::exit;
use crate::model::env::EnvReport;
use crate::output;

pub fn run(args: &EnvArgs) -> Result<u8> {
    // The leftovers probe a Slurm cell runs on each of its nodes (repro --launcher slurm).
    if let (true, Some(cell)) = (args.leftovers, &args.cell) {
        return leftovers(cell, args);
    }
    // Its stack probe, at a hang's deadline.
    if let (true, Some(cell)) = (args.stacks, &args.cell) {
        return stacks(cell, args);
    }
    if args.cell.is_some() {
        crate::error::usage(vec!["--cell goes with --leftovers or --stacks".into()])?;
    }
    if !(args.python_timeout.is_finite() && args.python_timeout > 0.0) {
        crate::error::usage(vec![format!(
            "--python-timeout must be a positive number of seconds, got {}",
            args.python_timeout
        )])?;
    }
    let r = env::collect(&env::Sources::system(Duration::from_secs_f64(args.python_timeout)));
    output::print(&render(&r, args.format, !args.no_redact)?)?;
    Ok(exit::OK)
}

/// The report as `env --format` writes it (the snapshot test renders a fixed machine's).
pub fn render(r: &EnvReport, format: Format, redact: bool) -> Result<String> {
    output::render(r, &output::Options { redact, ..output::Options::new(format.output()) })
}

/// `env --leftovers --cell TAG [--since T] [--kill] [-f json]`: this node's part of a cell's leftovers.
fn leftovers(cell: &str, args: &EnvArgs) -> Result<u8> {
    if cell.is_empty() {
        return Err(crate::error::usage_one(
            "--cell: the tag is empty (it is a cell folder, the EPDOCTOR_CELL_DIR value of the cell's processes)",
        ));
    }
    let n = crate::repro::launcher::slurm::probe_here(cell, args.since, args.kill);
    let text = match args.format {
        Format::Json => output::json(&n),
        Format::Text | Format::Md => {
            let mut l = crate::repro::leftovers::lines(&n.leftovers);
            if l.is_empty() {
                l.push(format!("nothing of cell {cell} on {}", n.node));
            }
            l.join("\n") + "\n"
        }
    };
    output::print(&text)?;
    Ok(exit::OK)
}

/// `env --stacks --cell TAG [-f json]`: the stacks of the cell's processes on this node.
fn stacks(cell: &str, args: &EnvArgs) -> Result<u8> {
    if cell.is_empty() || !Path::new(cell).is_dir() {
        return Err(crate::error::usage_one(format!(
            "--cell {cell:?}: not a folder (the tag is the cell folder, the EPDOCTOR_CELL_DIR value of the cell's processes)"
        )));
    }
    let n = crate::repro::launcher::slurm::stacks_here(cell);
    let text = match args.format {
        Format::Json => output::json(&n),
        Format::Text | Format::Md => {
            let mut l: Vec<String> = n.stacks.iter().flat_map(|s| s.lines.iter().cloned()).collect();
            l.extend(n.notes.iter().cloned());
            if n.stacks.is_empty() {
                l.push(format!("no process of cell {cell} on {}", n.node));
            }
            l.join("\n") + "\n"
        }
    };
    output::print(&text)?;
    Ok(exit::OK)
}

pub fn clean(args: &CleanArgs) -> Result<u8> {
    let o = env::clean::clean_dir(Path::new("/proc"), &args.dir, args.yes).input()?;
    output::print(&o.text)?;
    Ok(exit::of_clean(o.failed.len()))
}
