//! The rule base: schema and loading, the matcher, fixtures.

pub mod catalog;
pub mod engine;
pub mod fixtures;
pub mod schema;
pub mod version;

use anyhow::Result;

pub use engine::{Engine, Options};

/// The engine over the built-in rules plus the user's.
/// Which rules a run uses: the user's files or folders, and whether the built-in ones too.
#[derive(Debug, Clone)]
pub struct RuleSource {
    pub files: Vec<std::path::PathBuf>,
    pub builtin: bool,
}

impl RuleSource {
    /// The built-in rules alone.
    pub fn builtin() -> RuleSource {
        RuleSource { files: Vec::new(), builtin: true }
    }
}

pub fn engine(opts: &RuleSource) -> Result<Engine> {
    Engine::new(load(opts)?)
}

pub fn load(opts: &RuleSource) -> Result<Vec<schema::Rule>> {
    schema::load_rules_with(&opts.files, opts.builtin)
}
