//! `kernels` (compile the workload's CUDA kernels with NVRTC) and the hidden `worker` (one rank of the
//! built-in workload, started by `repro`).
use std::io::Write as _;

use anyhow::{bail, Context, Result};

use crate::cli::{KernelsArgs, WorkerArgs};
use crate::error::{usage, Error};
use crate::worker::{self, kernels};

pub fn kernels(args: &KernelsArgs) -> Result<u8> {
    let mut problems = Vec::new();
    if let Err(e) = kernels::check_arch(&args.arch) {
        problems.push(format!("{e:#}"));
    }
    if let Some(dir) = &args.out {
        for (u, _) in kernels::units() {
            let f = worker::ptx_path(dir, u, &args.arch);
            if f.exists() {
                problems.push(format!("{} already exists; not overwriting it (choose another --out)", f.display()));
            }
        }
    }
    usage(problems)?;
    if !kernels::nvrtc_present() {
        return Err(Error::MissingLibrary(anyhow::anyhow!(kernels::nvrtc_missing_message())).into());
    }
    compile_all(args)
}

/// `epdoctor kernels`: compile every kernel with NVRTC and list the entry points.
fn compile_all(args: &KernelsArgs) -> Result<u8> {
    let units = kernels::units();
    let (major, minor) = kernels::nvrtc_version()?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "NVRTC {major}.{minor}, target {}", args.arch)?;
    for (u, _) in &units {
        let c = kernels::compile(u, &args.arch, false)?;
        if c.entries.is_empty() {
            bail!("{u}: NVRTC produced PTX without any entry point");
        }
        writeln!(
            stdout,
            "{u}: {} entry points, {:.1} KiB of PTX, {:.2} s",
            c.entries.len(),
            c.ptx.len() as f64 / 1024.0,
            c.secs
        )?;
        for e in &c.entries {
            writeln!(stdout, "  {e}")?;
        }
        if let Some(dir) = &args.out {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let f = worker::ptx_path(dir, u, &args.arch);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&f)
                .with_context(|| format!("creating {}", f.display()))?;
            file.write_all(c.ptx.as_bytes())?;
            writeln!(stdout, "  wrote {}", f.display())?;
        }
    }
    stdout.flush()?;
    Ok(crate::exit::OK)
}

pub fn worker(args: &WorkerArgs) -> Result<u8> {
    worker::run(&args.config())
}
