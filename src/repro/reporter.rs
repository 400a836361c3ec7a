//! The runner tells a [`Reporter`] what happens ([`Event`]); the reporter decides what the user
//! sees while cells run: a progress bar on a terminal, one line per cell otherwise, nothing
//! (`--quiet`), or every event as a JSON line (`--events FILE`, for scripts watching a run).

use std::io::{IsTerminal, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::model::run::{Cell, CellStatus, RunStatus};
use crate::model::Verdict;

/// What the runner does, in order: waiting for an allocation (Slurm), the plan, each cell's start,
/// ticks while it runs and its end, then an interrupt (when a signal stopped the run) and the end.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// Before the plan: what the runner waits for and why (salloc's lines, the pending reason).
    Waiting {
        what: &'a str,
    },
    Plan {
        dir: &'a Path,
        cells: usize,
    },
    CellStarted {
        index: usize,
        name: &'a str,
    },
    /// About every 10 ms while a cell runs.
    Tick,
    CellFinished {
        cell: &'a Cell,
        of: usize,
        /// In a bisection: the probe's number and the release it ran.
        probe: Option<(usize, &'a str)>,
    },
    Interrupted {
        by: &'a str,
    },
    End {
        status: RunStatus,
    },
}

pub trait Reporter {
    fn report(&mut self, e: Event);
}

/// `[3/8] 003-abort: ok, 2.1 s, 4 WARN, benign` (a bisection's cell: `[probe 2 2.21.5] ...`): a
/// finished cell in one line.
pub fn cell_line(c: &Cell, of: usize, probe: Option<(usize, &str)>) -> String {
    let at = match probe {
        Some((n, release)) => format!("probe {n} {release}"),
        None => format!("{}/{of}", c.index),
    };
    format!(
        "[{at}] {}: {}, {:.1} s, {} WARN, {}",
        c.id,
        c.detail,
        c.wall_s,
        c.warn_lines,
        c.verdict.map(|v| v.as_str()).unwrap_or("no verdict")
    )
}

/// The reporter `repro` uses without `--events`: nothing with `quiet`, a bar on a terminal, else lines.
pub fn for_stderr(quiet: bool) -> Box<dyn Reporter> {
    if quiet {
        Box::new(Quiet)
    } else if std::io::stderr().is_terminal() {
        Box::new(Bar(None))
    } else {
        Box::new(Lines)
    }
}

pub struct Quiet;

impl Reporter for Quiet {
    fn report(&mut self, _: Event) {}
}

/// One line per finished cell on stderr.
pub struct Lines;

impl Reporter for Lines {
    fn report(&mut self, e: Event) {
        match e {
            Event::CellFinished { cell, of, probe } => eprintln!("{}", cell_line(cell, of, probe)),
            Event::Waiting { what } => eprintln!("epdoctor: {what}"),
            _ => {}
        }
    }
}

/// A progress bar on stderr (a terminal), the finished cells' lines above it.
pub struct Bar(Option<ProgressBar>);

impl Reporter for Bar {
    fn report(&mut self, e: Event) {
        match e {
            // Before the bar exists.
            Event::Waiting { what } => eprintln!("epdoctor: {what}"),
            Event::Plan { cells, .. } => {
                let bar = ProgressBar::with_draw_target(Some(cells as u64), ProgressDrawTarget::stderr());
                if let Ok(style) = ProgressStyle::with_template("{spinner} [{pos}/{len}] {elapsed} {wide_msg}") {
                    bar.set_style(style);
                }
                self.0 = Some(bar);
            }
            Event::CellStarted { name, .. } => self.0.iter().for_each(|b| b.set_message(name.to_string())),
            Event::Tick => self.0.iter().for_each(ProgressBar::tick),
            Event::CellFinished { cell, of, probe } => {
                if let Some(b) = &self.0 {
                    // A bisection's cells only advance the bar.
                    if probe.is_none() {
                        b.println(cell_line(cell, of, probe));
                    }
                    b.inc(1);
                }
            }
            Event::Interrupted { .. } => {}
            Event::End { .. } => {
                if let Some(b) = self.0.take() {
                    b.finish_and_clear();
                }
            }
        }
    }
}

/// Every event but the ticks as one JSON object a line.
pub struct JsonLines<W: Write>(pub W);

#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum JsonEvent<'a> {
    Waiting {
        what: &'a str,
    },
    Plan {
        dir: &'a Path,
        cells: usize,
    },
    CellStarted {
        index: usize,
        name: &'a str,
    },
    CellFinished {
        index: usize,
        of: usize,
        name: &'a str,
        status: CellStatus,
        detail: &'a str,
        wall_s: f64,
        warn_lines: u64,
        verdict: Option<Verdict>,
        #[serde(skip_serializing_if = "Option::is_none")]
        probe: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        release: Option<&'a str>,
    },
    Interrupted {
        by: &'a str,
    },
    End {
        status: RunStatus,
    },
}

impl<W: Write> Reporter for JsonLines<W> {
    fn report(&mut self, e: Event) {
        let j = match e {
            Event::Waiting { what } => JsonEvent::Waiting { what },
            Event::Plan { dir, cells } => JsonEvent::Plan { dir, cells },
            Event::CellStarted { index, name } => JsonEvent::CellStarted { index, name },
            Event::Tick => return,
            Event::CellFinished { cell: c, of, probe } => JsonEvent::CellFinished {
                index: c.index,
                of,
                name: &c.id,
                status: c.status,
                detail: &c.detail,
                wall_s: c.wall_s,
                warn_lines: c.warn_lines,
                verdict: c.verdict,
                probe: probe.map(|p| p.0),
                release: probe.map(|p| p.1),
            },
            Event::Interrupted { by } => JsonEvent::Interrupted { by },
            Event::End { status } => JsonEvent::End { status },
        };
        // A watcher that went away must not stop the run.
        if let Ok(line) = serde_json::to_string(&j) {
            let _ = writeln!(self.0, "{line}").and_then(|_| self.0.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell() -> Cell {
        let json = r#"{"index":2,"id":"002-abort","repeat":1,"values":[0,1],"env":{},"status":"hang",
            "detail":"hang: rank 0 in teardown for 45.0 s","wall_s":47.3,"teardown_s":null,"hung":[],
            "processes":[],"markers":{},"nccl_version":null,"transport":null,"warn_lines":3,
            "verdict":"actionable","rules":[],"primary":null,"explain_error":null,
            "leftovers":{"processes":[],"shm":[],"sockets":[]}}"#;
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_line_per_event_but_ticks() {
        let mut r = JsonLines(Vec::new());
        let c = cell();
        r.report(Event::Waiting { what: "salloc: job 13 pending (Resources)" });
        r.report(Event::Plan { dir: Path::new("/runs/r1"), cells: 4 });
        r.report(Event::CellStarted { index: 2, name: "002-abort" });
        r.report(Event::Tick);
        r.report(Event::CellFinished { cell: &c, of: 4, probe: None });
        r.report(Event::Interrupted { by: "SIGINT" });
        r.report(Event::End { status: RunStatus::Interrupted });
        let text = String::from_utf8(r.0).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"{"event":"waiting","what":"salloc: job 13 pending (Resources)"}"#,
                r#"{"event":"plan","dir":"/runs/r1","cells":4}"#,
                r#"{"event":"cell-started","index":2,"name":"002-abort"}"#,
                concat!(
                    r#"{"event":"cell-finished","index":2,"of":4,"name":"002-abort","status":"hang","#,
                    r#""detail":"hang: rank 0 in teardown for 45.0 s","wall_s":47.3,"warn_lines":3,"verdict":"actionable"}"#
                ),
                r#"{"event":"interrupted","by":"SIGINT"}"#,
                r#"{"event":"end","status":"interrupted"}"#,
            ]
        );
        assert_eq!(
            cell_line(&c, 4, None),
            "[2/4] 002-abort: hang: rank 0 in teardown for 45.0 s, 47.3 s, 3 WARN, actionable"
        );
        assert!(cell_line(&c, 4, Some((2, "2.21.5"))).starts_with("[probe 2 2.21.5] 002-abort: hang"));
    }
}
