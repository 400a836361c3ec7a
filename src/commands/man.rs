//! `man` and `completions`: generated from src/cli.rs, with the exit statuses of src/exit.rs.
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;

/// The main page on stdout, or with `dir` every page (one per subcommand, as the main page names
/// them) written there. A file of one of those names already in `dir` is a usage error naming it,
/// unless `force`: nothing the user has is overwritten unasked.
pub fn run(dir: Option<&Path>, force: bool) -> Result<u8> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    match dir {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&page(&cmd)?)?;
            out.flush()?;
        }
        Some(d) => {
            let mut pages = Vec::new();
            collect(&cmd, d, &mut pages)?;
            let there: Vec<String> =
                pages.iter().filter(|(p, _)| p.exists()).map(|(p, _)| p.display().to_string()).collect();
            if !force && !there.is_empty() {
                return Err(crate::error::usage_one(format!(
                    "man --dir: {} already exist{} and would be overwritten; pass --force to replace them, or choose another --dir",
                    there.join(", "),
                    if there.len() == 1 { "s" } else { "" }
                )));
            }
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            for (path, text) in pages {
                std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(exit::OK)
}

/// Every page `cmd` and its subcommands have, with the path it goes to in `dir`.
fn collect(cmd: &clap::Command, dir: &Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) -> Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    out.push((dir.join(man.get_filename()), page(cmd)?));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, dir, out)?;
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
