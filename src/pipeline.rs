//! The one explain pipeline: inputs -> (logs, Flight Recorder dumps) -> records -> matches -> one
//! verdict. `explain`, each repro cell, `report`, the fuzz target and the property tests all call
//! it, so what they test is what users run.

use std::path::PathBuf;

use anyhow::Result;

use crate::log::{self, Expanded, Input};
use crate::model::Analysis;
use crate::rules::{Engine, Options};

/// The rule whose finding gets the "give epdoctor the dumps" note when no dump was read.
const WATCHDOG_RULE: &str = "torch-watchdog-timeout";

/// Explain what `expand` found: the dumps become one more engine input, the notes of expanding
/// and reading them come before the engine's own.
pub fn explain(engine: &Engine, mut x: Expanded, opts: &Options) -> Result<Analysis> {
    let unread = std::mem::take(&mut x.unread);
    let (inputs, mut notes, had_dumps) = crate::flight::prepare(x)?;
    let opts = Options { unread, ..opts.clone() };
    // Flight Recorder dumps belong to the logs they were given with: one job.
    let jobs = if opts.one_job || had_dumps { vec![(0..inputs.len()).collect()] } else { log::jobs::group(&inputs) };
    let mut a = if jobs.len() < 2 {
        engine.analyze(&inputs, &opts)?
    } else {
        let mut each = Vec::with_capacity(jobs.len());
        for job in &jobs {
            let part: Vec<Input> = job.iter().map(|&i| inputs[i].clone()).collect();
            // What expand could not read is said once, beside the whole.
            each.push(engine.analyze(&part, &Options { unread: Vec::new(), ..opts.clone() })?);
        }
        Analysis::of_jobs(each, opts.unread.clone())
    };
    notes.append(&mut a.notes);
    a.notes = notes;
    if !had_dumps && a.findings.iter().any(|f| f.rule == WATCHDOG_RULE) {
        a.notes.push(
            "a collective timed out: PyTorch's Flight Recorder names the rank that never joined it. Run with \
             TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 and give epdoctor the dumps \
             (default /tmp/nccl_trace_rank_<rank>, or TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>) with the logs"
                .into(),
        );
    }
    Ok(a)
}

/// `explain` over paths (files, folders, archives, `-`).
pub fn explain_paths(engine: &Engine, paths: &[PathBuf], opts: &Options) -> Result<Analysis> {
    explain(engine, log::expand(paths)?, opts)
}

/// `explain_paths`, going on past paths that cannot be read: the analysis of the rest (which counts
/// them as not read, so the verdict is never clean or benign) and each failed path with why.
pub fn explain_readable_paths(engine: &Engine, paths: &[PathBuf], opts: &Options) -> Result<(Analysis, Vec<String>)> {
    let mut x = log::expand_all(paths)?;
    let failed = std::mem::take(&mut x.failed);
    x.unread.extend(failed.iter().cloned());
    Ok((explain(engine, x, opts)?, failed))
}

/// `explain` over in-memory files (name, raw bytes: any encoding, gzip or zstd, a dump, garbage):
/// the fuzzer's and the property tests' entry. Must never panic or hang, whatever the bytes.
pub fn explain_bytes(engine: &Engine, files: &[(&str, &[u8])], opts: &Options) -> Result<Analysis> {
    let inputs =
        files.iter().map(|(name, bytes)| Input::Bytes { name: name.to_string(), bytes: (*bytes).into() }).collect();
    explain(engine, Expanded { inputs, ..Default::default() }, opts)
}
