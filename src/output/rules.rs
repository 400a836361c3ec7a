//! The rule base's writers: `rules list` (text, Markdown, JSON) and `rules show` (text).
use std::fmt::Write as _;

use comfy_table::{presets, ColumnConstraint, ContentArrangement, Table};
use serde::Serialize;

use super::markdown::{code_span, inline, table};
use crate::rules::schema::{PhaseSpec, Rule};

/// One line of `rules list` (its JSON form is a contract).
#[derive(Serialize)]
pub(crate) struct RuleRow<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub category: &'a str,
    pub severity: &'a str,
    pub benign: bool,
    pub patterns: &'a [String],
    pub nccl: Option<&'a str>,
    pub torch: Option<&'a str>,
    pub phase: &'a PhaseSpec,
    pub fixtures: usize,
    pub origin: &'a str,
}

impl<'a> RuleRow<'a> {
    /// The row of rule `r`, proven by `fixtures` fixtures.
    pub fn of(r: &'a crate::rules::schema::Rule, fixtures: usize) -> RuleRow<'a> {
        RuleRow {
            id: &r.def.id,
            title: &r.def.title,
            category: &r.def.category,
            severity: r.def.severity.as_str(),
            benign: r.def.benign,
            patterns: &r.def.patterns,
            nccl: r.nccl.as_ref().map(|x| x.text()),
            torch: r.torch.as_ref().map(|x| x.text()),
            phase: &r.def.phase,
            fixtures,
            origin: &r.origin,
        }
    }
}

/// A text table whose first column (a rule id, something to copy) is never wrapped or cut,
/// however narrow the terminal: the other columns wrap instead.
pub(crate) fn id_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
    t.set_header(header.to_vec());
    if let Some(c) = t.column_mut(0) {
        c.set_constraint(ColumnConstraint::ContentWidth);
    }
    t
}

const HEADER: [&str; 7] = ["id", "category", "severity", "benign", "nccl", "fixtures", "title"];

fn cells(r: &RuleRow) -> [String; 7] {
    [
        r.id.to_string(),
        r.category.to_string(),
        r.severity.to_string(),
        if r.benign { "yes" } else { "no" }.to_string(),
        r.nccl.unwrap_or("any").to_string(),
        r.fixtures.to_string(),
        r.title.to_string(),
    ]
}

/// `rules list` as a table; `width`: its width in columns (None: the terminal's, or unbounded off
/// a terminal).
pub(crate) fn text(rows: &[RuleRow], width: Option<u16>) -> String {
    let mut t = id_table(&HEADER);
    if let Some(w) = width {
        t.set_width(w);
    }
    for r in rows {
        t.add_row(cells(r).to_vec());
    }
    format!("{t}\n{} rules\n", rows.len())
}

pub(crate) fn markdown(rows: &[RuleRow]) -> String {
    let md: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c: Vec<String> = cells(r).iter().map(|x| inline(x)).collect();
            c[0] = code_span(r.id);
            c
        })
        .collect();
    format!("{}{} rules\n", table(&HEADER, &md), rows.len())
}

pub(crate) fn show(r: &Rule, fixtures: &[&str]) -> String {
    let d = &r.def;
    let mut s = String::new();
    let _ = writeln!(s, "{}  ({})", d.id, r.origin);
    let _ = writeln!(s, "title:     {}", d.title);
    let _ = writeln!(s, "category:  {}    severity: {}    benign: {}", d.category, d.severity.as_str(), d.benign);
    if let Some(n) = &r.nccl {
        let _ = writeln!(s, "nccl:      {} (applies when the version is unknown: {})", n.text(), d.if_version_unknown);
    }
    if let Some(t) = &r.torch {
        let _ = writeln!(s, "torch:     {}", t.text());
    }
    let _ = writeln!(
        s,
        "phase:     {}    symptom: {}    demote_on_failure: {}    priority: {}",
        d.phase.text(),
        d.symptom,
        d.demote_on_failure,
        d.priority
    );
    for p in &d.patterns {
        let _ = writeln!(s, "pattern:   {p}");
    }
    let _ = writeln!(s, "\nroot cause:\n{}\n\nfix:\n{}", d.root_cause.trim(), d.fix.trim());
    if !d.refs.is_empty() {
        let _ = writeln!(s, "\nrefs:");
        for x in &d.refs {
            let _ = writeln!(s, "  {x}");
        }
    }
    if !fixtures.is_empty() {
        let _ = writeln!(s, "\nfixtures:");
        for f in fixtures {
            let _ = writeln!(s, "  {f}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_whole_in_a_narrow_table() {
        let rules = crate::rules::load(&crate::rules::RuleSource::builtin()).unwrap();
        let rows: Vec<RuleRow> = rules.iter().map(|r| RuleRow::of(r, 0)).collect();
        let t = text(&rows, Some(80));
        for r in &rows {
            assert!(t.contains(r.id), "{} cut in an 80-column table:\n{t}", r.id);
        }
        let md = markdown(&rows);
        assert!(md.contains(&format!("| `{}` |", rows[0].id)), "{md}");
    }

    #[test]
    fn show_writes_the_phase_as_in_a_rule_file() {
        let rules = crate::rules::load(&crate::rules::RuleSource::builtin()).unwrap();
        for r in &rules {
            let s = show(r, &[]);
            assert!(!s.contains("One(") && !s.contains("Many(") && !s.contains("Some("), "{s}");
        }
        let teardown = rules.iter().find(|r| r.def.phase == PhaseSpec::One(crate::rules::schema::Phase::Teardown));
        if let Some(r) = teardown {
            assert!(show(r, &[]).contains("phase:     teardown "), "{}", show(r, &[]));
        }
    }
}
