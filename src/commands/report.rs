//! `report`: one Markdown document for an issue: what the logs say (explain), the repro
//! comparison when a run folder is given, and the environment. The whole document goes through
//! one redactor, so a host keeps the same pseudonym in every section.
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::cli::{Format, ReportArgs};
use crate::env;
use crate::output::{self as report, RenderOpts};

pub fn run(args: &ReportArgs) -> anyhow::Result<u8> {
    if !(args.python_timeout.is_finite() && args.python_timeout > 0.0) {
        bail!("--python-timeout must be a positive number of seconds, got {}", args.python_timeout);
    }
    // Fail on a bad -o or --repro before the slow parts.
    if let Some(o) = &args.output {
        if o.exists() {
            bail!("{} already exists; report never overwrites a file (choose another -o)", o.display());
        }
        let parent = o.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !parent.is_dir() {
            bail!("-o {}: folder {} does not exist", o.display(), parent.display());
        }
    }
    let repro = args.repro.as_deref().map(read_repro).transpose()?;
    let analysis = if args.logs.is_empty() {
        None
    } else {
        Some(super::explain::analyze(&args.logs, &args.rule_opts).context("explaining the logs")?)
    };
    let env = env::collect(&env::Sources::system(Duration::from_secs_f64(args.python_timeout)));
    let doc = compose(&env, analysis.as_ref(), repro.as_ref(), &args.logs);
    let doc = if args.no_redact { doc } else { crate::output::env::redact(&env, &doc) };
    match &args.output {
        None => {
            let mut so = std::io::stdout().lock();
            so.write_all(doc.as_bytes())?;
            so.flush()?;
        }
        Some(o) => write_new(o, &doc)?,
    }
    Ok(crate::exit::OK)
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

/// What a repro run folder contributes.
pub struct Repro {
    pub dir: PathBuf,
    pub markdown: String,
    /// From cells.json: "complete", "interrupted", "running"; None when unreadable.
    pub status: Option<String>,
}

pub fn read_repro(dir: &Path) -> anyhow::Result<Repro> {
    if !dir.is_dir() {
        bail!("--repro {}: not a folder", dir.display());
    }
    let md_path = dir.join("report.md");
    let markdown = std::fs::read_to_string(&md_path).map_err(|e| {
        anyhow::anyhow!(
            "--repro {}: cannot read report.md ({e}); is it a folder written by `epdoctor repro`?",
            dir.display()
        )
    })?;
    let status = std::fs::read_to_string(dir.join("cells.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("status").and_then(|s| s.as_str()).map(str::to_string));
    Ok(Repro { dir: dir.to_path_buf(), markdown, status })
}

/// Add one `#` to every heading outside code fences, so an embedded document nests.
pub fn demote_headings(md: &str) -> String {
    let mut out = String::with_capacity(md.len() + 64);
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') && !line.starts_with("######") {
            out.push('#');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

pub fn compose(
    env: &env::EnvReport,
    analysis: Option<&crate::model::Analysis>,
    repro: Option<&Repro>,
    logs: &[PathBuf],
) -> String {
    let mut s = String::from("# epdoctor report\n\n");
    // A few lines a maintainer reads first.
    let mut facts = Vec::new();
    if let Some(a) = analysis {
        facts.push(format!("logs: verdict **{}**", a.verdict.as_str()));
        if let Some(p) = &a.primary {
            facts.push(format!("primary finding: `{}` {}", p.rule, p.title));
        }
        if let Some(v) = &a.nccl_version {
            facts.push(format!("NCCL in the logs: {v}"));
        }
        if let Some(v) = &a.torch_version {
            facts.push(format!("torch in the logs: {v}"));
        }
    }
    let nccl: Vec<String> = env
        .libraries
        .nccl
        .iter()
        .filter_map(|l| l.version.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    facts.push(format!(
        "this machine: {}; libnccl {}; torch {}{}",
        if env.gpu.devices.is_empty() {
            env.gpu.status.clone()
        } else {
            format!("{} x {}", env.gpu.devices.len(), env.gpu.devices[0].name)
        },
        if nccl.is_empty() { "none found".into() } else { nccl.join(", ") },
        env.python.torch.clone().unwrap_or_else(|| "not found".into()),
        env.python.torch_nccl.as_ref().map(|v| format!(" (NCCL {v})")).unwrap_or_default()
    ));
    let warn: Vec<&str> = env
        .checks
        .iter()
        .filter(|c| matches!(c.status, env::checks::Status::Warn | env::checks::Status::Fail))
        .map(|c| c.title.as_str())
        .collect();
    if !warn.is_empty() {
        facts.push(format!("environment checks to look at: {}", warn.join("; ")));
    }
    for f in facts {
        let _ = writeln!(s, "- {f}");
    }

    let _ = writeln!(s, "\n## Logs\n");
    match analysis {
        Some(a) => {
            let _ = writeln!(
                s,
                "Explained: {}\n",
                logs.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(", ")
            );
            // Redaction happens once, over the whole document.
            s.push_str(&report::render(a, Format::Md, &RenderOpts { redact: false, evidence: 5 }));
        }
        None => {
            let _ = writeln!(s, "No logs were given (`epdoctor report LOG...`).");
        }
    }

    if let Some(r) = repro {
        let _ = writeln!(s, "\n## Reproduction\n");
        let _ = writeln!(s, "From the run folder `{}`.", r.dir.display());
        match r.status.as_deref() {
            Some("complete") => {}
            Some(other) => {
                let _ = writeln!(s, "**The run is {other}: the comparison below is partial.**");
            }
            None => {
                let _ = writeln!(s, "(cells.json is missing or unreadable; only report.md is shown.)");
            }
        }
        s.push('\n');
        // Two levels: the run's own title sits under "## Reproduction".
        s.push_str(&demote_headings(&demote_headings(&r.markdown)));
    }

    s.push('\n');
    s.push_str(&crate::output::env::markdown(env, 2));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demote_skips_fences() {
        let md = "# a\ntext\n```\n# not a heading\n```\n## b\n";
        assert_eq!(demote_headings(md), "## a\ntext\n```\n# not a heading\n```\n### b\n");
    }

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
