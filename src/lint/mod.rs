//! `lint`: teardown and init mistakes of distributed Python scripts, found before they run.
//! Sources -> tree-sitter trees (`python`) -> the checks of rules/lint/ (`check`) evaluated over all
//! files at once (`eval`) -> findings in the shared result model (writers: `output::lint`).

pub mod check;
pub mod eval;
pub mod python;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::model::version::Version;
use crate::model::{Evidence, Finding, LintReport, SCHEMA_VERSION};

/// Files given, and the `.py` files under folders given (hidden folders and caches skipped).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("{}: cannot read", p.display()))?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    if out.is_empty() {
        bail!("no Python files under {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot read the folder", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !name.starts_with('.') && name != "__pycache__" && name != "node_modules" {
                walk(&p, out)?;
            }
        } else if name.ends_with(".py") {
            out.push(p);
        }
    }
    Ok(())
}

/// For `repro -- CMD`: the findings in the command's `.py` arguments that exist (none if it has none
/// or one does not parse; lint itself says why).
pub fn for_command(cmd: &[String]) -> Vec<Finding> {
    let files: Vec<PathBuf> =
        cmd.iter().filter(|a| a.ends_with(".py")).map(PathBuf::from).filter(|p| p.is_file()).collect();
    if files.is_empty() {
        return Vec::new();
    }
    lint_files(&files, None).map(|r| r.findings).unwrap_or_default()
}

/// Lint `files` together with the built-in checks. A file that is not UTF-8 is an error of that
/// file (like one that does not parse); the others are still linted.
pub fn lint_files(files: &[PathBuf], torch: Option<Version>) -> Result<LintReport> {
    let mut sources = Vec::new();
    let mut bad = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).with_context(|| format!("{}: cannot read", f.display()))?;
        let name = f.display().to_string();
        match String::from_utf8(bytes) {
            Ok(text) => sources.push((name, text)),
            Err(e) => {
                let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                let line = valid.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
                let column = valid.iter().rev().take_while(|&&b| b != b'\n').count() as u64 + 1;
                bad.push(Evidence {
                    source: name,
                    line,
                    rank: None,
                    text: format!("not UTF-8 text (byte {} is invalid)", valid.len()),
                    detail: None,
                    column: Some(column),
                });
            }
        }
    }
    let mut r = lint_sources(sources, torch)?;
    r.files.extend(bad.iter().map(|e| e.source.clone()));
    r.errors.extend(bad);
    Ok(r)
}

/// Lint in-memory sources (name, text).
pub fn lint_sources(sources: Vec<(String, String)>, torch: Option<Version>) -> Result<LintReport> {
    let checks = check::builtin()?;
    let mut modules = Vec::new();
    let mut errors = Vec::new();
    let names: Vec<String> = sources.iter().map(|(n, _)| n.clone()).collect();
    for (name, text) in sources {
        match python::parse(&name, text) {
            Ok(m) => modules.push(m),
            Err(e) => errors.push(Evidence {
                source: name,
                line: e.line,
                rank: None,
                text: e.text,
                detail: None,
                column: Some(e.column),
            }),
        }
    }
    let program = eval::Program::new(modules);
    let active: Vec<&check::Check> =
        checks.iter().filter(|c| torch.is_none_or(|v| c.torch.as_ref().is_none_or(|r| r.contains(v)))).collect();
    let mut findings = Vec::new();
    for c in &active {
        for mut site in program.sites(c) {
            if !program.holds(c, &mut site) {
                continue;
            }
            findings.push(finding(&program, c, &site));
        }
    }
    findings.sort_by(|a, b| {
        let k = |f: &Finding| f.evidence.first().map(|e| (e.source.clone(), e.line, e.column)).unwrap_or_default();
        k(a).cmp(&k(b)).then_with(|| a.rule.cmp(&b.rule))
    });
    Ok(LintReport {
        schema_version: SCHEMA_VERSION,
        tool_version: crate::VERSION.to_string(),
        torch_version: torch.map(|v| v.to_string()),
        files: names,
        checks: active.iter().map(|c| c.def.id.clone()).collect(),
        findings,
        errors,
    })
}

fn finding(p: &eval::Program, c: &check::Check, site: &eval::Site) -> Finding {
    let m = &p.modules[site.module];
    let (line, column) = m.position(site.start);
    let written: String = m.src[site.start..site.end].lines().next().unwrap_or("").chars().take(80).collect();
    let mut msg = c.def.message.replace("{call}", written.trim());
    for n in &site.notes {
        msg.push_str("; ");
        msg.push_str(n);
    }
    Finding {
        rule: c.def.id.clone(),
        title: c.def.title.clone(),
        category: "lint".into(),
        severity: c.def.severity,
        benign: false,
        ranks: Vec::new(),
        count: 1,
        evidence: vec![Evidence {
            source: m.path.clone(),
            line,
            rank: None,
            text: m.line_text(site.start).to_string(),
            detail: None,
            column: Some(column),
        }],
        root_cause: c.def.root_cause.trim().to_string(),
        fix: c.def.fix.trim().to_string(),
        refs: c.def.refs.clone(),
        context: Some(msg),
        torch: c.def.torch.clone(),
    }
}

/// The fixtures of rules/lint/fixtures/: each file's `# expect: CHECK LINE` lines are exactly its
/// findings (all checks, every torch version); `# negative: CHECK, ...` names checks that have a
/// site in the file and must not fire there.
#[cfg(test)]
mod fixtures {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    fn fixtures() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/lint/fixtures");
        let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "py"))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
            .collect();
        out.sort();
        out
    }

    fn header<'a>(text: &'a str, key: &str) -> impl Iterator<Item = &'a str> + 'a {
        let key = format!("# {key}:");
        text.lines().filter_map(move |l| l.strip_prefix(key.as_str())).map(str::trim)
    }

    #[test]
    fn every_fixture_finds_exactly_what_it_expects() {
        let mut bad = Vec::new();
        for (name, text) in fixtures() {
            assert!(header(&text, "source").next().is_some(), "{name}: no `# source:` line");
            let want: BTreeSet<(String, u64)> = header(&text, "expect")
                .map(|e| {
                    let (id, line) = e.rsplit_once(' ').unwrap_or_else(|| panic!("{name}: bad expect `{e}`"));
                    (id.to_string(), line.parse().unwrap_or_else(|_| panic!("{name}: bad line in `{e}`")))
                })
                .collect();
            let r = lint_sources(vec![(name.clone(), text.clone())], None).unwrap();
            assert!(r.errors.is_empty(), "{name}: {:?}", r.errors);
            let got: BTreeSet<(String, u64)> =
                r.findings.iter().map(|f| (f.rule.clone(), f.evidence[0].line)).collect();
            if got != want {
                bad.push(format!("{name}: expected {want:?}, found {got:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Calls into another file resolve only through what the caller imports: a helper of the same
    /// name elsewhere (`append` here) is not the call (a false positive on Megatron-LM before).
    #[test]
    fn helpers_in_other_files_count_only_when_imported() {
        let lib = "import torch.distributed as dist\n\ndef append(x):\n    dist.barrier()\n\ndef sync():\n    dist.barrier()\n";
        let user = |imports: &str, call: &str| {
            format!("{imports}\nimport torch.distributed as dist\n\ndef f(rank, items):\n    if rank == 0:\n        return\n    {call}\n")
        };
        let rules = |src: String| -> Vec<String> {
            let r = lint_sources(vec![("lib.py".into(), lib.into()), ("user.py".into(), src)], None).unwrap();
            r.findings.iter().filter(|f| f.evidence[0].source == "user.py").map(|f| f.rule.clone()).collect()
        };
        assert!(rules(user("", "items.append(1)")).is_empty());
        assert!(rules(user("", "sync()")).is_empty(), "not imported: another file's sync");
        assert_eq!(rules(user("from lib import sync", "sync()")), ["rank-return-before-collective"]);
        assert_eq!(rules(user("import lib", "lib.sync()")), ["rank-return-before-collective"]);
    }

    #[test]
    fn every_check_has_a_positive_and_a_real_negative_fixture() {
        let checks = check::builtin().unwrap();
        let mut pos: HashMap<String, usize> = HashMap::new();
        let mut neg: HashMap<String, usize> = HashMap::new();
        for (name, text) in fixtures() {
            for e in header(&text, "expect") {
                *pos.entry(e.split(' ').next().unwrap().to_string()).or_default() += 1;
            }
            let program = eval::Program::new(vec![python::parse(&name, text.clone()).unwrap()]);
            for id in header(&text, "negative").flat_map(|l| l.split(',')).map(str::trim) {
                let c = checks.iter().find(|c| c.def.id == id).unwrap_or_else(|| panic!("{name}: no check `{id}`"));
                // A negative only counts where the check had something to look at.
                assert!(!program.sites(c).is_empty(), "{name}: negative for `{id}`, which has no site there");
                *neg.entry(id.to_string()).or_default() += 1;
            }
        }
        for c in &checks {
            assert!(pos.contains_key(&c.def.id), "check `{}` has no positive fixture", c.def.id);
            assert!(neg.contains_key(&c.def.id), "check `{}` has no negative fixture", c.def.id);
        }
    }
}
