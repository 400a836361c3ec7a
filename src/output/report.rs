//! `report`'s document: a few facts a maintainer reads first, then the explain, repro and env
//! writers' Markdown sections, all through the document's one redactor.
use std::fmt::Write as _;
use std::path::PathBuf;

use super::markdown::{heading, Md};
use super::redact::Redactor;
use super::{Format, Options};
use crate::model::env::{EnvReport, Status};
use crate::model::run::Run;
use crate::model::Analysis;

/// The report's first line (`explain` knows the document by it and does not read it as a log).
pub(crate) const HEADING: &str = crate::model::headings::REPORT_MD;

/// The models one report is made of.
pub(crate) struct Doc<'a> {
    pub env: &'a EnvReport,
    pub analysis: Option<&'a Analysis>,
    pub logs: &'a [PathBuf],
    /// Each run folder given with --repro and its cells.json.
    pub repros: &'a [(PathBuf, Run)],
}

/// The whole document; `red` is its one redactor (None: `--no-redact`).
pub(crate) fn markdown(doc: &Doc, red: Option<&mut Redactor>) -> String {
    let mut md = Md::new(red);
    let env = doc.env;
    let mut s = heading(1, &HEADING[2..]);
    s.push('\n');
    let mut facts = Vec::new();
    if let Some(a) = doc.analysis {
        facts.push(format!("logs: verdict **{}**", a.verdict.as_str()));
        if let Some(p) = &a.primary {
            facts.push(format!("primary finding: {} {}", md.code(&p.rule), md.text(&p.title)));
        }
        for v in super::explain_md::versions_said(a).into_iter().flatten() {
            facts.push(format!("in the logs: {}", md.text(&v)));
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
    let machine = format!(
        "{}; libnccl {}; torch {}{}",
        if env.gpu.devices.is_empty() {
            env.gpu.status.to_string()
        } else {
            format!("{} x {}", env.gpu.devices.len(), env.gpu.devices[0].name)
        },
        if nccl.is_empty() { "none found".into() } else { nccl.join(", ") },
        env.python.torch.clone().unwrap_or_else(|| "not found".into()),
        env.python.torch_nccl.as_ref().map(|v| format!(" (NCCL {v})")).unwrap_or_default()
    );
    facts.push(format!("the machine `epdoctor report` ran on: {}", md.text(&machine)));
    let warn: Vec<&str> = env
        .checks
        .iter()
        .filter(|c| matches!(c.status, Status::Warn | Status::Fail))
        .map(|c| c.title.as_str())
        .collect();
    if !warn.is_empty() {
        facts.push(format!("environment checks to look at (that machine): {}", md.text(&warn.join("; "))));
    }
    for f in facts {
        let _ = writeln!(s, "- {f}");
    }

    let _ = writeln!(s, "\n{}", heading(2, "Logs"));
    match doc.analysis {
        Some(a) => {
            let logs: Vec<String> = doc.logs.iter().map(|p| md.code(&p.display().to_string())).collect();
            let _ = writeln!(s, "Explained: {}\n", logs.join(", "));
            s.push_str(&super::explain_md::write(
                a,
                &Options { evidence_others: 3, ..Options::new(Format::Md) },
                &mut md,
            ));
        }
        None => {
            let _ = writeln!(s, "No logs were given (`epdoctor report LOG...`).");
        }
    }

    for (dir, run) in doc.repros {
        let _ = writeln!(s, "\n{}", heading(2, "Reproduction"));
        let _ = writeln!(s, "From the run folder {}.\n", md.code(&dir.display().to_string()));
        // The run's own title sits under "## Reproduction".
        s.push_str(&super::repro::markdown(run, dir, &mut md, 3));
    }

    s.push('\n');
    let env_md = super::env::markdown(env, 2, &mut md);
    // The section's heading first, then whose machine it is.
    let (head, body) = env_md.split_once('\n').unwrap_or((&env_md, ""));
    let _ = writeln!(s, "{head}\n\nThe machine `epdoctor report` ran on, which need not be where the job ran.");
    s.push_str(body);
    s
}
