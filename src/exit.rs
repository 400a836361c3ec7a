//! Exit statuses, one table for every command (README, "Exit codes"), and the one place each
//! result or error becomes a status.

use crate::error::Error;
use crate::model::{LintReport, Severity, Verdict};

/// Clean or benign (explain); success (other commands).
pub const OK: u8 = 0;
/// explain: at least one actionable finding.
pub const ACTIONABLE: u8 = 1;
/// Usage error, unreadable input, bad rule file, missing GPU library.
pub const ERROR: u8 = 2;
/// explain: warnings or errors that no rule explains.
pub const UNKNOWN: u8 = 3;
/// repro: the harness itself failed (a cell could not be launched, or was interrupted).
pub const HARNESS: u8 = 5;

/// Every status and what it means, as the README's table and the man page's EXIT STATUS say.
pub const TABLE: &[(u8, &str)] = &[
    (OK, "clean or benign (explain); no finding of warning or worse (lint); success (other commands)"),
    (ACTIONABLE, "actionable findings (explain); a finding of warning or worse (lint); a fixture failed (rules test)"),
    (ERROR, "usage error, unreadable input (explain: after explaining the rest), bad rule file, a script that does not parse (lint), missing GPU library"),
    (UNKNOWN, "unknown: warnings no rule explains (explain)"),
    (HARNESS, "repro: the harness itself failed or was interrupted"),
];

/// `explain`: clean and benign succeed; actionable and unknown say so.
pub fn of_verdict(v: Verdict) -> u8 {
    match v {
        Verdict::Clean | Verdict::Benign => OK,
        Verdict::Actionable => ACTIONABLE,
        Verdict::Unknown => UNKNOWN,
    }
}

/// `explain` that went on past `failed` paths it could not read: 2 when any, else the verdict's.
pub fn of_explain(v: Verdict, failed: usize) -> u8 {
    if failed > 0 {
        ERROR
    } else {
        of_verdict(v)
    }
}

/// `lint`: 2 when a file does not parse, 1 on a warning or worse, 0 otherwise.
pub fn of_lint(r: &LintReport) -> u8 {
    if !r.errors.is_empty() {
        ERROR
    } else if r.findings.iter().any(|f| f.severity >= Severity::Warning) {
        ACTIONABLE
    } else {
        OK
    }
}

/// `rules test`: 1 when a fixture failed.
pub fn of_fixtures(failed: usize) -> u8 {
    if failed == 0 {
        OK
    } else {
        ACTIONABLE
    }
}

/// `repro`: 2 when the workload never started, 5 when the harness failed (a cell could not be
/// launched) or was interrupted, else 0.
pub fn of_repro(never_started: bool, harness_failed: bool) -> u8 {
    if never_started {
        ERROR
    } else if harness_failed {
        HARNESS
    } else {
        OK
    }
}

/// `clean`: 2 when a file could not be removed.
pub fn of_clean(failed: usize) -> u8 {
    if failed == 0 {
        OK
    } else {
        ERROR
    }
}

/// A failed command (README, "Exit codes").
pub fn of_error(e: &anyhow::Error) -> u8 {
    match crate::error::kind_of(e) {
        Some(Error::Usage(_) | Error::Input(_) | Error::Rules(_) | Error::MissingLibrary(_) | Error::Fetch(_)) => ERROR,
        Some(Error::Harness(_)) => HARNESS,
        // Not caused by what the user gave (a bug, a full disk): still "could not do it".
        None => ERROR,
    }
}
