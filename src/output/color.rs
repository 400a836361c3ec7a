//! Colour policy: --color, NO_COLOR, CLICOLOR_FORCE, TERM=dumb, tty.
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use owo_colors::OwoColorize;

static ON: AtomicBool = AtomicBool::new(false);

/// Colour on stdout: `Some(on)` as asked, `None` to decide from the environment and the tty.
pub fn init(choice: Option<bool>) {
    let on = choice.unwrap_or_else(auto_stdout);
    ON.store(on, Ordering::Relaxed);
    owo_colors::set_override(on);
}

/// Whether text output to stdout is coloured.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Apply `style` when colour is on.
pub fn paint(text: &str, style: owo_colors::Style) -> String {
    if enabled() {
        text.style(style).to_string()
    } else {
        text.to_string()
    }
}

/// Colour on stdout in `auto` mode.
pub fn auto_stdout() -> bool {
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    if std::env::var_os("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0") {
        return true;
    }
    if std::env::var_os("TERM").is_some_and(|t| t == "dumb") {
        return false;
    }
    std::io::stdout().is_terminal()
}

pub fn print_error(e: &anyhow::Error) {
    let use_color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    if use_color {
        eprintln!("{} {e:#}", "error:".red().bold());
    } else {
        eprintln!("error: {e:#}");
    }
}
