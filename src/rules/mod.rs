//! The rule base: schema and loading, the matcher, fixtures, and the `rules` command.

pub mod catalog;
pub mod engine;
pub mod fixtures;
pub mod schema;
pub mod version;

use std::io::Write;

use anyhow::{bail, Result};
use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;

pub use engine::{Engine, Options};

use crate::cli::{Format, RuleOpts, RulesCommand};
use crate::exit;

/// The engine over the built-in rules plus the user's.
pub fn engine(opts: &RuleOpts) -> Result<Engine> {
    Engine::new(load(opts)?)
}

pub fn load(opts: &RuleOpts) -> Result<Vec<schema::Rule>> {
    schema::load_rules_with(&opts.rules, !opts.no_builtin_rules)
}

#[derive(Serialize)]
struct RuleRow<'a> {
    id: &'a str,
    title: &'a str,
    category: &'a str,
    severity: &'a str,
    benign: bool,
    patterns: &'a [String],
    nccl: Option<&'a str>,
    torch: Option<&'a str>,
    phase: &'a schema::PhaseSpec,
    fixtures: usize,
    origin: &'a str,
}

pub fn command(cmd: RulesCommand) -> Result<u8> {
    match cmd {
        RulesCommand::List { format, rule_opts } => {
            let rules = load(&rule_opts)?;
            let counts = fixtures::fixture_counts(&rules);
            let rows: Vec<RuleRow> = rules
                .iter()
                .map(|r| RuleRow {
                    id: &r.def.id,
                    title: &r.def.title,
                    category: &r.def.category,
                    severity: r.def.severity.as_str(),
                    benign: r.def.benign,
                    patterns: &r.def.patterns,
                    nccl: r.nccl.as_ref().map(|x| x.text()),
                    torch: r.torch.as_ref().map(|x| x.text()),
                    phase: &r.def.phase,
                    fixtures: counts.get(r.def.id.as_str()).copied().unwrap_or(0),
                    origin: &r.origin,
                })
                .collect();
            let mut out = std::io::stdout().lock();
            match format {
                Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?,
                Format::Text | Format::Md => {
                    let mut t = Table::new();
                    t.load_style(if format == Format::Md {
                        presets::ASCII_MARKDOWN
                    } else {
                        presets::UTF8_FULL_CONDENSED
                    });
                    t.set_content_arrangement(ContentArrangement::Dynamic);
                    t.set_header(["id", "category", "severity", "benign", "nccl", "fixtures", "title"]);
                    for r in &rows {
                        t.add_row([
                            r.id,
                            r.category,
                            r.severity,
                            if r.benign { "yes" } else { "no" },
                            r.nccl.unwrap_or("any"),
                            &r.fixtures.to_string(),
                            r.title,
                        ]);
                    }
                    writeln!(out, "{t}")?;
                    writeln!(out, "{} rules", rows.len())?;
                }
            }
            Ok(exit::OK)
        }
        RulesCommand::Show { id, rule_opts } => {
            let rules = load(&rule_opts)?;
            let Some(r) = rules.iter().find(|r| r.def.id == id) else {
                let mut near: Vec<&str> = rules
                    .iter()
                    .map(|r| r.def.id.as_str())
                    .filter(|x| x.contains(id.as_str()) || id.contains(*x))
                    .collect();
                near.truncate(5);
                if near.is_empty() {
                    bail!("no rule has the id `{id}` (see `epdoctor rules list`)");
                }
                bail!("no rule has the id `{id}`; did you mean {}?", near.join(", "));
            };
            let d = &r.def;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}  ({})", d.id, r.origin)?;
            writeln!(out, "title:     {}", d.title)?;
            writeln!(out, "category:  {}    severity: {}    benign: {}", d.category, d.severity.as_str(), d.benign)?;
            if let Some(n) = &r.nccl {
                writeln!(
                    out,
                    "nccl:      {} (applies when the version is unknown: {})",
                    n.text(),
                    d.if_version_unknown
                )?;
            }
            if let Some(t) = &r.torch {
                writeln!(out, "torch:     {}", t.text())?;
            }
            writeln!(
                out,
                "phase:     {:?}    symptom: {}    demote_on_failure: {}    priority: {}",
                d.phase, d.symptom, d.demote_on_failure, d.priority
            )?;
            for p in &d.patterns {
                writeln!(out, "pattern:   {p}")?;
            }
            writeln!(out, "\nroot cause:\n{}\n\nfix:\n{}", d.root_cause.trim(), d.fix.trim())?;
            if !d.refs.is_empty() {
                writeln!(out, "\nrefs:")?;
                for x in &d.refs {
                    writeln!(out, "  {x}")?;
                }
            }
            let fx = fixtures::fixtures_for(&r.def.id);
            if !fx.is_empty() {
                writeln!(out, "\nfixtures:")?;
                for f in fx {
                    writeln!(out, "  {f}")?;
                }
            }
            Ok(exit::OK)
        }
        RulesCommand::Test { paths, bless, rule_opts } => fixtures::run_command(&paths, bless, &rule_opts),
    }
}
