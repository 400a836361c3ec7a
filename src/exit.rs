//! Exit statuses, one table for every command (README, "Exit codes").

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
    (OK, "clean or benign (explain); success (other commands)"),
    (ACTIONABLE, "actionable findings (explain); a fixture failed (rules test)"),
    (ERROR, "usage error, unreadable input, bad rule file, missing GPU library"),
    (UNKNOWN, "unknown: warnings no rule explains (explain)"),
    (HARNESS, "repro: the harness itself failed or was interrupted"),
];
