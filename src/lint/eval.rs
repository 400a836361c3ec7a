//! The evaluator: each check's sites, then its conditions, over all linted files at once (a call
//! of a function defined in any of them counts as the calls that function makes).
//!
//! Time is linear in the sites: every per-file fact (statement context, matching calls per
//! function, callers) is computed once and looked up; what depends on a check is memoised for the
//! whole check (`Memo`), not per site.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::LazyLock;

use regex::Regex;

use super::check::{Check, Pattern};
use super::python::{is_signal_via, Call, Ctx, Module, FINALLY_ARM};
use super::rank;

/// How far calls are followed through callers (deeper chains are not looked at).
const MAX_DEPTH: usize = 12;

/// A function of the linted files that stands for a matching call (see `Program::helpers`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Helper {
    module: usize,
    scope: usize,
}

/// Helpers by function name, for the lookup from a call.
#[derive(Default)]
pub struct Helpers {
    by_name: HashMap<String, NameHelpers>,
}

/// The helpers of one name, in the order found, and the same by module (a call in a file that
/// defines the name looks at that file's only).
#[derive(Default)]
struct NameHelpers {
    all: Vec<Helper>,
    by_module: HashMap<usize, Vec<Helper>>,
}

impl Helpers {
    fn push(&mut self, name: String, x: Helper) {
        let e = self.by_name.entry(name).or_default();
        e.all.push(x);
        e.by_module.entry(x.module).or_default().push(x);
    }

    /// The helpers a call of `name` in module `mi` may mean: that module's when it defines the
    /// name (`own`), else all.
    fn of(&self, name: &str, mi: usize, own: bool) -> &[Helper] {
        let Some(e) = self.by_name.get(name) else { return &[] };
        if own {
            e.by_module.get(&mi).map_or(&[], Vec::as_slice)
        } else {
            &e.all
        }
    }
}

/// The calls of one name: by module, and those in modules that define no plain function of that
/// name (the only ones that can mean another file's function), in (module, call) order.
#[derive(Default)]
struct NameCalls {
    by_module: HashMap<usize, Vec<usize>>,
    foreign: Vec<CallRef>,
}

pub struct Site {
    pub module: usize,
    pub start: usize,
    pub end: usize,
    pub scope: usize,
    pub call: Option<usize>,
    /// Its statement context and guards (`Module::ctx`, `Module::is_guarded`).
    pub ctx: u32,
    pub guarded: u64,
    /// Said after the check's message (where the chain starts, which call came first).
    pub notes: Vec<String>,
}

/// (module, call index)
type CallRef = (usize, usize);

/// Which functions stand for a call of a pattern set (see `Program::helpers`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Makes such a call on its normal path.
    Normal,
    /// Ends with such a call (a barrier helper ends with its barrier).
    Tail,
    /// Makes it whatever it is passed: not under a condition on one of its own parameters
    /// (`def log(msg, barrier=True): if barrier: dist.barrier()` is no sync helper).
    Always,
}

/// (kind, pattern texts)
type Key = (Kind, Vec<String>);

/// The calls of one function that match a pattern set, by start, with the running minimum of
/// their ends (so "one ends before `pos`" is a binary search).
#[derive(Default)]
struct ScopeMatches {
    starts: Vec<usize>,
    min_end: Vec<usize>,
    calls: Vec<usize>,
}

impl ScopeMatches {
    fn any_before(&self, pos: usize) -> bool {
        let k = self.starts.partition_point(|&s| s < pos);
        k > 0 && self.min_end[k - 1] <= pos
    }

    /// Matching calls that start at or after `pos`.
    fn from(&self, pos: usize) -> &[usize] {
        &self.calls[self.starts.partition_point(|&s| s < pos)..]
    }

    /// Matching calls that start before `pos`, latest first.
    fn before(&self, pos: usize) -> impl Iterator<Item = usize> + '_ {
        self.calls[..self.starts.partition_point(|&s| s < pos)].iter().rev().copied()
    }
}

/// Per module and function; None where a function has no matching call (most: a box of three
/// empty vectors per function and pattern set was a tenth of the peak on a large tree).
struct Matched(Vec<Vec<Option<Box<ScopeMatches>>>>);

static NO_MATCHES: ScopeMatches = ScopeMatches { starts: Vec::new(), min_end: Vec::new(), calls: Vec::new() };

impl Matched {
    fn at(&self, mi: usize, scope: usize) -> &ScopeMatches {
        self.0[mi][scope].as_deref().unwrap_or(&NO_MATCHES)
    }
}

/// The calls of one function.
type Callers = Rc<Vec<CallRef>>;

/// What a check remembers across its sites.
#[derive(Default)]
pub struct Memo {
    preceded: HashMap<(usize, usize, usize), bool>,
    free: HashMap<(usize, usize), Option<Option<CallRef>>>,
    protected_scope: HashMap<(usize, usize), bool>,
    file: HashMap<(u8, usize), bool>,
}

pub struct Program {
    pub modules: Vec<Module>,
    /// Calls by their last name.
    by_name: HashMap<String, NameCalls>,
    /// Per module and scope, its calls in source order.
    scope_calls: Vec<Vec<Vec<usize>>>,
    /// Per module and scope, its calls that are not inside another call's arguments.
    outer_calls: Vec<Vec<Vec<usize>>>,
    /// Per module: the functions it defines, (name, is_method).
    /// Per module, the names of its plain functions (not methods).
    defined: Vec<HashSet<String>>,
    /// Per module: the name it is imported by (file stem; the folder for `__init__.py`).
    stems: Vec<String>,
    helpers_cache: RefCell<HashMap<Key, Rc<Helpers>>>,
    matched_cache: RefCell<HashMap<Key, Rc<Matched>>>,
    callers_cache: RefCell<HashMap<(usize, usize), Callers>>,
    path_cache: RefCell<HashMap<(usize, usize, usize), Rc<rank::Path>>>,
}

/// `word` occurs in `text` between non-identifier characters.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident) && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// The call names a process group (`group=`, a barrier's positional group, a third positional
/// argument of the other collectives).
fn names_group(c: &Call) -> bool {
    let named = c.keywords.iter().any(|(k, _)| matches!(k.as_str(), "group" | "process_group" | "pg"));
    let positional = if c.last == "barrier" || c.last == "monitored_barrier" { 1 } else { 3 };
    named || c.positional >= positional
}

impl Program {
    pub fn new(mut modules: Vec<Module>) -> Program {
        // Function names passed to other calls count as calls of those functions.
        let defined_anywhere: HashSet<String> = modules
            .iter()
            .flat_map(|m| m.scopes.iter().skip(1).filter(|s| !s.is_method).map(|s| s.name.clone()))
            .collect();
        for m in &mut modules {
            let refs = std::mem::take(&mut m.refs);
            // A signal handler runs only on that signal, not on the paths the checks follow.
            let kept: Vec<Call> = refs
                .iter()
                .filter(|r| defined_anywhere.contains(&r.name) && !is_signal_via(&m.calls[r.call].callee))
                .map(|r| m.ref_call(r))
                .collect();
            m.calls.reserve_exact(kept.len());
            m.calls.extend(kept);
            m.calls.sort_by_key(|c| c.start);
        }
        let mut by_name: HashMap<String, NameCalls> = HashMap::new();
        let mut scope_calls = Vec::new();
        let mut outer_calls = Vec::new();
        let mut defined: Vec<HashSet<String>> = Vec::new();
        for (mi, m) in modules.iter().enumerate() {
            let mine: HashSet<String> =
                m.scopes.iter().skip(1).filter(|s| !s.is_method).map(|s| s.name.clone()).collect();
            let mut per_scope = vec![Vec::new(); m.scopes.len()];
            for (ci, c) in m.calls.iter().enumerate() {
                let e = by_name.entry(c.last.clone()).or_default();
                e.by_module.entry(mi).or_default().push(ci);
                if !mine.contains(&c.last) {
                    e.foreign.push((mi, ci));
                }
                per_scope[c.scope].push(ci);
            }
            let mut outer = vec![Vec::new(); m.scopes.len()];
            for (si, calls) in per_scope.iter().enumerate() {
                // Sorted by start: a call is an argument of an earlier one while it starts before that one ends.
                let mut reach = 0;
                for &ci in calls {
                    let c = &m.calls[ci];
                    if c.via.is_none() && c.start >= reach {
                        outer[si].push(ci);
                        reach = c.end;
                    }
                }
            }
            defined.push(mine);
            scope_calls.push(per_scope);
            outer_calls.push(outer);
        }
        let stems = modules
            .iter()
            .map(|m| {
                let p = std::path::Path::new(&m.path);
                let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                let dir = p.parent().and_then(|d| d.file_name()).and_then(|s| s.to_str()).unwrap_or("");
                if stem == "__init__" { dir } else { stem }.to_string()
            })
            .collect();
        Program {
            modules,
            by_name,
            scope_calls,
            outer_calls,
            defined,
            stems,
            helpers_cache: RefCell::default(),
            matched_cache: RefCell::default(),
            callers_cache: RefCell::default(),
            path_cache: RefCell::default(),
        }
    }

    /// Drop the rank paths of the sites looked at (a check's worth; cheap to make again from
    /// the conditions' parts).
    pub fn forget_paths(&self) {
        self.path_cache.borrow_mut().clear();
        self.path_cache.borrow_mut().shrink_to_fit();
    }

    fn call(&self, r: CallRef) -> &Call {
        &self.modules[r.0].calls[r.1]
    }

    /// The calls of `name` that may mean a function of module `mi` (`resolves` says which do),
    /// in (module, call) order: that module's own, and those of the files that do not define the
    /// name themselves (none for a method). A file defining the name calls its own, so the many
    /// files that all define `main` never look at each other's calls.
    fn candidates(&self, name: &str, mi: usize, method: bool) -> Vec<CallRef> {
        let Some(e) = self.by_name.get(name) else { return Vec::new() };
        let own = e.by_module.get(&mi).into_iter().flatten().map(|&ci| (mi, ci));
        if method {
            return own.collect();
        }
        let k = e.foreign.partition_point(|r| r.0 < mi);
        let after = e.foreign[k..].iter().copied().filter(|r| r.0 != mi);
        e.foreign[..k].iter().copied().chain(own).chain(after).collect()
    }

    pub fn direct(p: &Pattern, c: &Call) -> bool {
        if c.via.is_some() || c.last != p.last || (p.method_only && !c.attr) || (p.no_positional && c.positional > 0) {
            return false;
        }
        match &p.prefix {
            None => true,
            Some(pre) => c
                .callee
                .strip_suffix(&p.last)
                .and_then(|x| x.strip_suffix('.'))
                .is_some_and(|x| x == pre || x.ends_with(&format!(".{pre}")) || pre.ends_with(&format!(".{x}"))),
        }
    }

    pub fn direct_any(pats: &[Pattern], c: &Call) -> bool {
        pats.iter().any(|p| Self::direct(p, c))
    }

    /// Call `c` in module `mi` calls function `h`. In its own file: same name, a method as
    /// `x.name()`, a plain function as `name()`. From another file only a plain function does, and only if the caller imports it
    /// (`from m import name` for `name()`, the module for `m.name()`, `from m import *`) and
    /// defines no such name itself.
    fn resolves(&self, mi: usize, c: &Call, h: &Helper) -> bool {
        let s = &self.modules[h.module].scopes[h.scope];
        if c.last != s.name || (s.is_method && !c.attr) {
            return false;
        }
        if mi == h.module {
            // `x.run()` is a method, not this file's function `run`; and a method of this file
            // only through `self`/`cls`/`super()` or a variable made by one of its classes
            // (`trainer = Trainer(...)`): `coco_eval.evaluate()` or `th.save()` are someone else's.
            if s.is_method != c.attr {
                return false;
            }
            return !c.attr
                || match self.receiver_class(mi, c) {
                    None => false,
                    Some(None) => true,
                    Some(Some(cls)) => s.class.as_deref() == Some(cls.as_str()),
                };
        }
        if s.is_method || self.defined[mi].contains(&s.name) {
            return false;
        }
        let m = &self.modules[mi];
        let stem = &self.stems[h.module];
        if c.attr {
            m.import_words.contains(stem)
        } else {
            m.import_words.contains(&s.name) || m.star_imports.iter().any(|x| x == stem)
        }
    }

    /// The class of the receiver of `x.m()` when it is one of this file's: `self`/`cls` (the
    /// caller's class; Some(None) when the caller is no method, or for `super()`), a class name,
    /// or a variable assigned from one's constructor. None: someone else's object.
    fn receiver_class(&self, mi: usize, c: &Call) -> Option<Option<String>> {
        let m = &self.modules[mi];
        let receiver = c.callee.rsplit_once('.').map_or("", |(r, _)| r);
        if matches!(receiver, "self" | "cls") {
            return Some(m.scopes[c.scope].class.clone());
        }
        if receiver == "super()" || receiver.starts_with("self.") {
            return Some(None);
        }
        if m.classes.contains(receiver) {
            return Some(Some(receiver.to_string()));
        }
        m.assigns.iter().filter(|a| a.target == receiver).find_map(|a| {
            let v = a.value.trim_start();
            let ctor: String = v.chars().take_while(|ch| ch.is_alphanumeric() || *ch == '_' || *ch == '.').collect();
            let name = ctor.rsplit('.').next().unwrap_or(&ctor).to_string();
            (v[ctor.len()..].starts_with('(') && m.classes.contains(&name)).then_some(Some(name))
        })
    }

    fn matches(&self, mi: usize, c: &Call, pats: &[Pattern], h: &Helpers) -> bool {
        Self::direct_any(pats, c) || self.helper_of(mi, c, h).is_some()
    }

    fn helper_of(&self, mi: usize, c: &Call, h: &Helpers) -> Option<Helper> {
        // A file that defines the name itself calls its own (`resolves`): the other files' many
        // helpers of that name need no look (a tree of files that all define `main` was quadratic).
        let own = self.defined[mi].contains(&c.last);
        h.of(&c.last, mi, own).iter().find(|x| self.resolves(mi, c, x)).copied()
    }

    /// Functions standing for a call of `pats`. Normal (`tail` false): a function that makes such a
    /// call on its normal path (not in an `except`), directly or through another. Tail: one whose
    /// last call is such a call, as a barrier helper ends with its barrier. A method call
    /// (`.destroy`) depends on its receiver, which a helper's body does not show: never a helper.
    fn helpers(&self, pats: &[Pattern], kind: Kind) -> Rc<Helpers> {
        let key = (kind, pats.iter().map(|p| p.text.clone()).collect::<Vec<_>>());
        if let Some(h) = self.helpers_cache.borrow().get(&key) {
            return h.clone();
        }
        let seeds: Vec<Pattern> = pats.iter().filter(|p| !p.method_only).cloned().collect();
        let mut h = Helpers::default();
        let mut all = HashSet::new();
        let mut work = Vec::new();
        let mut add = |h: &mut Helpers, work: &mut Vec<Helper>, x: Helper| {
            if x.scope != 0 && all.insert(x) {
                h.push(self.modules[x.module].scopes[x.scope].name.clone(), x);
                work.push(x);
            }
        };
        let counts = |mi: usize, ci: usize| {
            let m = &self.modules[mi];
            let c = &m.calls[ci];
            match kind {
                Kind::Tail => self.outer_calls[mi][c.scope].last() == Some(&ci),
                Kind::Normal => !m.call_ctx(ci).except,
                Kind::Always => {
                    let params = &m.scopes[c.scope].params;
                    !m.call_ctx(ci).except
                        && !m.cond_texts(m.call_ctx(ci)).any(|t| params.iter().any(|(p, _)| has_word(t, p)))
                }
            }
        };
        for (mi, m) in self.modules.iter().enumerate() {
            for (ci, c) in m.calls.iter().enumerate() {
                if Self::direct_any(&seeds, c) && counts(mi, ci) {
                    add(&mut h, &mut work, Helper { module: mi, scope: c.scope });
                }
            }
        }
        while let Some(x) = work.pop() {
            let s = &self.modules[x.module].scopes[x.scope];
            for (mi, ci) in self.candidates(&s.name, x.module, s.is_method) {
                let c = &self.modules[mi].calls[ci];
                if self.resolves(mi, c, &x) && counts(mi, ci) {
                    add(&mut h, &mut work, Helper { module: mi, scope: c.scope });
                }
            }
        }
        let h = Rc::new(h);
        self.helpers_cache.borrow_mut().insert(key, h.clone());
        h
    }

    /// Per function, its calls matching `pats` (directly or through a helper), found once.
    fn matched(&self, pats: &[Pattern], kind: Kind) -> Rc<Matched> {
        let key = (kind, pats.iter().map(|p| p.text.clone()).collect::<Vec<_>>());
        if let Some(m) = self.matched_cache.borrow().get(&key) {
            return m.clone();
        }
        let h = self.helpers(pats, kind);
        let out: Vec<Vec<Option<Box<ScopeMatches>>>> = self
            .modules
            .iter()
            .enumerate()
            .map(|(mi, m)| {
                self.scope_calls[mi]
                    .iter()
                    .map(|calls| {
                        let mut sm = ScopeMatches::default();
                        for &ci in calls {
                            let c = &m.calls[ci];
                            if self.matches(mi, c, pats, &h) {
                                let min = sm.min_end.last().map_or(c.end, |&e: &usize| e.min(c.end));
                                sm.starts.push(c.start);
                                sm.min_end.push(min);
                                sm.calls.push(ci);
                            }
                        }
                        (!sm.calls.is_empty()).then(|| Box::new(sm))
                    })
                    .collect()
            })
            .collect();
        let out = Rc::new(Matched(out));
        self.matched_cache.borrow_mut().insert(key, out.clone());
        out
    }

    /// Calls (and references) of function `scope` of module `mi`.
    fn callers(&self, mi: usize, scope: usize) -> Callers {
        if scope == 0 {
            return Rc::new(Vec::new());
        }
        if let Some(v) = self.callers_cache.borrow().get(&(mi, scope)) {
            return v.clone();
        }
        let me = Helper { module: mi, scope };
        let s = &self.modules[mi].scopes[scope];
        let v: Vec<CallRef> = self
            .candidates(&s.name, mi, s.is_method)
            .into_iter()
            .filter(|&(mj, ci)| {
                let c = &self.modules[mj].calls[ci];
                self.resolves(mj, c, &me) && !(mj == mi && c.scope == scope)
            })
            .collect();
        let v = Rc::new(v);
        self.callers_cache.borrow_mut().insert((mi, scope), v.clone());
        v
    }

    fn calls_in(&self, mi: usize, scope: usize) -> impl Iterator<Item = (usize, &Call)> {
        self.scope_calls[mi][scope].iter().map(move |&ci| (ci, &self.modules[mi].calls[ci]))
    }

    /// The branch conditions of a site, evaluated per sample rank (see `lint::rank`).
    fn rank_path(&self, mi: usize, start: usize, end: usize, ctx: &Ctx, inside: Option<usize>) -> Rc<rank::Path> {
        let key = (mi, start, inside.unwrap_or(0));
        if let Some(p) = self.path_cache.borrow().get(&key) {
            return p.clone();
        }
        let _ = end;
        let conds: Vec<_> = ctx.conds.iter().filter(|c| inside.is_none_or(|i| c.start >= i)).cloned().collect();
        let m = &self.modules[mi];
        let p = Rc::new(rank::path(conds.iter().flat_map(|c| m.cond_parts(c))));
        self.path_cache.borrow_mut().insert(key, p.clone());
        p
    }

    /// The sites of a check, before its conditions.
    pub fn sites(&self, check: &Check) -> Vec<Site> {
        let mut out = Vec::new();
        let h = check.def.site.helpers.then(|| self.helpers(&check.calls, Kind::Always));
        for (mi, m) in self.modules.iter().enumerate() {
            if !check.calls.is_empty() {
                for (ci, c) in m.calls.iter().enumerate() {
                    let helper = h.as_ref().is_some_and(|h| c.via.is_none() && self.helper_of(mi, c, h).is_some());
                    if Self::direct_any(&check.calls, c) || helper {
                        out.push(Site {
                            module: mi,
                            start: c.start,
                            end: c.end,
                            scope: c.scope,
                            call: Some(ci),
                            ctx: c.ctx,
                            guarded: c.guarded,
                            notes: vec![],
                        });
                    }
                }
            }
            let stmts = match (&check.statement_kind, &check.def.site.query) {
                (Some(kind), _) => m.statements.get(kind.as_str()),
                (None, Some(q)) => m.query_sites.get(q),
                (None, None) => None,
            };
            for st in stmts.into_iter().flatten() {
                out.push(Site {
                    module: mi,
                    start: st.start,
                    end: st.end,
                    scope: st.scope,
                    call: None,
                    ctx: st.ctx,
                    guarded: st.guarded,
                    notes: vec![],
                });
            }
        }
        out.sort_by_key(|s| (s.module, s.start));
        out.dedup_by_key(|s| (s.module, s.start));
        out
    }

    /// Whether every condition of the check holds at `site` (adding notes to it). The cheap
    /// conditions of the site itself come first.
    pub fn holds(&self, check: &Check, site: &mut Site, memo: &mut Memo) -> bool {
        let m = &self.modules[site.module];
        let call = site.call.map(|ci| &m.calls[ci]);
        let w = &check.def.when;
        if let Some(re) = &check.imports {
            if !*memo.file.entry((2, site.module)).or_insert_with(|| re.is_match(&m.imports)) {
                return false;
            }
        }
        if let Some((pats, re)) = &check.unless_all {
            let skip = *memo.file.entry((0, site.module)).or_insert_with(|| {
                let mut calls = m.calls.iter().filter(|c| Self::direct_any(pats, c)).peekable();
                calls.peek().is_some() && calls.all(|c| re.is_match(m.args(c)))
            });
            if skip {
                return false;
            }
        }
        if let Some(c) = call {
            if !self.call_conditions(check, site.module, c) {
                return false;
            }
        }
        let ctx = m.ctx(site.ctx);
        if check.in_branch.as_ref().is_some_and(|re| !m.cond_texts(ctx).any(|c| re.is_match(c))) {
            return false;
        }
        if w.in_except.is_some_and(|e| e != ctx.except) {
            return false;
        }
        if w.on_exception_path.is_some_and(|e| e != (ctx.except || ctx.finally)) {
            return false;
        }
        // A finally whose try aborts in an except clause: the exception path has its teardown.
        if w.on_exception_path == Some(true) && !ctx.except && !check.protected_by.is_empty() {
            if let Some((ts, te)) = ctx.finally_try {
                let aborts = self.calls_in(site.module, site.scope).any(|(ci, c)| {
                    c.start >= ts && c.end <= te && m.call_ctx(ci).except && Self::direct_any(&check.protected_by, c)
                });
                if aborts {
                    return false;
                }
            }
        }
        if w.unmirrored_except == Some(true) && !self.unmirrored_except(site, ctx) {
            return false;
        }
        if w.rank_branch == Some(true) && !self.rank_branch(check, site, ctx) {
            return false;
        }
        if check.guard.as_ref().is_some_and(|g| m.is_guarded(site.guarded, g)) {
            return false;
        }
        if w.in_signal_handler == Some(true) && (site.scope == 0 || !m.handlers.contains(&m.scopes[site.scope].name)) {
            return false;
        }
        if w.first_in_function == Some(true) {
            let sm = self.matched(&check.calls, if check.def.site.helpers { Kind::Always } else { Kind::Normal });
            if sm.at(site.module, site.scope).before(site.start).next().is_some() {
                return false;
            }
        }
        if w.global_rank_arg == Some(true) && !call.is_some_and(|c| self.global_rank_arg(site.module, c)) {
            return false;
        }
        if !check.call_before.is_empty() && !self.call_before(check, site) {
            return false;
        }
        if !check.call_after.is_empty() && !self.call_after(check, site, ctx) {
            return false;
        }
        if !check.call_in_loop.is_empty() && !self.call_in_loop(check, site, ctx) {
            return false;
        }
        if !check.no_call_in_function.is_empty() {
            let sm = self.matched(&check.no_call_in_function, Kind::Normal);
            if !sm.at(site.module, site.scope).calls.is_empty() {
                return false;
            }
        }
        if w.twice == Some(true) && !self.twice(check, site) {
            return false;
        }
        if !check.no_call_before.is_empty() && self.preceded(check, site.module, site.scope, site.start, 0, memo) {
            return false;
        }
        if w.unprotected == Some(true) && !self.unprotected(check, site, memo) {
            return false;
        }
        if !check.reached_via.is_empty() && !self.reached_via(check, site) {
            return false;
        }
        if !check.no_call.is_empty() && !self.no_call(check, site, memo) {
            return false;
        }
        true
    }

    /// `call_after`: a matching call later in the site's function, on a path the site's ranks take
    /// too; it is named in the site's notes.
    fn call_after(&self, check: &Check, site: &mut Site, ctx: &Ctx) -> bool {
        let m = &self.modules[site.module];
        let w = &check.def.when;
        let sm = self.matched(&check.call_after, Kind::Normal);
        // A later call on a path the site's path excludes (`if not fsdp and not rank0: return`
        // ... `if fsdp: broadcast()`) is not one the returning ranks skip.
        let mine = (w.rank_branch == Some(true)).then(|| self.rank_path(site.module, site.start, site.end, ctx, None));
        let later = sm.at(site.module, site.scope).from(site.end).iter().copied().find(|&ci| {
            let c = &m.calls[ci];
            if w.later_unless_group == Some(true) && names_group(c) {
                return false;
            }
            mine.as_ref().is_none_or(|p| {
                let other = self.rank_path(site.module, c.start, c.end, m.call_ctx(ci), None);
                !p.uniform.iter().any(|(t, pos)| other.uniform.iter().any(|(t2, pos2)| t == t2 && pos != pos2))
            })
        });
        let later = later.map(|ci| &m.calls[ci]);
        match later {
            Some(c) => site.notes.push(format!("`{}` follows at line {}", c.callee, m.position(c.start).0)),
            None => return false,
        }
        true
    }

    /// Conditions on the site call's arguments.
    fn call_conditions(&self, check: &Check, mi: usize, c: &Call) -> bool {
        let w = &check.def.when;
        for (k, v) in &w.keyword {
            if !c.keywords.iter().any(|(kk, vv)| kk == k && vv == v) {
                return false;
            }
        }
        if let Some(k) = &w.missing_keyword {
            if c.splat_kw || c.keywords.iter().any(|(kk, _)| kk == k) {
                return false;
            }
        }
        if !w.missing_keywords.is_empty()
            && (c.splat_kw
                || c.positional >= 5
                || w.missing_keywords.iter().all(|k| c.keywords.iter().any(|(kk, _)| kk == k)))
        {
            return false;
        }
        if check.args_not.as_ref().is_some_and(|re| re.is_match(self.modules[mi].args(c))) {
            return false;
        }
        if w.statement.is_some_and(|s| s != c.statement) {
            return false;
        }
        if w.unless_group == Some(true) && names_group(c) {
            return false;
        }
        if let Some(re) = &check.backend_is {
            if let Some(lits) = self.backend_literals(mi, c) {
                if !lits.is_empty() && !lits.iter().any(|l| re.is_match(l)) {
                    return false;
                }
            }
        }
        true
    }

    /// The string literals the backend argument of `c` is made of: Some(empty) when there is
    /// none (the default backend), None when it cannot be told (a variable set elsewhere).
    fn backend_literals(&self, mi: usize, c: &Call) -> Option<Vec<String>> {
        let m = &self.modules[mi];
        let arg = c
            .keywords
            .iter()
            .zip(c.keyword_spans.iter())
            .find(|((k, _), _)| k == "backend")
            .map(|(_, span)| *span)
            .or(c.first_arg);
        let Some((s, e)) = arg else {
            return if c.splat_kw { None } else { Some(Vec::new()) };
        };
        let text = &m.src[s..e];
        static LIT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"["']([^"']*)["']"#).expect("valid"));
        static CONSTANT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"Backend\.([A-Za-z]+)").expect("valid"));
        let lit = &*LIT;
        let lits = |t: &str| -> Vec<String> { lit.captures_iter(t).map(|c| c[1].to_string()).collect() };
        let mut direct = lits(text);
        // `dist.Backend.GLOO`: the backend named by its constant.
        direct.extend(CONSTANT.captures_iter(text).map(|c| c[1].to_string()));
        if !direct.is_empty() {
            return Some(direct);
        }
        let name = text.trim();
        if !name.chars().all(|ch| ch.is_alphanumeric() || ch == '_') {
            return None;
        }
        // A parameter default, or an assignment in the function or at module level.
        let scope = &m.scopes[c.scope];
        if let Some((_, Some(d))) = scope.params.iter().find(|(p, _)| p == name) {
            let l = lits(d);
            return (!l.is_empty()).then_some(l);
        }
        let assigned = m
            .assigns
            .iter()
            .filter(|a| a.target == name && (a.scope == c.scope || a.scope == 0) && a.start < c.start)
            .max_by_key(|a| (a.scope == c.scope, a.start))?;
        let l = lits(&assigned.value);
        (!l.is_empty()).then_some(l)
    }

    /// The site is under a rank-selective condition and (with `unmirrored`) nothing mirrors it.
    fn rank_branch(&self, check: &Check, site: &mut Site, ctx: &Ctx) -> bool {
        let inside = if site.call.is_none() && self.is_break(site) { ctx.loop_body.map(|l| l.0) } else { None };
        if inside.is_none() && site.call.is_none() && self.is_break(site) {
            return false; // a break outside any loop
        }
        let p = self.rank_path(site.module, site.start, site.end, ctx, inside);
        if !p.selective {
            return false;
        }
        if check.def.when.unmirrored == Some(true) {
            let m = &self.modules[site.module];
            let Some(ci) = site.call else { return false };
            let me = &m.calls[ci];
            for (cj, c) in self.calls_in(site.module, site.scope) {
                if cj == ci || c.last != me.last || c.via.is_some() {
                    continue;
                }
                let cctx = &m.call_ctx(cj);
                let other_arm = cctx.arms.iter().any(|&(s, a)| ctx.arms.iter().any(|&(s2, a2)| s == s2 && a != a2));
                if other_arm || rank::complementary(&p, &self.rank_path(site.module, c.start, c.end, cctx, None)) {
                    return false;
                }
            }
        }
        let shown: Vec<&str> = p.rank_conds.iter().rev().map(String::as_str).collect();
        site.notes.push(format!("only ranks where `{}` holds get here", shown.join(" and ")));
        true
    }

    fn is_break(&self, site: &Site) -> bool {
        self.modules[site.module].src[site.start..site.end].trim() == "break"
    }

    /// An `except` clause whose `try` body, `else` and the code after the `try` make no call of
    /// the site's name: only the ranks that raised get there.
    fn unmirrored_except(&self, site: &Site, ctx: &Ctx) -> bool {
        let m = &self.modules[site.module];
        let (Some(ci), Some(((hs, he), (ts, te)))) = (site.call, ctx.handler) else { return false };
        let header = m.src[hs..he].split(':').next().unwrap_or("");
        if has_word(header, "ImportError") || has_word(header, "ModuleNotFoundError") {
            return false;
        }
        let me = &m.calls[ci];
        let mirrored = self.calls_in(site.module, site.scope).any(|(cj, c)| {
            let cctx = &m.call_ctx(cj);
            cj != ci
                && c.last == me.last
                && c.via.is_none()
                // After the try, or in its body or else (not one of its handlers).
                && (c.start >= te || (c.start >= ts && !cctx.arms.iter().any(|&(s, a)| s == ts && a != 0 && a != FINALLY_ARM)))
        });
        !mirrored
    }

    /// (break sites) a matching call in the enclosing loop's body, outside the breaking branch.
    fn call_in_loop(&self, check: &Check, site: &mut Site, ctx: &Ctx) -> bool {
        let Some((ls, le)) = ctx.loop_body else { return false };
        let m = &self.modules[site.module];
        // The outermost branch inside the loop that holds the break.
        let branch = ctx.arms.iter().rfind(|(s, _)| *s >= ls).copied();
        let sm = self.matched(&check.call_in_loop, Kind::Normal);
        let found =
            sm.at(site.module, site.scope).from(ls).iter().copied().take_while(|&ci| m.calls[ci].start < le).find(
                |&ci| {
                    let cctx = &m.call_ctx(ci);
                    branch.is_none_or(|b| !cctx.arms.contains(&b))
                },
            );
        match found {
            Some(ci) => {
                let c = &m.calls[ci];
                site.notes.push(format!(
                    "the other ranks go on to `{}` at line {} in the loop",
                    c.callee,
                    m.position(c.start).0
                ));
                true
            }
            None => false,
        }
    }

    /// The device argument comes from the global rank (not `% device_count()`, not a local rank).
    fn global_rank_arg(&self, mi: usize, c: &Call) -> bool {
        let m = &self.modules[mi];
        let span = c
            .keywords
            .iter()
            .zip(c.keyword_spans.iter())
            .find(|((k, _), _)| k == "device_id" || k == "device")
            .map(|(_, s)| *s)
            .or(c.first_arg);
        let Some((s, e)) = span else { return false };
        self.global_source(m, c.scope, c.start, &m.src[s..e], 0)
    }

    fn global_source(&self, m: &Module, scope: usize, before: usize, expr: &str, depth: usize) -> bool {
        static GLOBAL: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(
                r#"\[\s*["']RANK["']\s*\]|\.get\(\s*["']RANK["']|getenv\(\s*["']RANK["']|\bget_rank\(\s*\)|\bget_global_rank\(\s*\)|SLURM_PROCID|OMPI_COMM_WORLD_RANK\b|\bPMI_RANK\b|\bPMIX_RANK\b"#,
            )
            .expect("valid")
        });
        static LOCAL: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"LOCAL_RANK|SLURM_LOCALID|OMPI_COMM_WORLD_LOCAL_RANK|MPI_LOCALRANKID|LOCAL_PROCID")
                .expect("valid")
        });
        static NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[A-Za-z_][\w.]*").expect("valid"));
        let src_re = &*GLOBAL;
        // `rank % torch.cuda.device_count()` is a node-local index (ranks packed per node), and so
        // is anything read from a local-rank variable (`os.environ.get("LOCAL_RANK", rank)`).
        if expr.contains('%') || expr.contains("//") || expr.contains("device_count") || LOCAL.is_match(expr) {
            return false;
        }
        if src_re.is_match(expr) {
            return true;
        }
        if depth >= 3 {
            return false;
        }
        // The names inside (`rank`, `args.rank`, `f"cuda:{rank}"`): what they were assigned.
        for n in NAME.find_iter(expr).map(|x| x.as_str()) {
            if matches!(n, "int" | "str" | "torch.device" | "cuda" | "f" | "format") || n.starts_with("torch.") {
                continue;
            }
            let mut values: Vec<&str> = m
                .assigns
                .iter()
                .filter(|a| a.target == n && a.scope == scope && a.start < before)
                .map(|a| a.value.as_str())
                .collect();
            if values.is_empty() && scope != 0 {
                if m.scopes[scope].params.iter().any(|(p, _)| p == n) {
                    continue;
                }
                values = m.assigns.iter().filter(|a| a.target == n && a.scope == 0).map(|a| a.value.as_str()).collect();
            }
            if values.iter().any(|v| self.global_source(m, scope, before, v, depth + 1)) {
                return true;
            }
        }
        false
    }

    /// `no_call`: some chain of callers from an entry point (module-level code) to the site makes
    /// none of the calls. No entry point among the linted files: nothing can be said.
    fn no_call(&self, check: &Check, site: &mut Site, memo: &mut Memo) -> bool {
        let sm = self.matched(&check.no_call, Kind::Normal);
        let mut on_stack = HashSet::new();
        match self.free(&sm, site.module, site.scope, 0, memo, &mut on_stack).0 {
            Some(via) => {
                if let Some(r) = via {
                    let c = self.call(r);
                    let (l, _) = self.modules[r.0].position(c.start);
                    site.notes.push(format!("reached from `{}` at {}:{l}", c.callee, self.modules[r.0].path));
                }
                true
            }
            None => false,
        }
    }

    /// A chain from an entry point to `scope` along which no function makes a call of `sm` on its
    /// normal path: Some(the call that enters the chain from module level), memoised per check.
    /// The flag says the answer depended on a function still being looked at (a cycle), so it is
    /// not remembered.
    fn free(
        &self,
        sm: &Matched,
        mi: usize,
        scope: usize,
        depth: usize,
        memo: &mut Memo,
        on_stack: &mut HashSet<(usize, usize)>,
    ) -> (Option<Option<CallRef>>, bool) {
        if let Some(v) = memo.free.get(&(mi, scope)) {
            return (*v, false);
        }
        if !on_stack.insert((mi, scope)) {
            return (None, true);
        }
        let makes = sm.at(mi, scope).calls.iter().any(|&ci| !self.modules[mi].call_ctx(ci).except);
        let mut tainted = false;
        let v = if makes {
            None
        } else if scope == 0 {
            Some(None)
        } else if depth >= MAX_DEPTH {
            tainted = true;
            None
        } else {
            let mut found = None;
            for &r in self.callers(mi, scope).iter() {
                let cs = self.call(r).scope;
                let (sub, t) = self.free(sm, r.0, cs, depth + 1, memo, on_stack);
                tainted |= t;
                if let Some(inner) = sub {
                    found = Some(if cs == 0 { Some(r) } else { inner });
                    break;
                }
            }
            found
        };
        on_stack.remove(&(mi, scope));
        if !tainted || v.is_some() {
            memo.free.insert((mi, scope), v);
        }
        (v, tainted && v.is_none())
    }

    /// In a `finally`/`except`, an atexit function, a signal handler, or a function the check
    /// names (`__exit__`, `tearDown`) or whose decorator it names (`fixture`).
    fn lex_protected(&self, check: &Check, mi: usize, ci: usize) -> bool {
        let m = &self.modules[mi];
        let c = &m.calls[ci];
        let f = &m.scopes[c.scope];
        let w = &check.def.when;
        let named = c.scope != 0
            && (m.atexit.contains(&f.name)
                || m.handlers.contains(&f.name)
                || w.protected_functions.contains(&f.name)
                || w.protected_decorators.iter().any(|d| has_word(&f.decorators, d)));
        let ctx = &m.call_ctx(ci);
        named || c.via.as_deref().is_some_and(|v| v.ends_with("atexit.register")) || ctx.finally || ctx.except
    }

    fn scope_lex_protected(&self, check: &Check, mi: usize, scope: usize) -> bool {
        let m = &self.modules[mi];
        let f = &m.scopes[scope];
        let w = &check.def.when;
        scope != 0
            && (m.atexit.contains(&f.name)
                || m.handlers.contains(&f.name)
                || w.protected_functions.contains(&f.name)
                || w.protected_decorators.iter().any(|d| has_word(&f.decorators, d)))
    }

    /// Every call of function `scope` is protected (and there is one).
    fn scope_protected(&self, check: &Check, mi: usize, scope: usize, depth: usize, memo: &mut Memo) -> bool {
        if let Some(&v) = memo.protected_scope.get(&(mi, scope)) {
            return v;
        }
        memo.protected_scope.insert((mi, scope), false); // a cycle proves nothing
        let callers = self.callers(mi, scope);
        let v = depth < MAX_DEPTH
            && !callers.is_empty()
            && callers.iter().all(|&r| {
                let cs = self.call(r).scope;
                self.lex_protected(check, r.0, r.1) || self.scope_protected(check, r.0, cs, depth + 1, memo)
            });
        memo.protected_scope.insert((mi, scope), v);
        v
    }

    /// `unprotected`: neither this call nor any other call of the same names (or of
    /// `protected_by`) in its file runs on the exception path.
    fn unprotected(&self, check: &Check, site: &Site, memo: &mut Memo) -> bool {
        let protected_here = match site.call {
            Some(ci) => self.lex_protected(check, site.module, ci),
            None => {
                let ctx = self.modules[site.module].ctx(site.ctx);
                ctx.finally || ctx.except || self.scope_lex_protected(check, site.module, site.scope)
            }
        };
        if protected_here || self.scope_protected(check, site.module, site.scope, 0, memo) {
            return false;
        }
        let any = *memo.file.entry((1, site.module)).or_insert_with(|| {
            let h = self.helpers(&check.calls, Kind::Normal);
            let m = &self.modules[site.module];
            m.calls.iter().enumerate().any(|(ci, c)| {
                (self.matches(site.module, c, &check.calls, &h) || Self::direct_any(&check.protected_by, c))
                    && self.lex_protected(check, site.module, ci)
            })
        });
        !any
    }

    /// A synchronising call precedes `pos` in `scope` (or is the last call before it, for
    /// `no_call_just_before`), or precedes every call of that function.
    fn preceded(&self, check: &Check, mi: usize, scope: usize, pos: usize, depth: usize, memo: &mut Memo) -> bool {
        if let Some(&v) = memo.preceded.get(&(mi, scope, pos)) {
            return v;
        }
        memo.preceded.insert((mi, scope, pos), false);
        let sm = self.matched(&check.no_call_before, Kind::Tail);
        let mut v = sm.at(mi, scope).any_before(pos);
        if !v && !check.no_call_just_before.is_empty() {
            let just = self.matched(&check.no_call_just_before, Kind::Tail);
            let outer = &self.outer_calls[mi][scope];
            let m = &self.modules[mi];
            let k = outer.partition_point(|&ci| m.calls[ci].start < pos);
            if let Some(&last) = outer[..k].iter().rev().find(|&&ci| m.calls[ci].end <= pos) {
                v = just
                    .at(mi, scope)
                    .calls
                    .binary_search_by_key(&m.calls[last].start, |&ci| m.calls[ci].start)
                    .is_ok();
            }
        }
        if !v {
            let callers = self.callers(mi, scope);
            v = depth < MAX_DEPTH
                && !callers.is_empty()
                && callers.iter().all(|&r| {
                    let c = self.call(r);
                    self.preceded(check, r.0, c.scope, c.start, depth + 1, memo)
                });
        }
        memo.preceded.insert((mi, scope, pos), v);
        v
    }

    fn call_before(&self, check: &Check, site: &mut Site) -> bool {
        let m = &self.modules[site.module];
        let Some((_, first)) = self
            .calls_in(site.module, site.scope)
            .take_while(|(_, c)| c.start < site.start)
            .filter(|(_, c)| c.end <= site.start && Self::direct_any(&check.call_before, c))
            .last()
        else {
            return false;
        };
        site.notes.push(format!("after `{}` at line {}", first.callee, m.position(first.start).0));
        if check.call_between.is_empty() {
            return true;
        }
        let sm = self.matched(&check.call_between, Kind::Normal);
        match sm
            .at(site.module, site.scope)
            .from(first.end)
            .iter()
            .map(|&ci| &m.calls[ci])
            .find(|c| c.end <= site.start)
        {
            Some(b) => {
                site.notes.push(format!("with `{}` at line {} in between", b.callee, m.position(b.start).0));
                true
            }
            None => false,
        }
    }

    /// A call under the guard, or of functions whose own calls of `pats` are all guarded.
    fn guarded_call(&self, mi: usize, c: &Call, pats: &[Pattern], h: &Helpers, g: &regex::Regex, depth: usize) -> bool {
        if self.modules[mi].is_guarded(c.guarded, g) {
            return true;
        }
        if depth >= MAX_DEPTH || Self::direct_any(pats, c) {
            return false;
        }
        let own = self.defined[mi].contains(&c.last);
        let targets: Vec<&Helper> = h.of(&c.last, mi, own).iter().filter(|x| self.resolves(mi, c, x)).collect();
        !targets.is_empty()
            && targets.iter().all(|x| {
                self.calls_in(x.module, x.scope)
                    .filter(|(_, k)| self.matches(x.module, k, pats, h))
                    .all(|(_, k)| self.guarded_call(x.module, k, pats, h, g, depth + 1))
            })
    }

    /// `twice`: an earlier call of the site's names, with the same arguments, on the same path.
    fn twice(&self, check: &Check, site: &mut Site) -> bool {
        let m = &self.modules[site.module];
        let Some(ci) = site.call else { return false };
        let me = &m.calls[ci];
        let here = &m.call_ctx(ci);
        if here.in_loop {
            return false;
        }
        let h = self.helpers(&check.calls, Kind::Normal);
        let sm = self.matched(&check.calls, Kind::Normal);
        let mut earlier: Vec<usize> = sm.at(site.module, site.scope).before(site.start).collect();
        earlier.reverse();
        for aj in earlier {
            let a = &m.calls[aj];
            if a.end > site.start {
                continue;
            }
            if Self::direct_any(&check.calls, a) && m.args(a) != m.args(me) {
                continue;
            }
            let actx = &m.call_ctx(aj);
            let exclusive = actx.arms.iter().any(|&(s, arm)| {
                here.arms.iter().any(|&(s2, arm2)| s == s2 && arm != arm2 && arm != FINALLY_ARM && arm2 != FINALLY_ARM)
            });
            if actx.in_loop
                || exclusive
                || m.exits_before(aj, site.start)
                || check.guard.as_ref().is_some_and(|g| self.guarded_call(site.module, a, &check.calls, &h, g, 0))
            {
                continue;
            }
            site.notes.push(format!("`{}` at line {} already ran", a.callee, m.position(a.start).0));
            return true;
        }
        false
    }

    /// `reached_via`: a chain of callers from the site reaches a function passed to one of the
    /// patterns (`mp.spawn(worker)`), and (with `env_rank_unset`) no function on it sets RANK.
    fn reached_via(&self, check: &Check, site: &mut Site) -> bool {
        static ENV: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"environ\[\s*["']RANK["']\s*\]\s*=|environ\.update|environ\.setdefault\(\s*["']RANK|putenv\(\s*["']RANK"#)
                .expect("valid")
        });
        let env = &*ENV;
        let sets_env = |mi: usize, scope: usize| {
            let m = &self.modules[mi];
            let s = &m.scopes[scope];
            env.is_match(&m.src[s.start..s.end])
        };
        let want_env = check.def.when.env_rank_unset == Some(true);
        // Depth-first up the callers, carrying whether the chain so far sets the environment.
        let mut stack = vec![(site.module, site.scope, 0usize, want_env && sets_env(site.module, site.scope))];
        let mut seen = HashSet::new();
        while let Some((mi, scope, depth, set)) = stack.pop() {
            if !seen.insert((mi, scope, set)) || depth > MAX_DEPTH {
                continue;
            }
            for &r in self.callers(mi, scope).iter() {
                let c = self.call(r);
                let via_matches = c.via.as_deref().is_some_and(|v| {
                    let last = v.rsplit('.').next().unwrap_or(v);
                    check.reached_via.iter().any(|p| p.last == last)
                });
                if via_matches && !set {
                    let (l, _) = self.modules[r.0].position(c.start);
                    site.notes.push(format!(
                        "`{}` is started by `{}` at {}:{l}",
                        self.modules[mi].scopes[scope].name,
                        c.via.as_deref().unwrap_or(""),
                        self.modules[r.0].path
                    ));
                    return true;
                }
                if c.via.is_none() {
                    let set2 = set || (want_env && sets_env(r.0, c.scope));
                    stack.push((r.0, c.scope, depth + 1, set2));
                }
            }
        }
        false
    }
}
