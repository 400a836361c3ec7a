//! The result model and its writers.
pub mod color;
pub mod model;
