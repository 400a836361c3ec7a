//! `--bisect-nccl FROM..TO --finding X`: binary search over the NCCL releases in the range for
//! the first one where X (a rule id, or an outcome such as `hang`) appears or disappears, each
//! probe being the release's cells run by the ordinary cell runner. With N releases at most
//! ceil(log2 N) + 1 releases are probed: the first, then halving the rest. The answer assumes X
//! changes once in the range; the table shows every release that was run.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;

use super::cell;
use super::matrix::{CellPlan, Plan};
use super::reporter::{Event, Reporter};
use super::{Config, Finished};
use crate::error::Typed;
use crate::model::run::{BisectOut, Cell, CellStatus, ProbeOut, RunStatus};
use crate::model::version::Version;
use crate::nccl::release::{End, Release};
use crate::nccl::{Fetcher, Spec};
use crate::rules::Engine;

/// One release the search may probe.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub version: Version,
    pub label: String,
    /// The axis value: a library path, "" for the loader's; None until fetched.
    pub value: Option<String>,
    /// The release to fetch (index or cache).
    pub release: Option<Release>,
    pub path: Option<PathBuf>,
}

pub struct Setup {
    pub fetcher: Fetcher,
    pub candidates: Vec<Candidate>,
    /// What is looked for, as cells name it: a rule id or `outcome:<status>`.
    pub finding: String,
    pub range: String,
}

/// `hang` -> `outcome:hang`; a rule id stays.
pub fn finding_item(f: &str) -> String {
    let f = f.trim();
    match f {
        "hang" | "failed" | "leftovers" | "interrupted" | "launch-error" => format!("outcome:{f}"),
        _ => f.to_string(),
    }
}

/// The candidates in the range: the index's releases (the cache's with --offline), and the
/// `--nccl` paths and `system`, one per NCCL version (a given library wins over a fetch).
pub fn setup(
    fetcher: Fetcher,
    from: End,
    to: End,
    specs: &[Spec],
    args: &Config,
    problems: &mut Vec<String>,
) -> Result<Option<Setup>> {
    let finding = match args.finding.as_deref() {
        Some(f) if !f.trim().is_empty() => finding_item(f),
        _ => {
            problems.push("--bisect-nccl needs --finding RULE_ID (or an outcome: hang, failed, leftovers)".into());
            return Ok(None);
        }
    };
    let mut given: Vec<Candidate> = Vec::new();
    let mut extra: Vec<Release> = Vec::new();
    let mut wanted: Vec<Spec> = specs.to_vec();
    if (from == End::System || to == End::System) && !wanted.contains(&Spec::System) {
        wanted.push(Spec::System);
    }
    for s in &wanted {
        match s {
            Spec::Release(r) => extra.push(*r),
            _ => match super::nccl_axis::given_candidate(s) {
                Ok(c) => given.push(c),
                Err(e) => problems.push(e),
            },
        }
    }
    let system_v = given.iter().find(|c| c.value.as_deref() == Some("")).map(|c| c.version);
    let end_v = |e: End| match e {
        End::Release(r) => Some(r),
        End::System => system_v.map(|v| Release { version: v, post: None }),
    };
    let (Some(lo), Some(hi)) = (end_v(from), end_v(to)) else { return Ok(None) };
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let mut known = fetcher.releases_between(lo, hi).fetch()?;
    known.extend(extra.into_iter().filter(|r| *r >= lo && *r <= hi));
    let mut cands: Vec<Candidate> = given
        .into_iter()
        .filter(|c| {
            let r = Release { version: c.version, post: None };
            r >= Release { version: lo.version, post: None } && r <= Release { version: hi.version, post: None }
        })
        .collect();
    for r in crate::nccl::release::distinct(known) {
        if cands.iter().any(|c| c.version == r.version) {
            continue;
        }
        cands.push(Candidate { version: r.version, label: r.to_string(), value: None, release: Some(r), path: None });
    }
    cands.sort_by_key(|c| c.version);
    let range = format!("{from}..{to}");
    if cands.len() < 2 {
        let have: Vec<&str> = cands.iter().map(|c| c.label.as_str()).collect();
        let whence = if args.offline { "in the cache (--offline)" } else { "on the index" };
        problems.push(format!(
            "--bisect-nccl {range}: {} release(s) {whence} in that range ({}); a bisection needs two or more",
            cands.len(),
            if have.is_empty() { "none".into() } else { have.join(", ") }
        ));
        return Ok(None);
    }
    Ok(Some(Setup { fetcher, candidates: cands, finding, range }))
}

/// What one probed release showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Seen,
    Absent,
    /// It could not be told (the release did not run, or ran another version): left out.
    Inconclusive(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `before` (probed, the first release's state) and `after` (probed, the other state) are
    /// neighbours among the releases that could be probed.
    Change {
        before: usize,
        after: usize,
        seen_before: bool,
    },
    NoChange {
        first: usize,
        last: usize,
        seen: bool,
    },
    Undecided(String),
}

/// The binary search over releases 0..n; `probe` returns None to stop (interrupted).
pub fn search(n: usize, probe: &mut dyn FnMut(usize) -> Result<Option<State>>) -> Result<Answer> {
    let mut alive: Vec<usize> = (0..n).collect();
    let base = loop {
        let Some(&i) = alive.first() else {
            return Ok(Answer::Undecided("no release in the range could be run".into()));
        };
        match probe(i)? {
            None => return Ok(Answer::Undecided("interrupted".into())),
            Some(State::Inconclusive(_)) => {
                alive.remove(0);
            }
            Some(s) => break s,
        }
    };
    // alive[lo] has the base state; alive[hi] (or the end, when hi == len) the other.
    let (mut lo, mut hi) = (0, alive.len());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match probe(alive[mid])? {
            None => return Ok(Answer::Undecided("interrupted".into())),
            Some(State::Inconclusive(_)) => {
                alive.remove(mid);
                hi -= 1;
            }
            Some(s) if s == base => lo = mid,
            Some(_) => hi = mid,
        }
    }
    let seen = base == State::Seen;
    Ok(if hi == alive.len() {
        Answer::NoChange { first: alive[0], last: alive[lo], seen }
    } else {
        Answer::Change { before: alive[lo], after: alive[hi], seen_before: seen }
    })
}

/// The most releases a search over n probes (no inconclusive ones).
pub fn max_probes(n: usize) -> usize {
    if n <= 1 {
        n
    } else {
        1 + (usize::BITS - (n - 1).leading_zeros()) as usize
    }
}

/// The state of a release from its cells.
pub fn state_of(finding: &str, expected: Version, cells: &[Cell], builtin: bool) -> State {
    if cells.is_empty() {
        return State::Inconclusive("no cell ran".into());
    }
    for c in cells {
        if !c.comparable() {
            return State::Inconclusive(format!("cell {} {}", c.index, c.status.as_str()));
        }
        match c.nccl_version.as_deref().and_then(Version::parse) {
            Some(v) if v != expected => {
                return State::Inconclusive(format!("cell {} ran NCCL {v}, not {expected}", c.index));
            }
            None if builtin => {
                return State::Inconclusive(format!("cell {} never reached NCCL ({})", c.index, c.detail));
            }
            _ => {}
        }
    }
    let seen = cells.iter().any(|c| {
        c.rules.iter().any(|r| r.id == finding) || super::compare::outcome_items(c).iter().any(|o| o == finding)
    });
    if seen {
        State::Seen
    } else {
        State::Absent
    }
}

fn answer_text(a: &Answer, finding: &str, labels: &[String]) -> String {
    let f = format!("`{finding}`");
    match a {
        Answer::Change { before, after, seen_before: true } => {
            format!("{f} last seen in {}, gone from {}", labels[*before], labels[*after])
        }
        Answer::Change { before, after, seen_before: false } => {
            format!("{f} absent through {}, first seen in {}", labels[*before], labels[*after])
        }
        Answer::NoChange { first, last, seen } => format!(
            "{f} {} every probed release from {} to {}: no change in this range",
            if *seen { "seen in" } else { "absent from" },
            labels[*first],
            labels[*last]
        ),
        Answer::Undecided(why) => format!("undecided: {why}"),
    }
}

/// Run the search: each probe fetches its release if needed and runs that release's cells.
pub fn run(
    args: &Config,
    mut plan: Plan,
    engine: &Engine,
    program: OsString,
    dir: PathBuf,
    setup: Setup,
    reporter: &mut dyn Reporter,
) -> Result<Finished> {
    let (launcher, _signals) = super::start(args, &plan, &dir, reporter)?;
    let h = super::harness(args, launcher.as_ref(), program, engine);
    let Setup { fetcher, mut candidates, finding, range } = setup;
    let labels: Vec<String> = candidates.iter().map(|c| c.label.clone()).collect();
    // The NCCL axis (always the first) holds every candidate; a release not fetched yet shows its name.
    plan.axes[0].values = candidates.iter().map(|c| c.value.clone().unwrap_or_else(|| c.label.clone())).collect();
    let settings: Vec<CellPlan> = plan.cells.clone();
    let per = settings.len();
    let builtin = matches!(plan.workload, super::matrix::Workload::Builtin { .. });
    let mut run = super::new_run(&plan, args);
    run.launcher = launcher.describe();
    run.cells_planned = max_probes(candidates.len()) * per;
    let mut out = BisectOut {
        finding: finding.clone(),
        range,
        releases: labels.clone(),
        probes: Vec::new(),
        max_probes: max_probes(candidates.len()),
        answer: None,
    };
    run.bisect = Some(out.clone());
    super::write_outputs(&dir, &mut run, &plan)?;
    reporter.report(Event::Plan { dir: &dir, cells: run.cells_planned });
    let stop = super::SignalStop;
    let mut next = 1usize;

    let mut probe = |i: usize| -> Result<Option<State>> {
        if super::interrupt::count() > 0 {
            return Ok(None);
        }
        let c = &mut candidates[i];
        let mut first_cell = run.cells.len();
        let state = 'probe: {
            if c.value.is_none() {
                let r = c.release.expect("a candidate without a value is a release");
                let (e, _) = fetcher.get(r).fetch()?;
                c.value = Some(e.lib.to_string_lossy().into_owned());
                c.path = Some(e.lib.clone());
                plan.axes[0].values[i] = e.lib.to_string_lossy().into_owned();
            }
            if !args.command.is_empty() {
                if let Some(p) = c.path.clone().filter(|_| c.value.as_deref() != Some("")) {
                    let mut problems = Vec::new();
                    super::nccl_axis::torch_check(args, &[(c.label.clone(), p)], &mut problems);
                    if let Some(why) = problems.into_iter().next() {
                        break 'probe State::Inconclusive(why);
                    }
                }
            }
            first_cell = run.cells.len();
            for s in &settings {
                if super::interrupt::count() > 0 {
                    return Ok(None);
                }
                let mut values = s.values.clone();
                values[0] = i;
                let cp = CellPlan { index: next, values, repeat: s.repeat };
                next += 1;
                let name = super::cell_name(&plan, &cp);
                reporter.report(Event::CellStarted { index: cp.index, name: &name });
                let cell_dir = dir.join("cells").join(&name);
                let cell = cell::run_cell(&h, &plan, &cp, &cell_dir, &stop, &mut || reporter.report(Event::Tick))?;
                run.cells.push(cell);
                let probe = Some((out.probes.len() + 1, c.label.as_str()));
                reporter.report(Event::CellFinished {
                    cell: &run.cells[run.cells.len() - 1],
                    of: run.cells_planned,
                    probe,
                });
            }
            if super::interrupt::count() > 0 {
                return Ok(None);
            }
            state_of(&finding, c.version, &run.cells[first_cell..], builtin)
        };
        let (st, reason) = match &state {
            State::Seen => ("seen", None),
            State::Absent => ("absent", None),
            State::Inconclusive(w) => ("inconclusive", Some(w.clone())),
        };
        out.probes.push(ProbeOut {
            release: c.label.clone(),
            state: st.into(),
            reason,
            cells: run.cells[first_cell..].iter().map(|c| c.index).collect(),
        });
        run.bisect = Some(out.clone());
        super::write_outputs(&dir, &mut run, &plan)?;
        Ok(Some(state))
    };
    let answer = search(labels.len(), &mut probe)?;
    if super::interrupt::count() > 0 {
        let by = super::launch::Interrupts::name(&stop);
        reporter.report(Event::Interrupted { by: &by });
        run.status = RunStatus::Interrupted;
        run.interrupted_by = Some(by);
    } else {
        run.status = RunStatus::Complete;
        out.answer = Some(answer_text(&answer, &finding, &labels));
    }
    reporter.report(Event::End { status: run.status });
    run.bisect = Some(out);
    super::write_outputs(&dir, &mut run, &plan)?;
    let never_started = run
        .cells
        .iter()
        .all(|c| c.status == CellStatus::Failed && c.markers.is_empty())
        .then(|| super::workload_never_started(&plan, &run, &dir))
        .flatten();
    Ok(Finished { run, dir, never_started })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake probe: the finding is seen in releases below `change` (or from it, `appears`),
    /// with some releases that cannot be run.
    fn fake(n: usize, change: usize, appears: bool, broken: &[usize]) -> (Answer, Vec<usize>) {
        let mut probed = Vec::new();
        let a = search(n, &mut |i| {
            probed.push(i);
            Ok(Some(if broken.contains(&i) {
                State::Inconclusive("broken".into())
            } else if (i >= change) == appears {
                State::Seen
            } else {
                State::Absent
            }))
        })
        .unwrap();
        (a, probed)
    }

    #[test]
    fn finds_the_first_release_that_differs_within_the_bound() {
        for n in 2..=40 {
            for change in 1..n {
                for appears in [false, true] {
                    let (a, probed) = fake(n, change, appears, &[]);
                    assert_eq!(
                        a,
                        Answer::Change { before: change - 1, after: change, seen_before: !appears },
                        "n={n} c={change}"
                    );
                    assert!(
                        probed.len() <= max_probes(n),
                        "n={n} change={change}: {} probes > {}",
                        probed.len(),
                        max_probes(n)
                    );
                    let mut u = probed.clone();
                    u.sort();
                    u.dedup();
                    assert_eq!(u.len(), probed.len(), "no release is probed twice");
                }
            }
            // No change: the first and the last are probed.
            let (a, probed) = fake(n, n, false, &[]);
            assert_eq!(a, Answer::NoChange { first: 0, last: n - 1, seen: true });
            assert!(probed.len() <= max_probes(n) && probed.contains(&(n - 1)));
        }
        assert_eq!((max_probes(2), max_probes(3), max_probes(4), max_probes(5), max_probes(17)), (2, 3, 3, 4, 6));
    }

    #[test]
    fn releases_that_cannot_run_are_left_out() {
        // 2.22.3, [2.23.4 broken], 2.24.3 ...: the change is placed between runnable neighbours.
        let (a, _) = fake(6, 2, false, &[1]);
        assert_eq!(a, Answer::Change { before: 0, after: 2, seen_before: true });
        // The first release broken: the next one is the base.
        let (a, probed) = fake(5, 3, true, &[0]);
        assert_eq!(a, Answer::Change { before: 2, after: 3, seen_before: false });
        assert_eq!(probed[..2], [0, 1]);
        let (a, _) = fake(3, 1, true, &[0, 1, 2]);
        assert!(matches!(a, Answer::Undecided(_)));
    }

    #[test]
    fn a_stop_ends_the_search_undecided() {
        let mut k = 0;
        let a = search(8, &mut |_| {
            k += 1;
            Ok(if k < 3 { Some(State::Seen) } else { None })
        })
        .unwrap();
        assert_eq!(a, Answer::Undecided("interrupted".into()));
    }

    #[test]
    fn the_answer_in_words() {
        let l: Vec<String> = ["2.22.3", "2.23.4", "system (2.28.3)"].iter().map(|s| s.to_string()).collect();
        let a = Answer::Change { before: 0, after: 1, seen_before: true };
        assert_eq!(answer_text(&a, "nccl-abort-pair", &l), "`nccl-abort-pair` last seen in 2.22.3, gone from 2.23.4");
        let a = Answer::Change { before: 1, after: 2, seen_before: false };
        assert_eq!(
            answer_text(&a, "outcome:hang", &l),
            "`outcome:hang` absent through 2.23.4, first seen in system (2.28.3)"
        );
        assert_eq!(finding_item("hang"), "outcome:hang");
        assert_eq!(finding_item("nccl-abort-pair"), "nccl-abort-pair");
    }
}
