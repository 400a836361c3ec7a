//! `--format text`: the verdict first, then the finding to act on, then a table of the rest.

use owo_colors::Style;
use std::fmt::Write as _;

use super::color::paint;
use super::Options;
use crate::model::{Analysis, Finding, Severity, Verdict};

fn verdict_style(v: Verdict) -> Style {
    match v {
        Verdict::Clean | Verdict::Benign => Style::new().green().bold(),
        Verdict::Actionable => Style::new().red().bold(),
        Verdict::Unknown => Style::new().yellow().bold(),
    }
}

/// `verdict: WORD  reason`: the reason wraps under itself; the verdict word stays first for grep.
fn verdict_line(s: &mut String, a: &Analysis, verbose: bool) {
    let lead = "verdict: ".len() + a.verdict.as_str().len() + 2;
    let reason = if verbose { a.reason.clone() } else { wrap(&a.reason, SHORT_WIDTH - lead, lead) };
    let _ = writeln!(
        s,
        "{} {}  {}",
        paint("verdict:", Style::new().bold()),
        paint(a.verdict.as_str(), verdict_style(a.verdict)),
        reason
    );
}

/// Several jobs: the verdict of the whole, one line per job, then each job's own report.
fn render_jobs(a: &Analysis, opts: &Options) -> String {
    let mut s = String::new();
    verdict_line(&mut s, a, opts.verbose);
    for u in &a.unread {
        let _ = writeln!(s, "{} {u}", paint("not read:", Style::new().yellow().bold()));
    }
    let _ = writeln!(s, "{}", paint("jobs:", Style::new().bold()));
    for (i, j) in a.jobs.iter().enumerate() {
        let what = j.primary.as_ref().map(|p| format!("  ({})", p.rule)).unwrap_or_default();
        let line = format!("{:>3}. {:<10} {}{what}", i + 1, j.verdict.as_str(), job_sources(j));
        let _ = writeln!(s, "{}", clip(&line, opts.verbose, SHORT_WIDTH));
    }
    for (i, j) in a.jobs.iter().enumerate() {
        let head = format!("── job {} of {}: {} ", i + 1, a.jobs.len(), job_sources(j));
        let _ = writeln!(s, "\n{}", paint(&clip(&head, opts.verbose, SHORT_WIDTH), Style::new().bold()));
        s.push_str(&render(j, opts));
    }
    s
}

/// A job's files, as the report names them.
pub(crate) fn job_sources(j: &Analysis) -> String {
    j.inputs.iter().map(|i| i.source.as_str()).collect::<Vec<_>>().join(", ")
}

/// The short report's width: ids stay whole, evidence and table fit in it.
const SHORT_WIDTH: usize = 100;

pub fn render(a: &Analysis, opts: &Options) -> String {
    if !a.jobs.is_empty() {
        return render_jobs(a, opts);
    }
    let mut s = String::new();
    let v = opts.verbose;
    verdict_line(&mut s, a, v);
    if let Some(o) = outcome_line(a, true) {
        let _ = writeln!(s, "{} {}", paint("outcome:", Style::new().bold()), clip(&o, v, SHORT_WIDTH - 9));
        // (the markers themselves: --format json's outcome.success[] and outcome.failure[], or -v)
    }
    for u in &a.unread {
        let _ = writeln!(s, "{} {u}", paint("not read:", Style::new().yellow().bold()));
    }
    // The words md and report use; the line is left out when neither version is known at all.
    if !a.versions.is_empty() || a.nccl_version.is_some() || a.torch_version.is_some() {
        let vers: Vec<String> =
            super::explain_md::versions_said(a).into_iter().map(|r| r.unwrap_or_else(|e| e)).collect();
        let vers = vers.join("; ");
        let vers = if v { vers } else { wrap(&vers, SHORT_WIDTH - 10, 10) };
        let _ = writeln!(s, "versions: {vers}");
    }
    if let Some(p) = &a.primary {
        let head = if a.verdict == Verdict::Actionable { "primary finding" } else { "what it is" };
        let title = if v { finding_head(p) } else { wrap(&finding_head(p), SHORT_WIDTH - head.len() - 2, 4) };
        let _ = writeln!(s, "\n{} {title}", paint(&format!("{head}:"), Style::new().bold()));
        if v {
            write_finding_body(&mut s, p, opts.evidence);
        } else {
            write_finding_short(&mut s, p);
        }
    }
    if !a.findings.is_empty() {
        findings_table(&mut s, a, v);
    }
    if v {
        for f in a.findings.iter().filter(|f| a.primary.as_ref().is_none_or(|p| p.rule != f.rule)) {
            let _ = writeln!(s, "\n{} {}", paint("-", Style::new().bold()), finding_head(f));
            write_finding_body(&mut s, f, opts.evidence_others);
        }
    }
    if !a.unexplained.is_empty() {
        let _ = writeln!(
            s,
            "\n{} ({} shown)",
            paint("unexplained warning/error lines:", Style::new().yellow().bold()),
            a.unexplained.len()
        );
        let shown = if v { 20 } else { 5 };
        for u in a.unexplained.iter().take(shown) {
            let _ = writeln!(s, "  {}", clip(&format!("{}:{}: {}", u.source, u.line, u.text), v, SHORT_WIDTH - 2));
        }
        if a.unexplained.len() > shown {
            let _ = writeln!(s, "  ... {} more (see -v or --format json)", a.unexplained.len() - shown);
        }
    }
    if let Some(ts) = a.unexplained_templates.as_ref().filter(|ts| !ts.is_empty()) {
        let _ = writeln!(s, "\n{}", paint("unexplained lines by template:", Style::new().bold()));
        for t in ts.iter().take(50) {
            let _ = writeln!(s, "  {:>6}  {}", t.count, t.template);
        }
    }
    for n in &a.notes {
        let _ = writeln!(s, "\nnote: {n}");
    }
    if !v && !a.findings.is_empty() {
        let _ = writeln!(s, "\n(-v: every finding's root cause, fix and evidence; `epdoctor rules show ID`: one rule)");
    }
    s
}

/// `succeeded (2 success markers, first: f:12 `...`; no failure marker)`; none when the log has
/// no marker of either kind and the verdict does not depend on it.
/// How the run ended and its first markers (`text`: with their lines, as the text report shows
/// them; Markdown names only where they are).
pub(crate) fn outcome_line(a: &Analysis, text: bool) -> Option<String> {
    let o = &a.outcome;
    if o.success_markers == 0 && o.failure_markers == 0 && a.verdict == Verdict::Clean {
        return None;
    }
    let side = |n: u64, ev: &[crate::model::Evidence], what: &str| match ev.first() {
        Some(e) => format!(
            "{n} {what} marker{}, first: {}:{}{}",
            if n == 1 { "" } else { "s" },
            e.source,
            e.line,
            if text { format!(" `{}`", e.text.trim()) } else { String::new() }
        ),
        None => format!("no {what} marker"),
    };
    Some(format!(
        "{} ({}; {})",
        o.status.as_str(),
        side(o.success_markers, &o.success, "success"),
        side(o.failure_markers, &o.failure, "failure")
    ))
}

/// The primary in short: the root cause and the fix as written (they are the report's point),
/// one evidence line clipped to the width.
fn write_finding_short(s: &mut String, f: &Finding) {
    if let Some(c) = &f.context {
        let _ = writeln!(s, "  {} {}", paint("context:", Style::new().yellow()), wrap(c, SHORT_WIDTH - 11, 4));
    }
    for (head, text) in [("root cause:", &f.root_cause), ("fix:", &f.fix)] {
        let _ = writeln!(s, "  {}", paint(head, Style::new().bold()));
        // Paragraphs as written, re-wrapped to the width.
        for para in text.split("\n\n") {
            let joined = para.split_whitespace().collect::<Vec<_>>().join(" ");
            let _ = writeln!(s, "    {}", wrap(&joined, SHORT_WIDTH - 4, 4));
        }
    }
    if let Some(e) = f.evidence.first() {
        let rank = e.rank.filter(|&r| !super::says_rank(&e.text, r)).map(|r| format!(", rank {r}")).unwrap_or_default();
        let _ = writeln!(s, "  {} {}:{}{rank}", paint("evidence:", Style::new().bold()), e.source, e.line);
        let _ = writeln!(s, "    {}", clip(e.text.trim(), false, SHORT_WIDTH - 4));
    }
}

/// The findings table. Rule ids and file names stay whole (an id is copied into `rules show ID`,
/// a name into a shell): where `file:line` does not fit in the short report's width, the column
/// holds the line and the file is named once above the table, or each file once below it.
fn findings_table(s: &mut String, a: &Analysis, v: bool) {
    // Short: the file's own name (the path is in the evidence and in -v).
    let name = |src: &str| if v { src.to_string() } else { src.rsplit('/').next().unwrap_or(src).to_string() };
    let firsts: Vec<Option<(String, u64)>> =
        a.findings.iter().map(|f| f.evidence.first().map(|e| (name(&e.source), e.line))).collect();
    let mut files: Vec<&String> = Vec::new();
    for (n, _) in firsts.iter().flatten() {
        if !files.contains(&n) {
            files.push(n);
        }
    }
    let table = |last: &str, cell: &dyn Fn(&str, u64) -> String| {
        let mut t = super::rules::id_table(&["rule", "severity", "benign", "count", "ranks", last]);
        for (f, first) in a.findings.iter().zip(&firsts) {
            t.add_row([
                f.rule.clone(),
                f.severity.as_str().to_string(),
                if f.benign { "yes".into() } else { "no".into() },
                f.count.to_string(),
                ranks(&f.ranks),
                first.as_ref().map(|(n, l)| cell(n, *l)).unwrap_or_default(),
            ]);
        }
        t
    };
    let mut t = table("first seen", &|n, l| format!("{n}:{l}"));
    // Content, one padding space each side and one border per column, and the last border.
    let natural = |t: &comfy_table::Table| {
        let w = t.column_max_content_widths();
        w.iter().map(|&c| c as usize + 3).sum::<usize>() + 1
    };
    let mut head = "findings:".to_string();
    let mut legend = Vec::new();
    if !v && natural(&t) > SHORT_WIDTH {
        if let [one] = files[..] {
            head = format!("findings (first seen in {one}):");
            t = table("line", &|_, l| l.to_string());
        } else {
            let key = |n: &str| files.iter().position(|f| *f == n).map_or(0, |i| i + 1);
            t = table("first seen", &|n, l| format!("[{}]:{l}", key(n)));
            legend = files.iter().enumerate().map(|(i, f)| format!("  [{}] {f}", i + 1)).collect();
        }
    }
    if !v {
        t.set_width(SHORT_WIDTH as u16);
    }
    let _ = writeln!(s, "\n{}\n{t}", paint(&head, Style::new().bold()));
    for l in legend {
        let _ = writeln!(s, "{l}");
    }
}

/// `text` wrapped at word boundaries to `width`, the lines after the first indented by `indent`.
fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut len = 0;
    for w in text.split(' ') {
        let n = w.chars().count();
        if len > 0 && len + 1 + n > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            len = 0;
        } else if len > 0 {
            out.push(' ');
            len += 1;
        }
        out.push_str(w);
        len += n;
    }
    out
}

/// `text` cut to `width` characters with an ellipsis, unless `whole`.
fn clip(text: &str, whole: bool, width: usize) -> String {
    if whole || text.chars().count() <= width {
        return text.to_string();
    }
    let mut t: String = text.chars().take(width.saturating_sub(1)).collect();
    t.push('…');
    t
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
    let nums: Vec<u64> = r.iter().map(|&x| u64::from(x)).collect();
    crate::model::runs(&nums).join(",")
}
