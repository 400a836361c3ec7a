//! `repro`: flags -> `repro::Config` -> the run -> the comparison in the chosen format -> exit status.
use anyhow::Result;

use crate::cli::{Format, ReproArgs};
use crate::model::run::{CELLS_FILE, REPORT_FILE};
use crate::output::repro as writer;
use crate::repro::reporter::{self, JsonLines, Reporter};

pub fn run(args: &ReproArgs) -> Result<u8> {
    let mut reporter: Box<dyn Reporter> = match &args.events {
        Some(p) => {
            // A file that cannot be made where the user asked is theirs to fix, before anything runs.
            let f = std::fs::File::create(p)
                .map_err(|e| crate::error::usage_one(format!("--events {}: {e}", p.display())))?;
            Box::new(JsonLines(std::io::LineWriter::new(f)))
        }
        None => reporter::for_stderr(args.quiet),
    };
    let done = crate::repro::run(&args.config(), reporter.as_mut())?;
    let (run, dir) = (&done.run, &done.dir);
    let out = match args.format {
        Format::Text => writer::text(run, dir),
        // The files the run folder keeps, as written there.
        Format::Md => std::fs::read_to_string(dir.join(REPORT_FILE))?,
        Format::Json => std::fs::read_to_string(dir.join(CELLS_FILE))?,
    };
    crate::output::print(&out)?;
    if let Some(p) = writer::partial_note(run) {
        eprintln!("epdoctor: {p}; what ran is in {}", dir.display());
    }
    if let Some(why) = &done.never_started {
        eprintln!("epdoctor: no rank of any cell started the workload; rank 0 said: {why}");
    }
    Ok(crate::exit::of_repro(done.never_started.is_some(), done.harness_failed()))
}

/// The matrix from real `repro` flags (here, where both the flags and the harness are in reach).
#[cfg(test)]
mod matrix_tests {
    use crate::repro::matrix::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> crate::repro::Config {
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            a: crate::cli::ReproArgs,
        }
        let mut v = vec!["x"];
        v.extend_from_slice(extra);
        W::try_parse_from(v).unwrap().a.config()
    }

    fn ctx(gpus: usize, set: &'static [&'static str]) -> Host {
        Host { env_is_set: Box::new(move |k| set.contains(&k)), gpus }
    }

    #[test]
    fn product_of_axes_last_fastest() {
        let p = plan(&args(&["--teardown", "clean,abort", "--env", "A=1,2,3"]), &ctx(1, &[])).unwrap();
        assert_eq!(p.cells.len(), 6);
        let v: Vec<_> = p.cells.iter().map(|c| c.values.clone()).collect();
        assert_eq!(v[0], vec![0, 0, 0]);
        assert_eq!(v[1], vec![0, 0, 1]);
        assert_eq!(v[3], vec![0, 1, 0]);
        let labels: Vec<String> = p.axes.iter().zip(&p.cells[5].values).map(|(a, &i)| a.label(i)).collect();
        assert_eq!(labels, ["default", "abort", "3"]);
    }

    #[test]
    fn defaults_every_mode_warn_and_ranks() {
        let p = plan(&args(&[]), &ctx(1, &[])).unwrap();
        assert_eq!(p.cells.len(), crate::worker::Teardown::ALL.len());
        assert_eq!(p.fixed_env, vec![("NCCL_DEBUG".into(), "WARN".into())]);
        assert!(p.set_debug_file);
        assert!(matches!(p.workload, Workload::Builtin { ranks: 2 }));
        let p = plan(&args(&[]), &ctx(16, &[])).unwrap();
        assert!(matches!(p.workload, Workload::Builtin { ranks: 8 }));
        let p = plan(&args(&[]), &ctx(4, &[])).unwrap();
        assert!(matches!(p.workload, Workload::Builtin { ranks: 4 }));
    }

    #[test]
    fn user_debug_settings_are_kept() {
        let p = plan(&args(&["--env", "NCCL_DEBUG=INFO,WARN"]), &ctx(1, &[])).unwrap();
        assert!(p.fixed_env.is_empty());
        let p = plan(&args(&[]), &ctx(1, &["NCCL_DEBUG", "NCCL_DEBUG_FILE"])).unwrap();
        assert!(p.fixed_env.is_empty());
        assert!(!p.set_debug_file);
    }

    #[test]
    fn worker_settings_can_be_an_axis() {
        let p = plan(&args(&["--teardown", "clean", "--env", "EPDOCTOR_BARRIER_TIMEOUT=5,60"]), &ctx(1, &[])).unwrap();
        assert_eq!(p.cells.len(), 2);
    }

    #[test]
    fn repeat_multiplies_cells() {
        let p = plan(&args(&["--teardown", "clean", "--repeat", "3"]), &ctx(1, &[])).unwrap();
        assert_eq!(p.cells.iter().map(|c| c.repeat).collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    #[test]
    fn empty_env_value_means_unset() {
        let p = plan(&args(&["--teardown", "clean", "--env", "X=,1"]), &ctx(1, &[])).unwrap();
        assert_eq!(p.cell_env(&p.cells[0]).get("X"), Some(&None));
        assert_eq!(p.cell_env(&p.cells[1]).get("X"), Some(&Some("1".into())));
        assert_eq!(p.axes[2].label(0), "(unset)");
    }

    #[test]
    fn command_mode_has_no_teardown_axis() {
        let p = plan(&args(&["--", "python3", "x.py"]), &ctx(1, &[])).unwrap();
        assert_eq!(p.axes.len(), 1);
        assert_eq!(p.cells.len(), 1);
        let e = plan(&args(&["--teardown", "abort", "--", "true"]), &ctx(1, &[])).unwrap_err();
        assert!(e[0].contains("built-in workload only"), "{e:?}");
    }

    #[test]
    fn bad_input_is_named() {
        let c = ctx(1, &[]);
        for (a, want) in [
            (vec!["--teardown", "explode"], "unknown teardown mode \"explode\""),
            (vec!["--teardown", "clean,clean"], "given twice"),
            (vec!["--env", "NOEQUALS"], "expected NAME=V1,V2"),
            (vec!["--env", "1X=a"], "is not a variable name"),
            (vec!["--env", "A=1", "--env", "A=2"], "given twice"),
            (vec!["--env", "A=1,1"], "value \"1\" given twice"),
            (vec!["--env", "EPDOCTOR_CELL_DIR=x"], "marks the cell's processes"),
            (vec!["--ranks", "0"], "at least 1"),
            (vec!["--repeat", "0"], "at least 1"),
            (vec!["--timeout", "0"], "positive"),
            (vec!["--timeout", "NaN"], "positive"),
            (vec!["--grace=-1"], "--grace"),
            (vec!["--nccl-lib", "/nonexistent/libnccl.so.2"], "/nonexistent/libnccl.so.2"),
            (vec!["--nccl-lib", "/"], "is not a file"),
        ] {
            let e = plan(&args(&a), &c).unwrap_err();
            assert!(e.len() == 1 && e[0].contains(want), "{a:?}: {e:?}");
        }
        // All at once: each named.
        let e = plan(&args(&["--teardown", "explode", "--repeat", "0", "--env", "1X=a"]), &c).unwrap_err();
        assert_eq!(e.len(), 3, "{e:?}");
    }
}

/// What the harness writes on the worker's command line, `epdoctor worker` reads back as it was.
#[cfg(test)]
mod worker_args_tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};
    use crate::repro::launcher::worker_args;
    use crate::worker::{Config, Size};

    fn read_back(c: &Config) -> Config {
        let argv = std::iter::once("epdoctor".into()).chain(worker_args(c));
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Worker(w) => w.config(),
            other => panic!("not the worker: {other:?}"),
        }
    }

    #[test]
    fn every_setting_round_trips() {
        let size = Size { tokens: 16, hidden: 32, experts: 8, topk: 2, iters: 3 };
        let full = Config {
            rank: Some(1),
            world: Some(4),
            rendezvous: "/r/cells/001/rendezvous".into(),
            teardown: "abort".into(),
            nccl_lib: Some("/opt/nccl/libnccl.so.2".into()),
            size,
        };
        assert_eq!(format!("{:?}", read_back(&full)), format!("{full:?}"));
        // Without a place (Slurm, torchrun: the worker reads it from their variables) or a library.
        let bare = Config { rank: None, world: None, nccl_lib: None, ..full };
        assert_eq!(format!("{:?}", read_back(&bare)), format!("{bare:?}"));
        let argv: Vec<String> = worker_args(&bare).into_iter().map(|a| a.into_string().unwrap()).collect();
        assert!(!argv.iter().any(|a| a == "--rank" || a == "--world" || a == "--nccl-lib"), "{argv:?}");
    }
}
