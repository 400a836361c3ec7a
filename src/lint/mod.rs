//! `lint`: teardown and init mistakes of distributed Python scripts, found before they run.
//! Sources -> tree-sitter trees (`python`) -> the checks of rules/lint/ (`check`) evaluated over all
//! files at once (`eval`) -> findings in the shared result model (writers: `output::lint`).

pub mod check;
pub mod eval;
pub mod python;
pub mod rank;
pub mod source;
pub mod torch;
pub mod walk;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::model::version::Version;
use crate::model::{Evidence, Finding, LintEdit, LintFix, LintReport, Severity, SCHEMA_VERSION};

pub use torch::Python;

/// A fix before it is tied to its finding's index: description and replacements.
type Fix = (String, Vec<LintEdit>);

/// How a run chooses the torch version (see `torch`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--torch`: this release, whatever the environment says.
    pub torch: Option<Version>,
    /// `--python`: whose installed torch to read.
    pub python: Python,
    /// Threads that parse the files (None: one per core). The report is the same whatever it is.
    pub threads: Option<usize>,
}

/// Files given, and the `.py` files under folders given (see `walk`).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    walk::expand(paths)
}

/// For `repro -- CMD`: the findings in the command's `.py` arguments that exist (none if it has none
/// or one does not parse; lint itself says why).
pub fn for_command(cmd: &[String]) -> Vec<Finding> {
    let files: Vec<PathBuf> =
        cmd.iter().filter(|a| a.ends_with(".py")).map(PathBuf::from).filter(|p| p.is_file()).collect();
    if files.is_empty() {
        return Vec::new();
    }
    lint_files(&files, &Options::default()).map(|r| r.findings).unwrap_or_default()
}

/// SARIF's `artifactLocation.uri` for a path as given: relative to the working directory when it
/// lies under it (code scanning resolves it against the checkout), else an absolute `file://` URI;
/// characters outside a URI's unreserved set are percent-encoded.
pub fn sarif_uri(path: &str) -> String {
    let p = Path::new(path);
    let cwd = std::env::current_dir().ok();
    let rel = if p.is_absolute() {
        cwd.as_deref().and_then(|c| p.strip_prefix(c).ok()).map(Path::to_path_buf)
    } else {
        Some(p.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect())
    };
    let enc = |s: &str| -> String {
        let mut o = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                o.push(b as char);
            } else {
                o.push_str(&format!("%{b:02X}"));
            }
        }
        o
    };
    match rel {
        Some(r) => enc(&r.to_string_lossy().replace('\\', "/")),
        None => format!("file://{}", enc(&p.to_string_lossy().replace('\\', "/"))),
    }
}

/// Lint `files` together with the built-in checks. A file that cannot be read as text (not
/// UTF-8, or an encoding its PEP 263 line names that lint lacks) is an error of that file, like
/// one that does not parse; the others are still linted.
pub fn lint_files(files: &[PathBuf], opts: &Options) -> Result<LintReport> {
    let mut texts = Vec::new();
    let mut bad = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).with_context(|| format!("{}: cannot read", f.display()))?;
        let name = f.display().to_string();
        match source::decode(&bytes) {
            Ok(text) => texts.push((f.clone(), name, text)),
            Err(e) => bad.push(error_at(name, e.line, e.column, e.text)),
        }
    }
    let fixed = match opts.torch {
        Some(v) => Some(torch::TorchEnv::exact(v, format!("--torch {v}"))),
        None => torch::from_interpreter(&opts.python),
    };
    let mut pins = torch::Pins::default();
    let sources = texts
        .into_iter()
        .map(|(path, name, text)| {
            let env = fixed.clone().unwrap_or_else(|| pins.for_file(&path));
            (name, text, env)
        })
        .collect();
    let mut r = run(sources, opts.threads)?;
    r.files.extend(bad.iter().map(|e| e.source.clone()));
    r.errors.extend(bad);
    Ok(r)
}

/// Lint in-memory sources (name, text) for one torch (None: unknown).
pub fn lint_sources(sources: Vec<(String, String)>, torch: Option<Version>) -> Result<LintReport> {
    lint_sources_on(sources, torch, None)
}

/// `lint_sources` with files parsed on `threads` threads (None: one per core).
pub fn lint_sources_on(
    sources: Vec<(String, String)>,
    torch: Option<Version>,
    threads: Option<usize>,
) -> Result<LintReport> {
    let env = match torch {
        Some(v) => torch::TorchEnv::exact(v, format!("--torch {v}")),
        None => torch::TorchEnv::unknown("no torch version given"),
    };
    run(sources.into_iter().map(|(n, t)| (n, t, env.clone())).collect(), threads)
}

type Parsed = (Result<python::Module, python::SyntaxError>, String, torch::TorchEnv);

/// Parse in parallel, each thread taking the next file (files of unequal size balance), the
/// results in the files' order. Each file's facts are taken and its tree dropped in its thread.
fn parse_all(
    sources: Vec<(String, String, torch::TorchEnv)>,
    want: &python::Wanted,
    threads: Option<usize>,
) -> Vec<Parsed> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let n = sources.len();
    let cores = std::thread::available_parallelism().map_or(1, |t| t.get());
    let threads = threads.unwrap_or(cores).clamp(1, n.max(1));
    let one = |(name, text, env): (String, String, torch::TorchEnv)| (python::parse(&name, text, want), name, env);
    if threads <= 1 {
        return sources.into_iter().map(one).collect();
    }
    let inputs: Vec<Mutex<Option<_>>> = sources.into_iter().map(|s| Mutex::new(Some(s))).collect();
    let next = AtomicUsize::new(0);
    let work = || {
        let mut got = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = inputs.get(i) else { break };
            let src = slot.lock().expect("no thread panicked holding it").take().expect("taken once");
            got.push((i, one(src)));
        }
        got
    };
    let mut out: Vec<Option<Parsed>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        for h in handles {
            for (i, r) in h.join().expect("a parse thread panicked") {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter().map(|r| r.expect("every file parsed")).collect()
}

fn run(sources: Vec<(String, String, torch::TorchEnv)>, threads: Option<usize>) -> Result<LintReport> {
    let checks = check::builtin()?;
    let want = python::Wanted::of(&checks);
    let names: Vec<String> = sources.iter().map(|(n, _, _)| n.clone()).collect();
    let mut modules = Vec::new();
    let mut envs = Vec::new();
    let mut errors = Vec::new();
    for (parsed, name, env) in parse_all(sources, &want, threads) {
        match parsed {
            Ok(m) => {
                modules.push(m);
                envs.push(env);
            }
            Err(e) => errors.push(error_at(name, e.line, e.column, e.text)),
        }
    }
    let program = eval::Program::new(modules);
    release_free_memory();
    let mut active = Vec::new();
    let mut hits: Vec<(Hit, Option<Fix>)> = Vec::new();
    for (ci, c) in checks.iter().enumerate() {
        let applies: Vec<torch::Applies> =
            envs.iter().map(|e| c.def.torch.as_deref().map_or(torch::Applies::Yes, |r| e.applies(r))).collect();
        if !applies.is_empty() && applies.iter().all(|a| *a == torch::Applies::No) {
            continue;
        }
        active.push(c.def.id.clone());
        let mut memo = eval::Memo::default();
        for mut site in program.sites(c) {
            let a = applies[site.module];
            if a == torch::Applies::No || !program.holds(c, &mut site, &mut memo) {
                continue;
            }
            let m = &program.modules[site.module];
            hits.push((hit(m, ci, c, &site, a, &envs[site.module]), edit(m, c, &site)));
        }
        program.forget_paths();
        drop(memo);
        release_free_memory();
    }
    // The findings' texts (a check's root cause and fix, repeated in each) are written once the
    // files are freed: the two together were the peak.
    let paths: Vec<String> = program.modules.iter().map(|m| m.path.clone()).collect();
    drop(program);
    release_free_memory();
    let mut found: Vec<(Finding, Option<Fix>)> =
        hits.into_iter().map(|(h, fix)| (finding(&checks[h.check], h, &paths), fix)).collect();
    found.sort_by(|(a, _), (b, _)| {
        let k = |f: &Finding| f.evidence.first().map(|e| (e.source.clone(), e.line, e.column)).unwrap_or_default();
        k(a).cmp(&k(b)).then_with(|| a.rule.cmp(&b.rule))
    });
    let mut fixes = Vec::new();
    // Collected in place (the same allocation), not beside `found`.
    let findings: Vec<Finding> = found
        .into_iter()
        .enumerate()
        .map(|(i, (f, fix))| {
            if let Some((description, replacements)) = fix {
                fixes.push(LintFix { finding: i, description, replacements });
            }
            f
        })
        .collect();
    let first = envs.first();
    let same = first.filter(|e| envs.iter().all(|x| x == *e));
    Ok(LintReport {
        schema_version: SCHEMA_VERSION,
        tool_version: crate::meta::VERSION.to_string(),
        torch_version: same.and_then(|e| e.exact).map(|v| v.to_string()),
        files: names,
        checks: active,
        findings,
        errors,
        torch_source: same.map(|e| e.source.clone()),
        fixes,
    })
}

/// Give the allocator's free pages back to the system. The files' trees and first copies of their
/// facts were freed in the parse threads' arenas, which the main thread does not allocate from:
/// without this they stay in the RSS (1,336 files: about a third of it).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer; it only returns free pages of glibc's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The site as written, on one line: line breaks and the indentation after them dropped
/// (a space where they separated two words).
fn one_line(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' || c == '\r' {
            while chars.peek().is_some_and(|x| x.is_whitespace()) {
                chars.next();
            }
            while out.ends_with([' ', '\t']) {
                out.pop();
            }
            let before = out.chars().last();
            let after = chars.peek().copied();
            if !(before.is_some_and(|b| "([{".contains(b)) || after.is_some_and(|a| ")]}".contains(a)))
                && before.is_some()
            {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
    }
    out.trim().to_string()
}

/// What a finding says at its site, taken while its file is in memory.
struct Hit {
    check: usize,
    module: usize,
    line: u64,
    column: u64,
    text: String,
    context: String,
    severity: Severity,
}

fn hit(
    m: &python::Module,
    check: usize,
    c: &check::Check,
    site: &eval::Site,
    applies: torch::Applies,
    env: &torch::TorchEnv,
) -> Hit {
    let (line, column) = m.position(site.start);
    let written = one_line(&m.src[site.start..site.end]);
    let mut msg = c.def.message.replace("{call}", &written);
    for n in &site.notes {
        msg.push_str("; ");
        msg.push_str(n);
    }
    let mut severity = c.def.severity;
    if let Some(range) = &c.def.torch {
        if applies == torch::Applies::Maybe {
            // Said, but not as a warning: the torch that runs this is not known to be affected.
            severity = severity.min(Severity::Info);
            let demoted = if c.def.severity > Severity::Info {
                format!("info, not {}: ", c.def.severity.as_str())
            } else {
                String::new()
            };
            msg.push_str(&format!("; {demoted}this applies to torch {range} only, and {}", env.source));
        } else {
            msg.push_str(&format!("; for torch {range} ({})", env.source));
        }
    }
    Hit { check, module: site.module, line, column, text: m.line_text(site.start).to_string(), context: msg, severity }
}

fn finding(c: &check::Check, h: Hit, paths: &[String]) -> Finding {
    Finding {
        rule: c.def.id.clone(),
        title: c.def.title.clone(),
        category: "lint".into(),
        severity: h.severity,
        benign: false,
        ranks: Vec::new(),
        count: 1,
        evidence: vec![Evidence {
            source: paths[h.module].clone(),
            line: h.line,
            rank: None,
            text: h.text,
            detail: None,
            column: Some(h.column),
        }],
        root_cause: c.def.root_cause.trim().to_string(),
        fix: c.def.fix.trim().to_string(),
        refs: c.def.refs.clone(),
        context: Some(h.context),
        torch: c.def.torch.clone(),
    }
}

/// The check's mechanical fix at this site, if it has one and it applies here.
fn edit(m: &python::Module, c: &check::Check, site: &eval::Site) -> Option<Fix> {
    let e = c.def.edit.as_ref()?;
    let call = &m.calls[site.call?];
    let span = |s: usize, t: usize, text: String| {
        let (a, b) = m.position(s);
        let (x, y) = m.position(t);
        LintEdit { start_line: a, start_column: b, end_line: x, end_column: y, text }
    };
    let mut out = Vec::new();
    if let Some(new) = e.rename_call.get(&call.last) {
        out.push(span(call.name_start, call.name_start + call.last.len(), new.clone()));
    }
    for (k, v) in &e.set_keyword {
        if let Some(i) = call.keywords.iter().position(|(kk, _)| kk == k) {
            let (s, t) = call.keyword_spans[i];
            out.push(span(s, t, v.clone()));
        }
    }
    if let Some(stmt) = &e.insert_before {
        let prefix = call.callee.strip_suffix(&call.last).unwrap_or("");
        let (ls, indent) = m.line_start(call.start);
        // Only a call that starts its line: the new statement goes on the line above.
        if !prefix.is_empty() && call.statement && ls + indent.len() == call.start {
            out.push(span(ls, ls, format!("{indent}{}\n", stmt.replace("{prefix}", prefix))));
        }
    }
    let text = &m.src[call.start..call.end];
    if let Some((i, to)) =
        e.replace_in_call.iter().find_map(|[from, to]| text.find(from.as_str()).map(|i| (i, (from, to))))
    {
        out.push(span(call.start + i, call.start + i + to.0.len(), to.1.clone()));
    }
    (!out.is_empty()).then(|| (e.description.trim().to_string(), out))
}

/// A file lint could not read (a bad encoding) or parse, at its line and column.
fn error_at(source: String, line: u64, column: u64, text: String) -> Evidence {
    Evidence { source, line, rank: None, text, detail: None, column: Some(column) }
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

    /// Files are parsed (and their facts taken) on several threads; the report is the one thread's,
    /// byte for byte: every fixture together, and files that all define the same names and call
    /// each other's helpers through imports.
    #[test]
    fn parsing_on_several_threads_gives_the_report_of_one() {
        let mut sources = fixtures();
        for i in 0..24 {
            let prev = if i == 0 { 23 } else { i - 1 };
            let text = format!(
                "import torch.distributed as dist\nimport m{prev}\nfrom m{prev} import sync\n\n\
                 def sync():\n    dist.barrier()\n\n\
                 def main(rank):\n    dist.init_process_group('nccl')\n    if rank == 0:\n        m{prev}.sync()\n\
                 \x20   if rank == 1:\n        return\n    sync()\n    dist.destroy_process_group()\n    dist.destroy_process_group()\n\n\
                 if __name__ == '__main__':\n    main(0)\n"
            );
            sources.push((format!("pkg/m{i}.py"), text));
        }
        for torch in [None, Some(Version(2, 5, 1)), Some(Version(2, 7, 0))] {
            let json = |t| serde_json::to_string(&lint_sources_on(sources.clone(), torch, Some(t)).unwrap()).unwrap();
            let one = json(1);
            assert!(one.contains("destroy-twice") && one.contains("rank-return-before-collective"), "{one}");
            for t in [2, 3, 8] {
                assert_eq!(json(t), one, "{t} threads, torch {torch:?}");
            }
        }
    }

    /// A barrier helper from another file counts before the destroy when the caller imports it,
    /// `from helpers import *` included; not when nothing imports it.
    #[test]
    fn star_imports_bring_another_files_sync_helpers() {
        let lib = "import torch.distributed as dist\n\ndef sync():\n    dist.barrier()\n";
        let user = |imports: &str| {
            format!("{imports}\nimport torch.distributed as dist\n\ndef main():\n    dist.init_process_group('nccl', device_id=0)\n    sync()\n    dist.destroy_process_group()\n\nif __name__ == '__main__':\n    main()\n")
        };
        let barrier = |imports: &str| -> bool {
            let r = lint_sources(
                vec![("helpers.py".into(), lib.into()), ("train.py".into(), user(imports))],
                Some(Version(2, 5, 1)),
            )
            .unwrap();
            r.findings.iter().any(|f| f.rule == "no-barrier-before-destroy")
        };
        assert!(!barrier("from helpers import *"));
        assert!(!barrier("from .helpers import *"));
        assert!(!barrier("from helpers import sync"));
        assert!(barrier(""), "not imported: another file's sync is not this one's");
        assert!(barrier("from other import *"));
    }

    /// The severity follows the torch: a < 2.6 check is a warning on 2.5, off on 2.7, and info
    /// when the torch is not known.
    #[test]
    fn torch_specific_checks_follow_the_torch() {
        let src = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/lint/fixtures/torchtitan-train.py"),
        )
        .unwrap();
        let sev = |t: Option<Version>| {
            let r = lint_sources(vec![("t.py".into(), src.clone())], t).unwrap();
            r.findings.iter().find(|f| f.rule == "no-barrier-before-destroy").map(|f| f.severity)
        };
        assert_eq!(sev(Some(Version(2, 5, 1))), Some(Severity::Warning));
        assert_eq!(sev(Some(Version(2, 7, 0))), None);
        assert_eq!(sev(None), Some(Severity::Info));
    }

    #[test]
    fn every_check_has_a_positive_and_a_real_negative_fixture() {
        let checks = check::builtin().unwrap();
        let mut pos: HashMap<String, usize> = HashMap::new();
        let mut neg: HashMap<String, usize> = HashMap::new();
        let want = python::Wanted::of(&checks);
        for (name, text) in fixtures() {
            for e in header(&text, "expect") {
                *pos.entry(e.split(' ').next().unwrap().to_string()).or_default() += 1;
            }
            let program = eval::Program::new(vec![python::parse(&name, text.clone(), &want).unwrap()]);
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
