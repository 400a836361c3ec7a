//! `rules list / show / test`: the rule base as the user sees it.
use anyhow::Result;

use crate::cli::RulesCommand;
use crate::error::Typed;
use crate::exit;
use crate::output;
use crate::output::rules::{self as writer, RuleRow};
use crate::rules::{fixtures, load};

pub fn run(cmd: RulesCommand) -> Result<u8> {
    match cmd {
        RulesCommand::List { format, rule_opts } => {
            let rules = load(&rule_opts.source()).rules()?;
            let counts = fixtures::fixture_counts(&rules);
            let rows: Vec<RuleRow> =
                rules.iter().map(|r| RuleRow::of(r, counts.get(r.def.id.as_str()).copied().unwrap_or(0))).collect();
            output::print(&output::render(rows.as_slice(), &output::Options::new(format.output()))?)?;
            Ok(exit::OK)
        }
        RulesCommand::Show { id, rule_opts } => {
            let rules = load(&rule_opts.source()).rules()?;
            let Some(r) = rules.iter().find(|r| r.def.id == id) else {
                let mut near: Vec<&str> = rules
                    .iter()
                    .map(|r| r.def.id.as_str())
                    .filter(|x| x.contains(id.as_str()) || id.contains(*x))
                    .collect();
                near.truncate(5);
                return Err(crate::error::usage_one(if near.is_empty() {
                    format!("no rule has the id `{id}` (see `epdoctor rules list`)")
                } else {
                    format!("no rule has the id `{id}`; did you mean {}?", near.join(", "))
                }));
            };
            output::print(&writer::show(r, &fixtures::fixtures_for(&r.def.id)))?;
            Ok(exit::OK)
        }
        RulesCommand::Test { paths, bless, rule_opts } => {
            Ok(exit::of_fixtures(fixtures::run_command(&paths, bless, &rule_opts.source())?))
        }
    }
}
