//! `--format md`: ready to paste into a GitHub issue. Redacted by default; every piece of log text
//! sits in a fenced code block (fence longer than any backtick run inside), so a log cannot inject
//! HTML, links or @mentions into the issue.

use std::fmt::Write as _;

use super::explain_text::ranks;
use super::markdown::{inline, prose, Md};
use super::Options;
use crate::model::{Analysis, Finding, Verdict};

/// How the document starts (`explain` knows it by this and does not read it as a log).
pub(crate) const HEADING: &str = crate::model::headings::EXPLAIN_MD;

/// NCCL's and torch's version, each said once with how it was found (`NCCL 2.22.3 (stated: NCCL
/// version line)`, `torch 2.5.1 (inferred from ...)`); `Err` holds `NCCL unknown` and the like.
pub(crate) fn versions_said(a: &Analysis) -> [Result<String, String>; 2] {
    [("NCCL", "nccl", &a.nccl_version), ("torch", "torch", &a.torch_version)].map(|(name, id, value)| {
        match a.versions.iter().find(|v| v.component == id) {
            Some(v) => {
                let sep = if v.detail.starts_with("from ") { " " } else { ": " };
                Ok(format!("{name} {} ({}{sep}{})", v.value, v.how, v.detail))
            }
            None => value.as_ref().map(|v| format!("{name} {v}")).ok_or(format!("{name} unknown")),
        }
    })
}

/// Learn every hostname first, so a name is masked even where it appears before the line that
/// reveals it as a hostname.
fn learn_hosts(a: &Analysis, md: &mut Md) {
    for f in &a.findings {
        f.evidence.iter().for_each(|e| md.learn(&e.text));
    }
    a.unexplained.iter().for_each(|u| md.learn(&u.text));
}

/// Several jobs: the verdict of the whole and a table of the jobs, then each job's own section.
fn write_jobs(a: &Analysis, opts: &Options, md: &mut Md) -> String {
    // The whole holds every job's findings and unexplained lines.
    learn_hosts(a, md);
    let mut s = String::new();
    let _ = writeln!(s, "{HEADING}**{}**: {} jobs\n", a.verdict.as_str(), a.jobs.len());
    let _ = writeln!(s, "{}\n", md.text(&a.reason));
    let _ = writeln!(s, "| job | verdict | files | primary |\n| ---: | --- | --- | --- |");
    for (i, j) in a.jobs.iter().enumerate() {
        let p = j.primary.as_ref().map(|p| format!("`{}`", p.rule)).unwrap_or_default();
        let files = md.text(&super::explain_text::job_sources(j));
        let _ = writeln!(s, "| {} | {} | {files} | {p} |", i + 1, j.verdict.as_str());
    }
    for (i, j) in a.jobs.iter().enumerate() {
        let _ = writeln!(s, "\n#### Job {} of {}\n", i + 1, a.jobs.len());
        // Each job's own section, without the document heading a second time.
        let body = write(j, opts, md);
        s.push_str(body.strip_prefix(HEADING).unwrap_or(&body));
    }
    s
}

/// The explain section of a document whose redactor is `md`'s (`report` writes several sections).
pub(crate) fn write(a: &Analysis, opts: &Options, md: &mut Md) -> String {
    if !a.jobs.is_empty() {
        return write_jobs(a, opts, md);
    }
    learn_hosts(a, md);
    let mut s = String::new();
    let verdict = match a.verdict {
        Verdict::Clean => "clean: no warnings or errors",
        Verdict::Benign => "benign: known noise on a run that worked",
        Verdict::Actionable => "actionable: a real problem",
        Verdict::Unknown => "unknown: warnings no rule explains",
    };
    let _ = writeln!(s, "{HEADING}**{verdict}**\n");
    // The text report's first lines: why this verdict, and how the run ended.
    if !a.reason.is_empty() {
        let _ = writeln!(s, "**Why:** {}\n", md.text(&a.reason));
    }
    // Where the first markers are, not their text (log text stays out of prose; JSON has it).
    if let Some(o) = super::explain_text::outcome_line(a, false) {
        let _ = writeln!(s, "**Outcome:** {}\n", inline(&md.text(&o)));
    }
    for u in &a.unread {
        let _ = writeln!(s, "- not read: {}", md.text(u));
    }
    if !a.unread.is_empty() {
        s.push('\n');
    }
    let mut facts = vec![format!("epdoctor {}", a.tool_version)];
    facts.extend(versions_said(a).into_iter().map(|v| v.unwrap_or_else(|e| e)));
    let _ = writeln!(s, "{}\n", inline(&facts.join(" · ")));
    if let Some(p) = &a.primary {
        let head = if a.verdict == Verdict::Actionable { "Primary finding" } else { "What it is" };
        let _ = writeln!(s, "**{head}: `{}`**: {}\n", p.rule, prose(&p.title));
        finding_md(&mut s, p, opts.evidence, md);
    }
    let others: Vec<&Finding> =
        a.findings.iter().filter(|f| a.primary.as_ref().is_none_or(|p| p.rule != f.rule)).collect();
    if !a.findings.is_empty() {
        let _ = writeln!(s, "| rule | severity | benign | lines | ranks |\n| --- | --- | --- | --- | --- |");
        for f in &a.findings {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} |",
                f.rule,
                f.severity.as_str(),
                if f.benign { "yes" } else { "no" },
                f.count,
                ranks(&f.ranks)
            );
        }
        s.push('\n');
    }
    if !others.is_empty() {
        let _ = writeln!(s, "<details><summary>Other findings ({})</summary>\n", others.len());
        for f in others {
            let _ = writeln!(s, "**`{}`**: {}\n", f.rule, prose(&f.title));
            finding_md(&mut s, f, opts.evidence_others, md);
        }
        let _ = writeln!(s, "</details>\n");
    }
    if !a.unexplained.is_empty() {
        let _ = writeln!(s, "<details><summary>Unexplained warning/error lines ({})</summary>\n", a.unexplained.len());
        let lines: Vec<String> =
            a.unexplained.iter().take(50).map(|u| format!("{}:{}: {}", u.source, u.line, u.text)).collect();
        s.push_str(&md.block(&lines));
        let _ = writeln!(s, "\n</details>\n");
    }
    if !a.notes.is_empty() {
        for n in &a.notes {
            let _ = writeln!(s, "> note: {}", md.text(n));
        }
        s.push('\n');
    }
    s
}

fn finding_md(s: &mut String, f: &Finding, evidence: usize, md: &mut Md) {
    if let Some(c) = &f.context {
        let _ = writeln!(s, "> {}\n", prose(&md.raw(c)));
    }
    let _ = writeln!(s, "- **Root cause:** {}", prose(&f.root_cause));
    let _ = writeln!(s, "- **Fix:** {}", prose(&f.fix));
    let _ = writeln!(s, "- **Ranks:** {} · **lines:** {}", ranks(&f.ranks), f.count);
    if !f.refs.is_empty() {
        let refs: Vec<String> = f.refs.iter().map(|r| format!("<{}>", r.replace(['<', '>', ' '], ""))).collect();
        let _ = writeln!(s, "- **Refs:** {}", refs.join(" "));
    }
    let lines: Vec<String> = f
        .evidence
        .iter()
        .take(evidence.max(1))
        .map(|e| {
            let rank =
                e.rank.filter(|&r| !super::says_rank(&e.text, r)).map(|r| format!(" [rank {r}]")).unwrap_or_default();
            format!("{}:{}{}: {}", e.source, e.line, rank, e.text)
        })
        .collect();
    s.push('\n');
    s.push_str(&md.block(&lines));
    s.push('\n');
}
