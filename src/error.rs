//! Errors a user can cause, one variant per cause; `commands::exit_status` maps each to its exit
//! status from the README's table (src/exit.rs). Domain code returns `anyhow` errors with the
//! path and the reason in their text; the command that knows what the user gave types them at
//! the boundary (`Error::Input` around reading the logs, `Error::Rules` around loading --rules).
//! An untyped error (a bug, a full disk) exits 2 as well.

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Every problem with the command line found before any work, in one message (for repro:
    /// a bad matrix, teardown mode, rule file or missing GPU library among them).
    #[error("{}", list(.0))]
    Usage(Vec<String>),
    /// A log, dump, script or run folder given that cannot be read (missing, unreadable, a
    /// corrupt archive) or holds nothing to read.
    #[error(transparent)]
    Input(anyhow::Error),
    /// A rule file or folder given with --rules that cannot be read or is not valid.
    #[error(transparent)]
    Rules(anyhow::Error),
    /// A GPU library the built-in workload or `kernels` needs cannot be loaded.
    #[error(transparent)]
    MissingLibrary(anyhow::Error),
    /// An NCCL release that cannot be had: not on the index, no network, a checksum mismatch,
    /// not in the cache with --offline (src/nccl/); the text says what to run by hand.
    #[error(transparent)]
    Fetch(anyhow::Error),
    /// repro: the harness failed after the run folder was created (writing a cell, its outputs).
    #[error(transparent)]
    Harness(anyhow::Error),
}

fn list(problems: &[String]) -> String {
    match problems {
        [one] => one.clone(),
        many => format!("{} problems:\n  - {}", many.len(), many.join("\n  - ")),
    }
}

/// Ok when `problems` is empty, else the usage error naming each.
pub(crate) fn usage(problems: Vec<String>) -> Result<(), Error> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Usage(problems))
    }
}

/// The usage error of one problem.
pub(crate) fn usage_one(problem: impl Into<String>) -> anyhow::Error {
    Error::Usage(vec![problem.into()]).into()
}

/// Wrappers that type a domain call's error by what the user gave it.
pub(crate) trait Typed<T> {
    fn input(self) -> anyhow::Result<T>;
    fn rules(self) -> anyhow::Result<T>;
    fn harness(self) -> anyhow::Result<T>;
    fn fetch(self) -> anyhow::Result<T>;
}

impl<T> Typed<T> for anyhow::Result<T> {
    fn input(self) -> anyhow::Result<T> {
        self.map_err(|e| typed(e, Error::Input))
    }
    fn rules(self) -> anyhow::Result<T> {
        self.map_err(|e| typed(e, Error::Rules))
    }
    fn harness(self) -> anyhow::Result<T> {
        self.map_err(|e| typed(e, Error::Harness))
    }
    fn fetch(self) -> anyhow::Result<T> {
        self.map_err(|e| typed(e, Error::Fetch))
    }
}

/// An error already typed keeps its type (the innermost cause decides).
fn typed(e: anyhow::Error, kind: fn(anyhow::Error) -> Error) -> anyhow::Error {
    if kind_of(&e).is_some() {
        e
    } else {
        kind(e).into()
    }
}

/// The typed error in `e`'s chain, if any.
pub(crate) fn kind_of(e: &anyhow::Error) -> Option<&Error> {
    e.chain().find_map(|c| c.downcast_ref::<Error>())
}
