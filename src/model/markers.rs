//! What one rank of a repro cell said about itself in its marker lines (`sys::markers` reads them):
//! part of the run model that cells.json holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The phases the worker marks, in the order it enters them.
pub const PHASES: &[&str] = &["init", "work", "teardown-start", "teardown-end"];

/// What one rank said about itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankMarkers {
    /// Phase name -> unix time (seconds) at which the rank entered it.
    pub phases: BTreeMap<String, f64>,
    /// Every other key=value (the last value wins).
    pub keys: BTreeMap<String, String>,
    /// Free text after `note:` (e.g. which transport NCCL was left with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The rank's last marker line without the prefix and rank: where a hung rank got to.
    #[serde(default)]
    pub last: String,
}

impl RankMarkers {
    /// The last phase the rank reached, in the worker's order.
    pub fn last_phase(&self) -> Option<&'static str> {
        PHASES.iter().rev().find(|p| self.phases.contains_key(**p)).copied()
    }

    /// Teardown seconds: from the phase markers, else the worker's own `teardown_s`.
    pub fn teardown_s(&self) -> Option<f64> {
        match (self.phases.get("teardown-start"), self.phases.get("teardown-end")) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => self.keys.get("teardown_s").and_then(|v| v.parse().ok()),
        }
    }
}
