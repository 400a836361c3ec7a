//! The check files, `rules/lint/*.toml`: what a domain expert edits. A check names the sites it looks
//! at (calls by name, or a tree-sitter query) and declarative conditions that must all hold for a
//! finding; docs/lint.md describes every field.

use std::collections::HashSet;

use anyhow::{anyhow, bail, Result};
use regex::Regex;
use serde::Deserialize;

use crate::model::version::Range;
use crate::model::Severity;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckFile {
    check: Vec<CheckDef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckDef {
    pub id: String,
    pub title: String,
    pub severity: Severity,
    /// torch versions the check applies to (absent: all).
    pub torch: Option<String>,
    pub site: SiteDef,
    /// What is said at the site (`{call}`: the call as written).
    pub message: String,
    #[serde(default)]
    pub when: When,
    pub root_cause: String,
    pub fix: String,
    #[serde(default)]
    pub refs: Vec<String>,
    /// A mechanical fix, carried by SARIF as `fixes` (see `Edit`).
    pub edit: Option<Edit>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteDef {
    /// Call patterns (see `Pattern`).
    #[serde(default)]
    pub calls: Vec<String>,
    /// Also calls of functions of the linted files that make such a call (sync helpers).
    #[serde(default)]
    pub helpers: bool,
    /// A tree-sitter query over the Python grammar; the capture `@site` is the site.
    pub query: Option<String>,
}

/// An edit of the site that fixes it, when the fix is mechanical.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// Said with the fix (SARIF `fixes[].description`).
    pub description: String,
    /// Rename the called function: last name -> new name (`device_index = "set_device_index"`).
    #[serde(default)]
    pub rename_call: std::collections::BTreeMap<String, String>,
    /// Give these keywords of the site call this value (`join = "True"`).
    #[serde(default)]
    pub set_keyword: std::collections::BTreeMap<String, String>,
    /// Insert this statement on its own line before the site's (`{prefix}`: the site callee's
    /// dotted prefix with its dot, `dist.`; no fix when the callee has none).
    pub insert_before: Option<String>,
    /// Replace text inside the site call: pairs `[from, to]`, the first that occurs.
    #[serde(default)]
    pub replace_in_call: Vec<[String; 2]>,
}

/// Conditions, all of which must hold for a finding. Names are call patterns; "through the linted
/// files" means a call of a function defined in them whose body makes such a call counts as one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// The file imports a module matching this name (`deep_ep`).
    pub imports: Option<String>,
    /// The site call has these keywords with exactly this source text (`join = "False"`).
    #[serde(default)]
    pub keyword: std::collections::BTreeMap<String, String>,
    /// The site call lacks this keyword (never holds when the call passes `**kwargs`).
    pub missing_keyword: Option<String>,
    /// The site call's arguments do not match this regex.
    pub args_not: Option<String>,
    /// The site is inside an `if`/`elif`/`else` whose condition matches this regex.
    pub in_branch: Option<String>,
    /// The site is in an `except` clause.
    pub in_except: Option<bool>,
    /// Skip the file when it calls `call` and every such call's arguments match `args` (a gloo or
    /// single-rank init).
    pub unless_all: Option<UnlessAll>,
    /// With `unprotected`: functions that run whatever happened before (`tearDown`, `__exit__`).
    #[serde(default)]
    pub protected_functions: Vec<String>,
    /// With `unprotected`: decorators whose functions do (`fixture`: pytest runs its teardown).
    #[serde(default)]
    pub protected_decorators: Vec<String>,
    /// None of these is called on the way from an entry point of the program to the site (scopes
    /// on the call chain, through the linted files, normal path only). Needs an entry point.
    #[serde(default)]
    pub no_call: Vec<String>,
    /// No call of the site's own names is in a `finally`/`except`, an `atexit` function or an
    /// `__exit__` (here, in a caller, or elsewhere in the file).
    pub unprotected: Option<bool>,
    /// None of these precedes the site in its function (or, if not, before every call of that
    /// function in the linted files).
    #[serde(default)]
    pub no_call_before: Vec<String>,
    /// One of these precedes the site in its function.
    #[serde(default)]
    pub call_before: Vec<String>,
    /// With `call_before`: one of these lies between that call and the site.
    #[serde(default)]
    pub call_between: Vec<String>,
    /// One of these follows the site in its function (through the linted files).
    #[serde(default)]
    pub call_after: Vec<String>,
    /// None of these is called in the site's function.
    #[serde(default)]
    pub no_call_in_function: Vec<String>,
    /// Another call of the site's names (same arguments) runs before it on the same path.
    pub twice: Option<bool>,
    /// Sites (and earlier calls, for `twice`) under an `if` matching this regex, or after an early
    /// `if ...: return` matching it, are skipped.
    pub unless_guarded: Option<String>,
    /// The site is under conditions that some ranks take and others do not (evaluated, see
    /// `lint::rank`), inside its function.
    pub rank_branch: Option<bool>,
    /// With `rank_branch`: no call of the same name in another arm of the same `if`, nor under
    /// the complementary rank condition in the same function (the paired-barrier pattern).
    pub unmirrored: Option<bool>,
    /// Skip calls that name a process group (`group=`, a barrier's positional group, a third
    /// positional argument of the other collectives): the condition may select that group.
    pub unless_group: Option<bool>,
    /// The site is in an `except` clause whose `try` body, `else` and the code after the `try`
    /// make no call of the same name (handlers of ImportError and ModuleNotFoundError exempt).
    pub unmirrored_except: Option<bool>,
    /// The site is in an `except` or `finally` clause.
    pub on_exception_path: Option<bool>,
    /// (break sites) one of these is called in the enclosing loop, outside the breaking branch.
    #[serde(default)]
    pub call_in_loop: Vec<String>,
    /// The site call is a whole statement (its result is dropped).
    pub statement: Option<bool>,
    /// The site call's device argument (first positional, or `device_id`) comes from the global
    /// rank (`RANK`, `get_rank()`, `SLURM_PROCID`) rather than a node-local index.
    pub global_rank_arg: Option<bool>,
    /// Some chain of callers reaches a function passed to one of these (`spawn`).
    #[serde(default)]
    pub reached_via: Vec<String>,
    /// The site call lacks one of these keywords (no `**kwargs`, fewer than five positionals).
    #[serde(default)]
    pub missing_keywords: Vec<String>,
    /// With `reached_via`: no function on that chain sets `os.environ["RANK"]`.
    pub env_rank_unset: Option<bool>,
    /// Skip sites whose backend (first positional or `backend=`, followed to a parameter
    /// default or an assignment) is made of string literals none of which matches this regex.
    pub backend_is: Option<String>,
    /// The site is in a function installed with `signal.signal`.
    pub in_signal_handler: Option<bool>,
    /// Only the first such site of its function.
    pub first_in_function: Option<bool>,
    /// With `unprotected`: calls of these in a `finally`/`except`/atexit function also protect.
    /// With `on_exception_path`: a `finally` whose `try` makes such a call in an `except` clause
    /// (an abort) is not reported.
    #[serde(default)]
    pub protected_by: Vec<String>,
    /// With `call_after`: later calls that name a process group do not count (the condition may
    /// select that group's ranks).
    pub later_unless_group: Option<bool>,
    /// With `no_call_before`: one of these as the last call before the site also counts.
    #[serde(default)]
    pub no_call_just_before: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlessAll {
    pub call: String,
    pub args: String,
}

/// A call pattern. `name` matches a call whose last name is `name` (`f()` or `x.f()`); `.name` only
/// method calls (`x.name()`); `a.b.name` calls written with that dotted suffix; a trailing `()` asks
/// for no positional arguments (`destroy_process_group()` is the default group, not a subgroup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub last: String,
    /// Dotted prefix that must precede `last` (`torch.cuda` for `torch.cuda.set_device`).
    pub prefix: Option<String>,
    pub method_only: bool,
    pub no_positional: bool,
    pub text: String,
}

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern> {
        let text = s.trim().to_string();
        let mut t = text.as_str();
        let no_positional = t.ends_with("()");
        if no_positional {
            t = &t[..t.len() - 2];
        }
        let method_only = t.starts_with('.');
        let t = t.trim_start_matches('.');
        let (prefix, last) = match t.rsplit_once('.') {
            Some((p, l)) => (Some(p.to_string()), l.to_string()),
            None => (None, t.to_string()),
        };
        let ident = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.');
        if !ident(&last) || prefix.as_deref().is_some_and(|p| !ident(p)) {
            bail!("`{s}` is not a call pattern (a name, `.name`, `a.b.name`, optionally ending in `()`)");
        }
        Ok(Pattern { last, prefix, method_only, no_positional, text })
    }
}

#[derive(Debug)]
pub struct Check {
    pub def: CheckDef,
    pub torch: Option<Range>,
    pub calls: Vec<Pattern>,
    pub query: Option<tree_sitter::Query>,
    /// The query is `(some_statement) @site`: its sites are the statements the walk indexed.
    pub statement_kind: Option<String>,
    pub args_not: Option<Regex>,
    pub in_branch: Option<Regex>,
    pub guard: Option<Regex>,
    pub imports: Option<Regex>,
    pub unless_all: Option<(Vec<Pattern>, Regex)>,
    pub no_call: Vec<Pattern>,
    pub no_call_before: Vec<Pattern>,
    pub call_before: Vec<Pattern>,
    pub call_between: Vec<Pattern>,
    pub call_after: Vec<Pattern>,
    pub no_call_in_function: Vec<Pattern>,
    pub call_in_loop: Vec<Pattern>,
    pub reached_via: Vec<Pattern>,
    pub protected_by: Vec<Pattern>,
    pub no_call_just_before: Vec<Pattern>,
    pub backend_is: Option<Regex>,
}

pub const DIR: &str = "rules/lint/";

fn patterns(v: &[String], ctx: &dyn Fn(String) -> String) -> Result<Vec<Pattern>> {
    v.iter().map(|s| Pattern::parse(s).map_err(|e| anyhow!("{}", ctx(e.to_string())))).collect()
}

pub fn parse_file(origin: &str, text: &str) -> Result<Vec<Check>> {
    let file: CheckFile = toml::from_str(text).map_err(|e| anyhow!("lint check file {origin}: {e}"))?;
    let lang: tree_sitter::Language = tree_sitter_python::LANGUAGE.into();
    let mut out = Vec::new();
    for def in file.check {
        let id = def.id.clone();
        let ctx = |what: String| format!("lint check file {origin}, check `{id}`: {what}");
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            bail!("{}", ctx("the id must be non-empty and use letters, digits and '-' only".into()));
        }
        let re = |r: &Option<String>, what: &str| -> Result<Option<Regex>> {
            r.as_deref()
                .map(|r| Regex::new(r).map_err(|e| anyhow!("{}", ctx(format!("{what} is not a valid regex: {e}")))))
                .transpose()
        };
        let calls = patterns(&def.site.calls, &ctx)?;
        let query = match &def.site.query {
            Some(q) => {
                let q =
                    tree_sitter::Query::new(&lang, q).map_err(|e| anyhow!("{}", ctx(format!("site.query: {e}"))))?;
                if !q.capture_names().contains(&"site") {
                    bail!("{}", ctx("site.query has no @site capture".into()));
                }
                Some(q)
            }
            None => None,
        };
        if calls.is_empty() == query.is_none() {
            bail!("{}", ctx("give the site as either `calls` or `query`".into()));
        }
        let w = &def.when;
        if !w.call_between.is_empty() && w.call_before.is_empty() {
            bail!("{}", ctx("when.call_between needs when.call_before".into()));
        }
        let call_only = w.missing_keyword.is_some()
            || !w.keyword.is_empty()
            || w.args_not.is_some()
            || !w.missing_keywords.is_empty()
            || w.statement.is_some()
            || w.global_rank_arg.is_some()
            || w.unless_group.is_some()
            || w.backend_is.is_some();
        if query.is_some() && call_only {
            bail!("{}", ctx("keyword and argument conditions need a `calls` site".into()));
        }
        if w.unmirrored.is_some() && w.rank_branch.is_none() {
            bail!("{}", ctx("when.unmirrored needs when.rank_branch".into()));
        }
        if !w.call_in_loop.is_empty() && query.is_none() {
            bail!("{}", ctx("when.call_in_loop is for statement (query) sites".into()));
        }
        if let Some(e) = &def.edit {
            if e.description.trim().is_empty() {
                bail!("{}", ctx("edit.description is empty".into()));
            }
            if query.is_some() {
                bail!("{}", ctx("an edit needs a `calls` site".into()));
            }
        }
        let torch = def
            .torch
            .as_deref()
            .map(Range::parse)
            .transpose()
            .map_err(|e| anyhow!("{}", ctx(format!("torch: {e}"))))?;
        let statement_kind = def.site.query.as_deref().and_then(|q| {
            let q = q.trim();
            let inner = q.strip_prefix('(')?.strip_suffix("@site")?.trim_end().strip_suffix(')')?;
            (inner.ends_with("_statement") && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                .then(|| inner.to_string())
        });
        out.push(Check {
            torch,
            calls,
            query,
            statement_kind,
            args_not: re(&w.args_not, "when.args_not")?,
            in_branch: re(&w.in_branch, "when.in_branch")?,
            guard: re(&w.unless_guarded, "when.unless_guarded")?,
            imports: w.imports.as_deref().map(|m| Regex::new(&format!(r"\b{}\b", regex::escape(m))).expect("escaped")),
            unless_all: match &w.unless_all {
                Some(u) => Some((
                    vec![Pattern::parse(&u.call).map_err(|e| anyhow!("{}", ctx(e.to_string())))?],
                    Regex::new(&u.args).map_err(|e| anyhow!("{}", ctx(format!("when.unless_all.args: {e}"))))?,
                )),
                None => None,
            },
            no_call: patterns(&w.no_call, &ctx)?,
            no_call_before: patterns(&w.no_call_before, &ctx)?,
            call_before: patterns(&w.call_before, &ctx)?,
            call_between: patterns(&w.call_between, &ctx)?,
            call_after: patterns(&w.call_after, &ctx)?,
            no_call_in_function: patterns(&w.no_call_in_function, &ctx)?,
            call_in_loop: patterns(&w.call_in_loop, &ctx)?,
            reached_via: patterns(&w.reached_via, &ctx)?,
            protected_by: patterns(&w.protected_by, &ctx)?,
            no_call_just_before: patterns(&w.no_call_just_before, &ctx)?,
            backend_is: re(&w.backend_is, "when.backend_is")?,
            def,
        });
    }
    Ok(out)
}

/// The built-in checks, embedded from rules/lint/*.toml.
pub fn builtin() -> Result<Vec<Check>> {
    let mut out: Vec<Check> = Vec::new();
    let mut seen = HashSet::new();
    for (path, text) in crate::meta::EMBEDDED.iter().filter(|(p, _)| p.starts_with(DIR) && p.ends_with(".toml")) {
        for c in parse_file(path, text)? {
            if !seen.insert(c.def.id.clone()) {
                bail!("lint check `{}` is defined twice (second in {path})", c.def.id);
            }
            out.push(c);
        }
    }
    Ok(out)
}
