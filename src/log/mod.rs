//! Input and records.
