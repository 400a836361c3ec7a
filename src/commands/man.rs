//! `man` and `completions`: generated from src/cli.rs, with the exit statuses of src/exit.rs.
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;

/// The main page on stdout, or with `dir` every page (one per subcommand, as the main page names
/// them) written there.
pub fn run(dir: Option<&Path>) -> Result<u8> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    match dir {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&page(&cmd)?)?;
            out.flush()?;
        }
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            write_all(&cmd, d)?;
        }
    }
    Ok(exit::OK)
}

fn write_all(cmd: &clap::Command, dir: &Path) -> Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    std::fs::write(&path, page(cmd)?).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_all(sub, dir)?;
    }
    Ok(())
}

fn page(cmd: &clap::Command) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    buf.extend_from_slice(b".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exit::TABLE {
        // roff: a leading '.' or '\'' would be a request, '-' wants escaping.
        let meaning = meaning.replace('\\', "\\\\").replace('-', "\\-");
        buf.extend_from_slice(format!(".TP\n{code}\n{meaning}\n").as_bytes());
    }
    Ok(buf)
}

pub fn completions(shell: clap_complete::Shell) -> Result<u8> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "epdoctor", &mut std::io::stdout());
    Ok(exit::OK)
}
