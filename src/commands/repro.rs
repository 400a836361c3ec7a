//! `repro`: flags -> `repro::Config` -> the run -> the comparison in the chosen format -> exit status.
use anyhow::Result;

use crate::cli::{Format, ReproArgs};
use crate::output::repro as writer;
use crate::repro::result::{CELLS_FILE, REPORT_FILE};

pub fn run(args: &ReproArgs) -> Result<u8> {
    let done = crate::repro::run(&args.config())?;
    let (run, dir) = (&done.run, &done.dir);
    let out = match args.format {
        Format::Text => writer::text(run, dir),
        // The files the run folder keeps, as written there.
        Format::Md => std::fs::read_to_string(dir.join(REPORT_FILE))?,
        Format::Json => std::fs::read_to_string(dir.join(CELLS_FILE))?,
    };
    crate::output::print(&out)?;
    if let Some(p) = writer::partial_note(run) {
        eprintln!("epdoctor: {p}; what ran is in {}", dir.display());
    }
    if let Some(why) = &done.never_started {
        eprintln!("epdoctor: no rank of any cell started the workload; rank 0 said: {why}");
    }
    Ok(crate::exit::of_repro(done.never_started.is_some(), done.harness_failed()))
}
