//! Errors a user can cause, each with its exit status from the README's table (src/exit.rs).
//! Anything else that stops a command (an unreadable input, a bad rule file) is an `anyhow` error
//! and exits 2.

use crate::exit;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Every problem with the command line found before any work, in one message.
    #[error("{}", list(.0))]
    Usage(Vec<String>),
}

impl Error {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => exit::ERROR,
        }
    }
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
