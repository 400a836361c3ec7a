//! One module per command: its arguments -> a validated config -> the domain -> a writer -> an exit code.
pub mod env;
pub mod explain;
pub mod lint;
pub mod man;
pub mod report;
pub mod repro;
pub mod rules;
pub mod worker;
