//! The rule base: schema and loading, the matcher, fixtures.

pub mod catalog;
pub mod engine;
pub mod fixtures;
pub mod pattern;
pub mod schema;
pub use crate::model::version;

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

#[cfg(test)]
mod tests {
    use crate::model::version::{boundary::*, Version};

    #[test]
    fn the_teardown_rules_change_where_the_boundaries_say() {
        let rules = super::load(&super::RuleSource::builtin()).unwrap();
        let nccl = |id: &str| rules.iter().find(|r| r.def.id == id).and_then(|r| r.nccl.clone()).unwrap();
        // (rule, a version it must cover, one it must not)
        for (id, inside, outside) in [
            ("nccl-abort-pair", Version(2, 23, 3), NCCL_ABORT_PAIR_SILENCED),
            ("nccl-proxy-res3-unguarded", NCCL_ABORT_PAIR_SILENCED, Version(2, 23, 3)),
            ("nccl-accept-stale-errno", Version(2, 30, 2), NCCL_ACCEPT_FAILED_INFO),
            ("nccl-accept-failed-demoted", NCCL_ACCEPT_FAILED_INFO, Version(2, 30, 2)),
            ("nccl-destroy-hang-peer-gone", NCCL_DESTROY_HANG, Version(2, 30, 9)),
        ] {
            let r = nccl(id);
            assert!(r.contains(inside) && !r.contains(outside), "{id}: `{}` vs {inside} / {outside}", r.text());
        }
    }
}
