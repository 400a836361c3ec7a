//! `env` and `clean`: flags -> the environment model (or the stale-file sweep) -> a writer.
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::cli::{CleanArgs, EnvArgs, Format};
use crate::env;
use crate::error::Typed;
use crate::exit;
use crate::output;

pub fn run(args: &EnvArgs) -> Result<u8> {
    // The leftovers probe a Slurm cell runs on each of its nodes (repro --launcher slurm).
    if let (true, Some(cell)) = (args.leftovers, &args.cell) {
        return leftovers(cell, args);
    }
    if !(args.python_timeout.is_finite() && args.python_timeout > 0.0) {
        crate::error::usage(vec![format!(
            "--python-timeout must be a positive number of seconds, got {}",
            args.python_timeout
        )])?;
    }
    let r = env::collect(&env::Sources::system(Duration::from_secs_f64(args.python_timeout)));
    let o = output::Options { redact: !args.no_redact, ..output::Options::new(args.format.output()) };
    output::print(&output::render(&r, &o)?)?;
    Ok(exit::OK)
}

/// `env --leftovers --cell TAG [--since T] [--kill] [-f json]`: this node's part of a cell's leftovers.
fn leftovers(cell: &str, args: &EnvArgs) -> Result<u8> {
    if cell.is_empty() {
        return Err(crate::error::usage_one(
            "--cell: the tag is empty (it is a cell folder, the EPDOCTOR_CELL_DIR value of the cell's processes)",
        ));
    }
    let n = crate::repro::slurm::probe_here(cell, args.since, args.kill);
    let text = match args.format {
        Format::Json => output::json(&n),
        Format::Text | Format::Md => {
            let mut l = n.leftovers.lines();
            if l.is_empty() {
                l.push(format!("nothing of cell {cell} on {}", n.node));
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
