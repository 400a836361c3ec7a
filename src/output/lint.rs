//! `lint`'s writers, one per format of its report (`crate::model::LintReport`): text (compiler style), md, json, sarif (SARIF 2.1.0).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use owo_colors::Style;
use serde_json::{json, Value};

use super::color::paint;
use super::markdown::{code_block, inline};
use crate::model::{Finding, LintReport, Severity};

fn location(f: &Finding) -> String {
    f.evidence.first().map(|e| format!("{}:{}:{}", e.source, e.line, e.column.unwrap_or(1))).unwrap_or_default()
}

fn summary(r: &LintReport) -> String {
    let count = |s: &[Severity]| r.findings.iter().filter(|f| s.contains(&f.severity)).count();
    format!(
        "{} finding(s): {} error, {} warning, {} info, in {} file(s) ({} checks{})",
        r.findings.len(),
        count(&[Severity::Error, Severity::Fatal]),
        count(&[Severity::Warning]),
        count(&[Severity::Info, Severity::Benign]),
        r.files.len(),
        r.checks.len(),
        r.torch_version.as_ref().map(|t| format!(" for torch {t}")).unwrap_or_default()
    )
}

pub(crate) fn text(r: &LintReport) -> String {
    let mut s = String::new();
    for e in &r.errors {
        let _ = writeln!(
            s,
            "{}:{}:{}: {} does not parse ({})",
            e.source,
            e.line,
            e.column.unwrap_or(1),
            paint("error:", Style::new().red().bold()),
            e.text
        );
    }
    for f in &r.findings {
        let style = match f.severity {
            Severity::Benign | Severity::Info => Style::new().green(),
            Severity::Warning => Style::new().yellow(),
            Severity::Error | Severity::Fatal => Style::new().red(),
        };
        let _ = writeln!(
            s,
            "{}: {} [{}] {}",
            location(f),
            paint(f.severity.as_str(), style.bold()),
            paint(&f.rule, Style::new().bold()),
            f.title
        );
        if let Some(e) = f.evidence.first() {
            let _ = writeln!(s, "  {:>5} | {}", e.line, e.text);
        }
        if let Some(c) = &f.context {
            let _ = writeln!(s, "  {c}");
        }
        if let Some(t) = &f.torch {
            let _ = writeln!(s, "  applies to torch {t}");
        }
        for (head, body) in [("why:", &f.root_cause), ("fix:", &f.fix)] {
            let _ = writeln!(s, "  {}", paint(head, Style::new().bold()));
            for l in body.lines() {
                let _ = writeln!(s, "    {l}");
            }
        }
        if !f.refs.is_empty() {
            let _ = writeln!(s, "  refs: {}", f.refs.join("  "));
        }
        s.push('\n');
    }
    let _ = writeln!(s, "{}", summary(r));
    s
}

pub(crate) fn markdown(r: &LintReport) -> String {
    let mut s = String::from("## epdoctor lint\n\n");
    let _ = writeln!(s, "{}\n", inline(&summary(r)));
    for e in &r.errors {
        let _ = writeln!(
            s,
            "- **does not parse**: `{}:{}:{}`: {}",
            e.source,
            e.line,
            e.column.unwrap_or(1),
            inline(&e.text)
        );
    }
    if !r.errors.is_empty() {
        s.push('\n');
    }
    if !r.findings.is_empty() {
        s.push_str("| where | severity | check | title |\n| --- | --- | --- | --- |\n");
        for f in &r.findings {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                inline(&location(f)),
                f.severity.as_str(),
                inline(&f.rule),
                inline(&f.title)
            );
        }
    }
    for f in &r.findings {
        let _ = writeln!(s, "\n### {} at {}\n", inline(&f.rule), inline(&location(f)));
        let lines: Vec<String> = f.evidence.iter().map(|e| e.text.clone()).collect();
        s.push_str(&code_block(&lines));
        if let Some(c) = &f.context {
            let _ = writeln!(s, "\n{}", inline(c));
        }
        if let Some(t) = &f.torch {
            let _ = writeln!(s, "\nApplies to torch {}.", inline(t));
        }
        let _ = writeln!(s, "\n**Why.** {}\n\n**Fix.** {}", inline(&f.root_cause), inline(&f.fix));
        if !f.refs.is_empty() {
            let refs: Vec<String> = f.refs.iter().map(|u| format!("<{u}>")).collect();
            let _ = writeln!(s, "\nRefs: {}", refs.join(", "));
        }
    }
    s
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error | Severity::Fatal => "error",
        Severity::Warning => "warning",
        Severity::Info | Severity::Benign => "note",
    }
}

/// SARIF wants URIs relative to the checkout (`crate::lint::sarif_uri`).
fn uri(path: &str) -> String {
    crate::lint::sarif_uri(path)
}

/// SARIF's schema types its optional fields; an absent one is left out, never `null`.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
            m.retain(|_, x| !matches!(x, Value::Object(o) if o.is_empty()));
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A fix as SARIF `fix`: its replacements in the finding's file.
fn sarif_fix(x: &crate::model::LintFix, f: &Finding) -> Value {
    let reps: Vec<Value> = x
        .replacements
        .iter()
        .map(|e| {
            json!({
                "deletedRegion": { "startLine": e.start_line, "startColumn": e.start_column,
                                   "endLine": e.end_line, "endColumn": e.end_column },
                "insertedContent": { "text": e.text },
            })
        })
        .collect();
    json!({
        "description": { "text": x.description },
        "artifactChanges": [{ "artifactLocation": { "uri": f.evidence.first().map(|e| uri(&e.source)) }, "replacements": reps }],
    })
}

/// GitHub Actions annotations: one per finding at its line (warning or worse fails the job as the
/// exit status says), one error per file that does not parse, one notice with the counts.
pub fn github(r: &LintReport) -> String {
    use super::workflow::command;
    let mut s = String::new();
    for e in &r.errors {
        s.push_str(&command("error", Some((&e.source, e.line)), "epdoctor lint: syntax error", &e.text));
    }
    for f in &r.findings {
        let level = match f.severity {
            Severity::Error | Severity::Fatal => "error",
            Severity::Warning => "warning",
            _ => "notice",
        };
        let at = f.evidence.first().map(|e| (e.source.as_str(), e.line));
        s.push_str(&command(
            level,
            at,
            &format!("epdoctor {}", f.rule),
            &format!("{}\nFix: {}", f.title, super::explain_ci::one_line(&f.fix)),
        ));
    }
    let summary =
        format!("{} finding(s) in {} file(s), {} not parsed", r.findings.len(), r.files.len(), r.errors.len());
    s.push_str(&command("notice", None, "epdoctor lint", &summary));
    s
}

pub fn sarif(r: &LintReport) -> Value {
    let mut v = sarif_value(r);
    drop_nulls(&mut v);
    v
}

fn sarif_value(r: &LintReport) -> Value {
    // One rule entry per check that found something, in order of first use.
    let mut rules: BTreeMap<&str, (usize, &Finding)> = BTreeMap::new();
    let mut order = Vec::new();
    for f in &r.findings {
        if !rules.contains_key(f.rule.as_str()) {
            rules.insert(&f.rule, (order.len(), f));
            order.push(f);
        }
    }
    let rule_objs: Vec<Value> = order
        .iter()
        .map(|f| {
            json!({
                "id": f.rule,
                "name": f.rule,
                "shortDescription": { "text": f.title },
                "fullDescription": { "text": f.root_cause },
                "help": { "text": f.fix },
                "helpUri": f.refs.first(),
                "defaultConfiguration": { "level": level(f.severity) },
                "properties": { "torch": f.torch },
            })
        })
        .collect();
    let results: Vec<Value> = r
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let e = f.evidence.first();
            let fixes: Vec<Value> = r.fixes.iter().filter(|x| x.finding == i).map(|x| sarif_fix(x, f)).collect();
            json!({
                "fixes": (!fixes.is_empty()).then_some(fixes),
                "ruleId": f.rule,
                "ruleIndex": rules[f.rule.as_str()].0,
                "level": level(f.severity),
                "message": { "text": f.context.clone().unwrap_or_else(|| f.title.clone()) },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": e.map(|e| uri(&e.source)) },
                        "region": {
                            "startLine": e.map_or(1, |e| e.line),
                            "startColumn": e.and_then(|e| e.column).unwrap_or(1),
                            "snippet": { "text": e.map(|e| e.text.clone()) },
                        }
                    }
                }],
            })
        })
        .collect();
    let notes: Vec<Value> = r
        .errors
        .iter()
        .map(|e| {
            json!({
                "level": "error",
                "message": { "text": format!("does not parse: {}", e.text) },
                "locations": [{ "physicalLocation": {
                    "artifactLocation": { "uri": uri(&e.source) },
                    "region": { "startLine": e.line, "startColumn": e.column.unwrap_or(1) }
                }}],
            })
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "epdoctor",
                "version": r.tool_version,
                "rules": rule_objs,
            }},
            "columnKind": "unicodeCodePoints",
            "invocations": [{
                "executionSuccessful": r.errors.is_empty(),
                "toolExecutionNotifications": notes,
            }],
            "results": results,
        }]
    })
}
