//! `--format text`: the verdict first, then the finding to act on, then a table of the rest.

use owo_colors::Style;
use std::fmt::Write as _;

use super::color::paint;
use super::Options;
use crate::model::{Analysis, Finding, RunOutcome, Severity, Verdict};

fn verdict_style(v: Verdict) -> Style {
    match v {
        Verdict::Clean | Verdict::Benign => Style::new().green().bold(),
        Verdict::Actionable => Style::new().red().bold(),
        Verdict::Unknown => Style::new().yellow().bold(),
    }
}

fn verdict_line(a: &Analysis) -> String {
    let (v, outcome) = (a.verdict, a.outcome.status);
    match v {
        Verdict::Clean => {
            let lines: u64 = a.inputs.iter().map(|i| i.lines).sum();
            let files = a.inputs.len();
            format!("no warnings or errors in {lines} line(s) of {files} input(s)")
        }
        Verdict::Unknown if a.unexplained.is_empty() && !a.unread.is_empty() => {
            "part of the input could not be read, so nothing can be said of it (see `not read`)".into()
        }
        _ => verdict_text(v, outcome).into(),
    }
}

fn verdict_text(v: Verdict, outcome: RunOutcome) -> &'static str {
    match v {
        Verdict::Clean => "no warnings or errors",
        // "The run worked" only with a success line to show for it.
        Verdict::Benign if outcome == RunOutcome::Succeeded => {
            "only known noise, and the run succeeded (see outcome): nothing to fix for correctness"
        }
        Verdict::Benign => "only known noise; the log shows no success or failure line: check the job's exit status",
        Verdict::Actionable => "a real problem: act on the primary finding below",
        Verdict::Unknown => "warnings or errors that no rule explains (listed below)",
    }
}

pub fn render(a: &Analysis, opts: &Options) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {}  {}",
        paint("verdict:", Style::new().bold()),
        paint(a.verdict.as_str(), verdict_style(a.verdict)),
        verdict_line(a)
    );
    for u in &a.unread {
        let _ = writeln!(s, "{} {u}", paint("not read:", Style::new().yellow().bold()));
    }
    let mut vers = Vec::new();
    for v in &a.versions {
        vers.push(format!(
            "{} {} ({}{})",
            v.component,
            v.value,
            v.how,
            if v.how == "inferred" { format!(": {}", v.detail) } else { String::new() }
        ));
    }
    if !vers.is_empty() {
        let _ = writeln!(s, "versions: {}", vers.join("; "));
    }
    if let Some(p) = &a.primary {
        let head = if a.verdict == Verdict::Actionable { "primary finding" } else { "what it is" };
        let _ = writeln!(s, "\n{} {}", paint(&format!("{head}:"), Style::new().bold()), finding_head(p));
        write_finding_body(&mut s, p, opts.evidence);
    }
    let others: Vec<&Finding> =
        a.findings.iter().filter(|f| a.primary.as_ref().is_none_or(|p| p.rule != f.rule)).collect();
    if !a.findings.is_empty() {
        // Rule ids stay whole (they are copied into `rules show ID`).
        let mut t = super::rules::id_table(&["rule", "severity", "benign", "count", "ranks", "first seen"]);
        for f in &a.findings {
            let first = f.evidence.first().map(|e| format!("{}:{}", e.source, e.line)).unwrap_or_default();
            t.add_row([
                f.rule.clone(),
                f.severity.as_str().to_string(),
                if f.benign { "yes".into() } else { "no".into() },
                f.count.to_string(),
                ranks(&f.ranks),
                first,
            ]);
        }
        let _ = writeln!(s, "\n{}\n{t}", paint("findings:", Style::new().bold()));
    }
    for f in others {
        let _ = writeln!(s, "\n{} {}", paint("-", Style::new().bold()), finding_head(f));
        write_finding_body(&mut s, f, opts.evidence_others);
    }
    if !a.unexplained.is_empty() {
        let _ = writeln!(
            s,
            "\n{} ({} shown)",
            paint("unexplained warning/error lines:", Style::new().yellow().bold()),
            a.unexplained.len()
        );
        for u in a.unexplained.iter().take(20) {
            let _ = writeln!(s, "  {}:{}: {}", u.source, u.line, u.text);
        }
        if a.unexplained.len() > 20 {
            let _ = writeln!(s, "  ... {} more (see --format json)", a.unexplained.len() - 20);
        }
    }
    if let Some(ts) = &a.unexplained_templates {
        let _ = writeln!(s, "\n{}", paint("unexplained lines by template:", Style::new().bold()));
        for t in ts.iter().take(50) {
            let _ = writeln!(s, "  {:>6}  {}", t.count, t.template);
        }
    }
    for n in &a.notes {
        let _ = writeln!(s, "\nnote: {n}");
    }
    s
}

fn finding_head(f: &Finding) -> String {
    let sev_style = match f.severity {
        Severity::Benign | Severity::Info => Style::new().green(),
        Severity::Warning => Style::new().yellow(),
        Severity::Error | Severity::Fatal => Style::new().red(),
    };
    format!(
        "{} [{}{}] {}",
        paint(&f.rule, Style::new().bold()),
        paint(f.severity.as_str(), sev_style),
        if f.benign && f.severity != Severity::Benign { ", benign" } else { "" },
        f.title
    )
}

fn write_finding_body(s: &mut String, f: &Finding, evidence: usize) {
    if let Some(c) = &f.context {
        let _ = writeln!(s, "  {} {c}", paint("context:", Style::new().yellow()));
    }
    let who = if f.ranks.is_empty() {
        "unknown (no rank prefix or NCCL init line names them)".into()
    } else {
        ranks(&f.ranks)
    };
    let _ = writeln!(s, "  ranks: {who}   lines: {}", f.count);
    let _ = writeln!(s, "  {}", paint("root cause:", Style::new().bold()));
    for l in f.root_cause.lines() {
        let _ = writeln!(s, "    {l}");
    }
    let _ = writeln!(s, "  {}", paint("fix:", Style::new().bold()));
    for l in f.fix.lines() {
        let _ = writeln!(s, "    {l}");
    }
    let _ = writeln!(s, "  {}", paint("evidence:", Style::new().bold()));
    for e in f.evidence.iter().take(evidence.max(1)) {
        let rank = e.rank.filter(|&r| !super::says_rank(&e.text, r)).map(|r| format!(" rank {r}")).unwrap_or_default();
        let _ = writeln!(s, "    {}:{}{}: {}", e.source, e.line, rank, e.text);
    }
    if !f.refs.is_empty() {
        let _ = writeln!(s, "  refs: {}", f.refs.join("  "));
    }
}

pub fn ranks(r: &[u32]) -> String {
    if r.is_empty() {
        return "?".into();
    }
    // Compress runs: 0-3,5
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < r.len() {
        let mut j = i;
        while j + 1 < r.len() && r[j + 1] == r[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", r[i], r[j]) } else { r[i].to_string() });
        i = j + 1;
    }
    out.join(",")
}
