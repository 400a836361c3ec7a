//! The integration tests of what needs tools a machine may lack: NVRTC (kernels), Slurm and
//! torchrun (launchers), py-spy (hangs). Each such test skips, saying so, when its tool is missing,
//! unless `EPDOCTOR_REQUIRE_<TOOL>=1` (.ci/run's second stage) makes that a failure.

#[path = "../common/mod.rs"]
mod common;

mod hangs;
mod kernels;
mod launchers;
