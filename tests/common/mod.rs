//! The one way the integration tests start the binary: no inherited `EPDOCTOR_*` setting (each
//! would change what a test sees) and no colour. Each test file uses what it needs.
#![allow(dead_code)]

use std::path::PathBuf;

/// Every variable the binary reads as a flag's twin or a test hook.
const INHERITED: &[&str] = &[
    "EPDOCTOR_COLOR",
    "EPDOCTOR_FORMAT",
    "EPDOCTOR_RULES",
    "EPDOCTOR_NO_REDACT",
    "EPDOCTOR_EVIDENCE",
    "EPDOCTOR_MAX_BYTES",
    "EPDOCTOR_RANKS",
    "EPDOCTOR_TIMEOUT",
    "EPDOCTOR_BLESS",
    "EPDOCTOR_BARRIER_TIMEOUT",
    "EPDOCTOR_WORKER_CMD",
    "EPDOCTOR_SHM_DIR",
    "EPDOCTOR_TORCH",
    "EPDOCTOR_LINT_FORMAT",
    "EPDOCTOR_PIP",
];

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_epdoctor"))
}

/// The binary for assert_cmd's assertions.
pub fn epdoctor() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::new(bin());
    for v in INHERITED {
        c.env_remove(v);
    }
    c.env("NO_COLOR", "1");
    c
}

/// The binary as a plain process (to spawn, signal or wait on it).
pub fn std_epdoctor() -> std::process::Command {
    let mut c = std::process::Command::new(bin());
    for v in INHERITED {
        c.env_remove(v);
    }
    c.env("NO_COLOR", "1");
    c
}
