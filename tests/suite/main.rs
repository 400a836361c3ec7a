//! The integration tests that need nothing installed: one binary (one link of the library), one
//! module per area. tests/system/ holds those that use tools a machine may lack (NVRTC, Slurm,
//! torchrun, py-spy). docs/testing.md.

#[path = "../common/mod.rs"]
mod common;

mod accuracy;
mod catalog;
mod engine_attrs;
mod env;
mod explain;
mod hardening;
mod inputs;
mod job;
mod layers;
mod lint;
mod nccl;
mod properties;
mod repro;
mod snapshots;
mod verdicts;
