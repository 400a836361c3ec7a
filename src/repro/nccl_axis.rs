//! `--nccl` and `--bisect-nccl` -> values of the NCCL library axis, through src/nccl/ (releases
//! fetched into the user cache, `system` as the loader's choice, paths as given); the torch
//! symbol check for `-- CMD` runs; and the summary's hint when the loader's NCCL is too new to
//! print the teardown warnings this tool is about.

use std::path::PathBuf;

use anyhow::Result;

use super::bisect::{Candidate, Setup};
use super::Config;
use crate::error::Typed;
use crate::model::version::Version;
use crate::nccl::{self, release, Fetcher, Spec};

/// The config with `--nccl` turned into `nccl_lib` values (`""` = the loader's), and the
/// bisection's setup.
pub struct Resolved {
    pub config: Config,
    pub bisect: Option<Setup>,
    /// Some cell loads the loader's libnccl (so it must be there).
    pub uses_loader: bool,
}

fn options(args: &Config) -> nccl::Options {
    nccl::Options { cuda: args.cuda, offline: args.offline, quiet: args.quiet }
}

/// Usage problems go to `problems` (reported with the others); a release that cannot be had is
/// a typed fetch error, returned at once.
pub fn resolve(args: &Config, problems: &mut Vec<String>) -> Result<Resolved> {
    let mut config = args.clone();
    if let Some(m) = args.cuda.filter(|m| !(11..=99).contains(m)) {
        problems.push(format!("--cuda {m}: give a CUDA major such as 12 or 13"));
    }
    let mut specs = Vec::new();
    for v in &args.nccl {
        match Spec::parse(v) {
            Ok(s) if specs.contains(&s) => problems.push(format!("--nccl {s} given twice")),
            Ok(s) => specs.push(s),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    // A usage problem anywhere: fetch nothing (the run will not happen).
    if !problems.is_empty() {
        return Ok(Resolved { config, bisect: None, uses_loader: false });
    }
    let needs_fetcher = args.bisect_nccl.is_some() || specs.iter().any(|s| matches!(s, Spec::Release(_)));
    let fetcher = if needs_fetcher { Some(Fetcher::new(options(args)).fetch()?) } else { None };

    if let Some(range) = &args.bisect_nccl {
        if !args.nccl_lib.is_empty() {
            problems.push(
                "--bisect-nccl takes its libraries from --nccl (paths, `system`) and the range; not --nccl-lib".into(),
            );
        }
        let setup = match release::parse_range(range) {
            Ok((from, to)) => {
                super::bisect::setup(fetcher.expect("made for --bisect-nccl"), from, to, &specs, args, problems)?
            }
            Err(e) => {
                problems.push(format!("{e:#}"));
                None
            }
        };
        let uses_loader = setup.as_ref().is_some_and(|s| s.candidates.iter().any(|c| c.value.as_deref() == Some("")));
        config.nccl.clear();
        return Ok(Resolved { config, bisect: setup, uses_loader });
    }

    let mut values: Vec<(String, PathBuf)> = Vec::new();
    for s in &specs {
        let v = match (s, &fetcher) {
            (Spec::Release(_), Some(f)) => f.resolve(s).fetch()?,
            _ => match nccl::resolve_given(s) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{e:#}"));
                    continue;
                }
            },
        };
        values.push((s.to_string(), PathBuf::from(v)));
    }
    torch_check(args, &values, problems);
    config.nccl_lib.extend(values.into_iter().map(|(_, p)| p));
    let uses_loader = config.nccl_lib.is_empty() || config.nccl_lib.iter().any(|p| p.as_os_str().is_empty());
    Ok(Resolved { config, bisect: None, uses_loader })
}

/// A `-- CMD` whose torch imports NCCL functions a preloaded library lacks would die at
/// `import torch`: a usage problem, named up front.
pub fn torch_check(args: &Config, libs: &[(String, PathBuf)], problems: &mut Vec<String>) {
    let libs: Vec<(String, PathBuf, Option<Version>)> = libs
        .iter()
        .filter(|(_, p)| !p.as_os_str().is_empty())
        .map(|(w, p)| (w.clone(), p.clone(), lib_version(p)))
        .collect();
    if args.command.is_empty() || libs.is_empty() {
        return;
    }
    let Some(py) = nccl::torch::python_of(&args.command) else { return };
    let Some(torch) = nccl::torch::find(&py, std::time::Duration::from_secs(20)) else { return };
    let (p, notes) = nccl::torch::check(&torch, &libs);
    problems.extend(p);
    for n in notes {
        eprintln!("epdoctor: note: {n}");
    }
}

/// The NCCL version a library file reports.
pub fn lib_version(p: &std::path::Path) -> Option<Version> {
    let (v, _, _) = crate::env::libs::read_nccl_version(p).ok()??;
    Version::parse(&v)
}

/// A candidate of the bisection from a `--nccl` path or `system`.
pub fn given_candidate(s: &Spec) -> Result<Candidate, String> {
    match s {
        Spec::System => {
            let (p, v) = nccl::system_nccl().ok_or_else(|| {
                "`system`: no libnccl.so.2 found by the loader (add its folder to LD_LIBRARY_PATH)".to_string()
            })?;
            Ok(Candidate {
                version: v,
                label: format!("system ({v})"),
                value: Some(String::new()),
                release: None,
                path: Some(p),
            })
        }
        Spec::Path(p) => {
            let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            if !abs.is_file() {
                return Err(format!("--nccl {}: not a file", p.display()));
            }
            let v = lib_version(&abs)
                .ok_or_else(|| format!("--nccl {}: the library reports no NCCL version", p.display()))?;
            Ok(Candidate {
                version: v,
                label: v.to_string(),
                value: Some(abs.to_string_lossy().into_owned()),
                release: None,
                path: Some(abs),
            })
        }
        Spec::Release(_) => Err("a release is a candidate through the index or the cache".into()),
    }
}
