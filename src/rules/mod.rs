//! The rule base: schema and loading, the matcher, fixtures.

pub mod engine;
pub mod fixtures;
pub mod schema;
pub mod version;

use anyhow::Result;

pub use engine::{Engine, Options};

use crate::cli::RuleOpts;

/// The engine over the built-in rules plus the user's.
pub fn engine(opts: &RuleOpts) -> Result<Engine> {
    Engine::new(load(opts)?)
}

pub fn load(opts: &RuleOpts) -> Result<Vec<schema::Rule>> {
    schema::load_rules_with(&opts.rules, !opts.no_builtin_rules)
}
