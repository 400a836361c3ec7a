//! In-band rule fixtures (docs/rule-writing.md): real log fragments with `#=...=#` directives that
//! say what the engine must conclude. Run by `epdoctor rules test` and by `cargo test`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::schema::{self, Rule};
use super::version::Version;
use super::RuleSource;
use super::{Engine, Options};
use crate::log::Input;
use crate::model::Analysis;

const MATCH: &str = "#=MATCH=# ";

#[derive(Debug, Default)]
pub struct Fixture {
    pub source: Option<String>,
    pub verdict: Option<String>,
    pub primary: Option<String>,
    pub fires: Vec<String>,
    pub not: Vec<String>,
    pub nccl: Option<Version>,
    pub match_line: Option<String>,
    /// (file name, text) pairs; one unnamed file unless `#=FILE=#` is used.
    pub files: Vec<(String, String)>,
}

pub fn parse(name: &str, text: &str) -> Result<Fixture> {
    let mut f = Fixture::default();
    let mut cur = (name.to_string(), String::new());
    let mut started = false;
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{name}:{}", i + 1);
        if let Some(rest) = line.strip_prefix(MATCH) {
            if f.match_line.is_some() {
                bail!("{}: a second #=MATCH=# line (one per fixture)", at());
            }
            f.match_line = Some(rest.to_string());
            cur.1.push_str(rest);
            cur.1.push('\n');
            started = true;
            continue;
        }
        let Some(d) = line.strip_prefix("#=") else {
            cur.1.push_str(line);
            cur.1.push('\n');
            started = true;
            continue;
        };
        let Some((key, val)) = d.split_once("=#") else { bail!("{}: malformed directive `{line}`", at()) };
        let val = val.trim();
        match key {
            "SOURCE" => f.source = Some(val.to_string()),
            "EXPECT" => {
                for kv in val.split_whitespace() {
                    match kv.split_once('=') {
                        Some(("verdict", v)) => f.verdict = Some(v.to_string()),
                        Some(("primary", v)) => f.primary = Some(v.to_string()),
                        _ => bail!("{}: EXPECT takes verdict=<v> primary=<id|none>, not `{kv}`", at()),
                    }
                }
            }
            "FIRES" => f.fires.extend(val.split_whitespace().map(String::from)),
            "NOT" => f.not.extend(val.split_whitespace().map(String::from)),
            "NCCL" => {
                f.nccl = Some(Version::parse(val).with_context(|| format!("{}: `{val}` is not a version", at()))?)
            }
            "FILE" => {
                if started {
                    f.files.push(std::mem::take(&mut cur));
                }
                cur = (val.to_string(), String::new());
                started = true;
            }
            "WANT" | "NOTE" => {}
            other => bail!("{}: unknown directive #={other}=#", at()),
        }
    }
    f.files.push(cur);
    if f.source.as_deref().is_none_or(str::is_empty) {
        bail!("{name}: no #=SOURCE=# line (every fixture cites where its lines come from)");
    }
    if f.verdict.is_none() {
        bail!("{name}: no #=EXPECT=# verdict=... line");
    }
    Ok(f)
}

pub struct Outcome {
    pub failures: Vec<String>,
    pub analysis: Analysis,
    pub fired: BTreeSet<String>,
}

pub fn check(engine: &Engine, f: &Fixture) -> Result<Outcome> {
    let inputs: Vec<Input> = f.files.iter().map(|(n, t)| Input::Memory { name: n.clone(), text: t.clone() }).collect();
    let a = engine.analyze(&inputs, &Options { assume_nccl: f.nccl, evidence: 5, ..Default::default() })?;
    let fired: BTreeSet<String> = a.findings.iter().map(|x| x.rule.clone()).collect();
    let mut failures = Vec::new();
    if let Some(v) = &f.verdict {
        if a.verdict.as_str() != v {
            failures.push(format!("verdict {} (expected {v})", a.verdict.as_str()));
        }
    }
    let got_primary = a.primary.as_ref().map_or("none", |p| p.rule.as_str());
    if let Some(p) = &f.primary {
        if got_primary != p {
            failures.push(format!("primary {got_primary} (expected {p})"));
        }
    }
    for id in &f.fires {
        if !fired.contains(id) {
            failures.push(format!("rule {id} did not fire"));
        }
    }
    for id in &f.not {
        if fired.contains(id) {
            failures.push(format!("rule {id} fired (must not)"));
        }
    }
    if let Some(m) = &f.match_line {
        let got = a.primary.as_ref().and_then(|p| p.evidence.first()).map(|e| e.text.as_str());
        // A record's evidence is its head line, with what the record joined to it (` | Signal: ...`,
        // a wrapped line's rest) after it.
        let is_head = |g: &str| g == m || g.strip_prefix(m.as_str()).is_some_and(|t| t.starts_with(' '));
        if !got.is_some_and(is_head) {
            failures.push(format!(
                "primary evidence is {:?}, expected the #=MATCH=# line {:?}",
                got.unwrap_or("(none)"),
                m
            ));
        }
    }
    Ok(Outcome { failures, analysis: a, fired })
}

/// Rewrite EXPECT and MATCH with what the engine finds now.
pub fn bless(text: &str, a: &Analysis) -> String {
    let primary = a.primary.as_ref();
    let target = primary.and_then(|p| p.evidence.first()).map(|e| e.text.clone());
    let mut out = String::new();
    let mut placed = false;
    let mut have_expect = false;
    for line in text.lines() {
        let body = line.strip_prefix(MATCH).unwrap_or(line);
        if line.starts_with("#=EXPECT=#") {
            have_expect = true;
            out.push_str(&format!(
                "#=EXPECT=# verdict={} primary={}\n",
                a.verdict.as_str(),
                primary.map_or("none", |p| p.rule.as_str())
            ));
            continue;
        }
        if !placed && target.as_deref() == Some(body) && !body.starts_with("#=") {
            out.push_str(MATCH);
            placed = true;
        }
        out.push_str(body);
        out.push('\n');
    }
    if !have_expect {
        out.insert_str(
            0,
            &format!(
                "#=EXPECT=# verdict={} primary={}\n",
                a.verdict.as_str(),
                primary.map_or("none", |p| p.rule.as_str())
            ),
        );
    }
    out
}

fn collect(paths: &[PathBuf]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            let mut files = Vec::new();
            walk(p, &mut files)?;
            files.sort();
            for f in files {
                out.push((
                    f.display().to_string(),
                    std::fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?,
                ));
            }
        } else {
            out.push((
                p.display().to_string(),
                std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
            ));
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push(p);
        }
    }
    Ok(())
}

/// How many fixtures name each rule (in FIRES or as the expected primary).
pub fn fixture_counts(rules: &[Rule]) -> BTreeMap<&str, usize> {
    let mut m: BTreeMap<&str, usize> = rules.iter().map(|r| (r.def.id.as_str(), 0)).collect();
    for (_, text) in schema::builtin_fixtures() {
        let mut ids = BTreeSet::new();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("#=FIRES=#") {
                ids.extend(v.split_whitespace());
            } else if let Some(v) = line.strip_prefix("#=EXPECT=#") {
                ids.extend(v.split_whitespace().filter_map(|kv| kv.strip_prefix("primary=")));
            }
        }
        for id in ids {
            if let Some(c) = m.get_mut(id) {
                *c += 1;
            }
        }
    }
    m
}

pub fn fixtures_for(id: &str) -> Vec<&'static str> {
    schema::builtin_fixtures()
        .filter(|(_, t)| {
            t.lines().any(|l| {
                (l.starts_with("#=FIRES=#") && l.split_whitespace().any(|w| w == id))
                    || (l.starts_with("#=EXPECT=#") && l.split_whitespace().any(|w| w == format!("primary={id}")))
            })
        })
        .map(|(p, _)| p)
        .collect()
}

/// Returns how many fixtures failed.
pub fn run_command(paths: &[PathBuf], bless_on: bool, opts: &RuleSource) -> Result<usize> {
    let engine = super::engine(opts)?;
    let builtin = paths.is_empty();
    let files: Vec<(String, String)> = if builtin {
        schema::builtin_fixtures().map(|(p, t)| (p.to_string(), t.to_string())).collect()
    } else {
        collect(paths)?
    };
    let mut out = std::io::stdout().lock();
    let (mut passed, mut failed) = (0usize, 0usize);
    let mut fired_somewhere: BTreeSet<String> = BTreeSet::new();
    for (name, text) in &files {
        let fx = match parse(name, text) {
            Ok(f) => f,
            Err(e) => {
                failed += 1;
                writeln!(out, "FAIL {name}: {e:#}")?;
                continue;
            }
        };
        let o = check(&engine, &fx)?;
        for id in &o.fired {
            if fx.fires.contains(id) || fx.primary.as_deref() == Some(id.as_str()) {
                fired_somewhere.insert(id.clone());
            }
        }
        if bless_on && !o.failures.is_empty() {
            let path = Path::new(name);
            if !path.exists() {
                bail!("cannot bless {name}: run from the source tree (the file is not at that path here)");
            }
            std::fs::write(path, bless(text, &o.analysis)).with_context(|| format!("cannot write {name}"))?;
            writeln!(out, "blessed {name}: {}", o.failures.join("; "))?;
            passed += 1;
        } else if o.failures.is_empty() {
            passed += 1;
            writeln!(out, "ok   {name}")?;
        } else {
            failed += 1;
            writeln!(out, "FAIL {name}: {}", o.failures.join("; "))?;
        }
    }
    if builtin {
        for r in &engine.rules {
            if !fired_somewhere.contains(&r.def.id) {
                failed += 1;
                writeln!(
                    out,
                    "FAIL rule {} ({}): no fixture proves it (list it in a fixture's #=FIRES=# or as its primary)",
                    r.def.id, r.origin
                )?;
            }
        }
    }
    writeln!(out, "{passed} passed, {failed} failed")?;
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_directives_and_files() {
        let t = "#=SOURCE=# x\n#=EXPECT=# verdict=benign primary=a\n#=FIRES=# a b\n#=NOT=# c\nl1\n#=FILE=# r1.log\n#=MATCH=# l2\n";
        let f = parse("f.log", t).unwrap();
        assert_eq!(f.fires, vec!["a", "b"]);
        assert_eq!(f.not, vec!["c"]);
        assert_eq!(f.files.len(), 2);
        assert_eq!(f.files[1].0, "r1.log");
        assert_eq!(f.files[1].1, "l2\n");
        assert_eq!(f.match_line.as_deref(), Some("l2"));
    }

    #[test]
    fn needs_source_and_expect() {
        assert!(parse("f", "#=EXPECT=# verdict=clean\n").unwrap_err().to_string().contains("SOURCE"));
        assert!(parse("f", "#=SOURCE=# s\n").unwrap_err().to_string().contains("EXPECT"));
        assert!(parse("f", "#=SOURCE=# s\n#=EXPECT=# verdict=clean\n#=BOGUS=# x\n")
            .unwrap_err()
            .to_string()
            .contains("BOGUS"));
    }
}
