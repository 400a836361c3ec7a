//! The evaluator: each check's sites, then its conditions, over all linted files at once (a call
//! of a function defined in any of them counts as the calls that function makes).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use streaming_iterator::StreamingIterator;

use super::check::{Check, Pattern};
use super::python::{Call, Module, FINALLY_ARM};

/// How far calls are followed through callers (deeper chains are not looked at).
const MAX_DEPTH: usize = 12;

/// A function of the linted files that stands for a matching call (see `Program::helpers`).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Helper {
    module: usize,
    scope: usize,
}

/// Helpers by function name, for the lookup from a call.
#[derive(Default)]
struct Helpers {
    by_name: HashMap<String, Vec<Helper>>,
    all: HashSet<Helper>,
}

pub struct Site {
    pub module: usize,
    pub start: usize,
    pub end: usize,
    pub scope: usize,
    pub call: Option<usize>,
    /// Said after the check's message (where the chain starts, which call came first).
    pub notes: Vec<String>,
}

/// (module, call index)
type CallRef = (usize, usize);

pub struct Program {
    pub modules: Vec<Module>,
    /// Calls by their last name.
    by_name: HashMap<String, Vec<CallRef>>,
    /// Per module and scope, its calls in source order.
    scope_calls: Vec<Vec<Vec<usize>>>,
    /// Per module and call: inside an `except` clause.
    in_except: Vec<Vec<bool>>,
    /// Per module: the functions it defines, (name, is_method).
    defined: Vec<HashSet<(String, bool)>>,
    /// Per module and scope: its last call outside other calls' arguments.
    last_call: Vec<Vec<Option<usize>>>,
    /// Per module: the name it is imported by (file stem; the folder for `__init__.py`).
    stems: Vec<String>,
    cache: RefCell<HashMap<HelperKey, Rc<Helpers>>>,
}

/// (tail, pattern texts)
type HelperKey = (bool, Vec<String>);

/// `word` occurs in `text` between non-identifier characters.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident) && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
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
            for (name, r) in refs {
                // A signal handler runs only on that signal, not on the paths the checks follow.
                let handler = r.via.as_deref().is_some_and(|v| v == "signal.signal" || v == "signal");
                if defined_anywhere.contains(&name) && !handler {
                    m.calls.push(r);
                }
            }
            m.calls.sort_by_key(|c| c.start);
        }
        let mut by_name: HashMap<String, Vec<CallRef>> = HashMap::new();
        let mut scope_calls = Vec::new();
        let mut in_except = Vec::new();
        let mut defined = Vec::new();
        let mut last_call = Vec::new();
        for (mi, m) in modules.iter().enumerate() {
            let mut per_scope = vec![Vec::new(); m.scopes.len()];
            for (ci, c) in m.calls.iter().enumerate() {
                by_name.entry(c.last.clone()).or_default().push((mi, ci));
                per_scope[c.scope].push(ci);
            }
            let mut last = vec![None; m.scopes.len()];
            for (si, calls) in per_scope.iter().enumerate() {
                // Sorted by start: a call is an argument of an earlier one while it starts before that one ends.
                let mut reach = 0;
                for &ci in calls {
                    let c = &m.calls[ci];
                    if c.via.is_none() && c.start >= reach {
                        last[si] = Some(ci);
                        reach = c.end;
                    }
                }
            }
            in_except.push(m.calls.iter().map(|c| m.ctx(c.start, c.end).except).collect());
            defined.push(m.scopes.iter().skip(1).map(|s| (s.name.clone(), s.is_method)).collect());
            scope_calls.push(per_scope);
            last_call.push(last);
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
        Program { modules, by_name, scope_calls, in_except, defined, last_call, stems, cache: RefCell::default() }
    }

    fn call(&self, r: CallRef) -> &Call {
        &self.modules[r.0].calls[r.1]
    }

    fn direct(p: &Pattern, c: &Call) -> bool {
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

    fn direct_any(pats: &[Pattern], c: &Call) -> bool {
        pats.iter().any(|p| Self::direct(p, c))
    }

    /// Call `c` in module `mi` calls function `h`. In its own file: same name, a method only as
    /// `x.name()`. From another file only a plain function does, and only if the caller imports it
    /// (`from m import name` for `name()`, the module for `m.name()`) and defines no such name itself.
    fn resolves(&self, mi: usize, c: &Call, h: &Helper) -> bool {
        let s = &self.modules[h.module].scopes[h.scope];
        if c.last != s.name || (s.is_method && !c.attr) {
            return false;
        }
        if mi == h.module {
            return true;
        }
        if s.is_method || self.defined[mi].contains(&(s.name.clone(), false)) {
            return false;
        }
        let imports = &self.modules[mi].imports;
        let word = if c.attr { &self.stems[h.module] } else { &s.name };
        has_word(imports, word)
    }

    fn matches(&self, mi: usize, c: &Call, pats: &[Pattern], h: &Helpers) -> bool {
        Self::direct_any(pats, c) || h.by_name.get(&c.last).is_some_and(|v| v.iter().any(|x| self.resolves(mi, c, x)))
    }

    /// Functions standing for a call of `pats`. Normal (`tail` false): a function that makes such a
    /// call on its normal path (not in an `except`), directly or through another. Tail: one whose
    /// last call is such a call, as a barrier helper ends with its barrier. A method call
    /// (`.destroy`) depends on its receiver, which a helper's body does not show: never a helper.
    fn helpers(&self, pats: &[Pattern], tail: bool) -> Rc<Helpers> {
        let key = (tail, pats.iter().map(|p| p.text.clone()).collect::<Vec<_>>());
        if let Some(h) = self.cache.borrow().get(&key) {
            return h.clone();
        }
        let seeds: Vec<Pattern> = pats.iter().filter(|p| !p.method_only).cloned().collect();
        let mut h = Helpers::default();
        let mut work = Vec::new();
        let add = |h: &mut Helpers, work: &mut Vec<Helper>, x: Helper| {
            if x.scope != 0 && h.all.insert(x.clone()) {
                let name = self.modules[x.module].scopes[x.scope].name.clone();
                h.by_name.entry(name).or_default().push(x.clone());
                work.push(x);
            }
        };
        let counts = |mi: usize, ci: usize| {
            let c = &self.modules[mi].calls[ci];
            if tail {
                self.last_call[mi][c.scope] == Some(ci)
            } else {
                !self.in_except[mi][ci]
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
            let name = &self.modules[x.module].scopes[x.scope].name;
            for &(mi, ci) in self.by_name.get(name).into_iter().flatten() {
                let c = &self.modules[mi].calls[ci];
                if self.resolves(mi, c, &x) && counts(mi, ci) {
                    add(&mut h, &mut work, Helper { module: mi, scope: c.scope });
                }
            }
        }
        let h = Rc::new(h);
        self.cache.borrow_mut().insert(key, h.clone());
        h
    }

    /// Calls (and references) of function `scope` of module `mi`.
    fn callers(&self, mi: usize, scope: usize) -> Vec<CallRef> {
        if scope == 0 {
            return Vec::new();
        }
        let me = Helper { module: mi, scope };
        let name = &self.modules[mi].scopes[scope].name;
        self.by_name
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&(mj, ci)| {
                let c = &self.modules[mj].calls[ci];
                self.resolves(mj, c, &me) && !(mj == mi && c.scope == scope)
            })
            .collect()
    }

    fn calls_in(&self, mi: usize, scope: usize) -> impl Iterator<Item = (usize, &Call)> {
        self.scope_calls[mi][scope].iter().map(move |&ci| (ci, &self.modules[mi].calls[ci]))
    }

    /// The sites of a check, before its conditions.
    pub fn sites(&self, check: &Check) -> Vec<Site> {
        let mut out = Vec::new();
        for (mi, m) in self.modules.iter().enumerate() {
            if !check.calls.is_empty() {
                for (ci, c) in m.calls.iter().enumerate() {
                    if Self::direct_any(&check.calls, c) {
                        out.push(Site {
                            module: mi,
                            start: c.start,
                            end: c.end,
                            scope: c.scope,
                            call: Some(ci),
                            notes: vec![],
                        });
                    }
                }
            }
            if let Some(q) = &check.query {
                let idx = q.capture_index_for_name("site").expect("checked at load");
                let mut cur = tree_sitter::QueryCursor::new();
                let mut it = cur.matches(q, m.tree.root_node(), m.src.as_bytes());
                while let Some(mat) = it.next() {
                    for cap in mat.captures.iter().filter(|c| c.index == idx) {
                        let (s, e) = (cap.node.start_byte(), cap.node.end_byte());
                        out.push(Site {
                            module: mi,
                            start: s,
                            end: e,
                            scope: m.scope_at(s, e),
                            call: None,
                            notes: vec![],
                        });
                    }
                }
            }
        }
        out.sort_by_key(|s| (s.module, s.start));
        out.dedup_by_key(|s| (s.module, s.start));
        out
    }

    /// Whether every condition of the check holds at `site` (adding notes to it). The cheap
    /// conditions of the site itself come first.
    pub fn holds(&self, check: &Check, site: &mut Site) -> bool {
        let m = &self.modules[site.module];
        let call = site.call.map(|ci| &m.calls[ci]);
        let w = &check.def.when;
        if check.imports.as_ref().is_some_and(|re| !re.is_match(&m.imports)) {
            return false;
        }
        if let Some((pats, re)) = &check.unless_all {
            let mut calls = m.calls.iter().filter(|c| Self::direct_any(pats, c)).peekable();
            if calls.peek().is_some() && calls.all(|c| re.is_match(&c.args)) {
                return false;
            }
        }
        if let Some(c) = call {
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
            if check.args_not.as_ref().is_some_and(|re| re.is_match(&c.args)) {
                return false;
            }
        }
        let ctx = m.ctx(site.start, site.end);
        if check.in_branch.as_ref().is_some_and(|re| !ctx.conds.iter().any(|c| re.is_match(c))) {
            return false;
        }
        if w.in_except.is_some_and(|e| e != ctx.except) {
            return false;
        }
        if check.guard.as_ref().is_some_and(|g| m.guarded(site.start, site.end, g)) {
            return false;
        }
        if !check.call_before.is_empty() && !self.call_before(check, site) {
            return false;
        }
        if !check.call_after.is_empty() {
            let h = self.helpers(&check.call_after, false);
            let later = self
                .calls_in(site.module, site.scope)
                .find(|(_, c)| c.start >= site.end && self.matches(site.module, c, &check.call_after, &h));
            match later {
                Some((_, c)) => site.notes.push(format!("`{}` follows at line {}", c.callee, m.position(c.start).0)),
                None => return false,
            }
        }
        if !check.no_call_in_function.is_empty() {
            let h = self.helpers(&check.no_call_in_function, false);
            if self
                .calls_in(site.module, site.scope)
                .any(|(_, c)| self.matches(site.module, c, &check.no_call_in_function, &h))
            {
                return false;
            }
        }
        if w.twice == Some(true) && !self.twice(check, site) {
            return false;
        }
        if !check.no_call_before.is_empty() {
            let h = self.helpers(&check.no_call_before, true);
            let mut memo = HashMap::new();
            if self.preceded(site.module, site.scope, site.start, &check.no_call_before, &h, 0, &mut memo) {
                return false;
            }
        }
        if w.unprotected == Some(true) && !self.unprotected(check, site) {
            return false;
        }
        if !check.no_call.is_empty() && !self.no_call(check, site) {
            return false;
        }
        true
    }

    /// `no_call`: some chain of callers from an entry point (module-level code) to the site makes
    /// none of the calls. No entry point among the linted files: nothing can be said.
    fn no_call(&self, check: &Check, site: &mut Site) -> bool {
        let h = self.helpers(&check.no_call, false);
        let makes = |mi: usize, scope: usize| {
            self.calls_in(mi, scope).any(|(ci, c)| !self.in_except[mi][ci] && self.matches(mi, c, &check.no_call, &h))
        };
        // Depth-first over callers; a chain is cut as soon as one of its scopes makes the call.
        let mut stack = vec![(site.module, site.scope, 0usize, None::<CallRef>)];
        let mut seen = HashSet::new();
        while let Some((mi, scope, depth, via)) = stack.pop() {
            if !seen.insert((mi, scope)) || makes(mi, scope) {
                continue;
            }
            if scope == 0 {
                if let Some(r) = via {
                    let c = self.call(r);
                    let (l, _) = self.modules[r.0].position(c.start);
                    site.notes.push(format!("reached from `{}` at {}:{l}", c.callee, self.modules[r.0].path));
                }
                return true;
            }
            if depth < MAX_DEPTH {
                for r in self.callers(mi, scope) {
                    stack.push((r.0, self.call(r).scope, depth + 1, Some(r)));
                }
            }
        }
        false
    }

    /// In a `finally`/`except`, an atexit function, a signal handler, or a function the check
    /// names (`__exit__`, `tearDown`) or whose decorator it names (`fixture`).
    fn lex_protected(
        &self,
        check: &Check,
        mi: usize,
        start: usize,
        end: usize,
        scope: usize,
        via: Option<&str>,
    ) -> bool {
        let m = &self.modules[mi];
        let f = &m.scopes[scope];
        let w = &check.def.when;
        let named = scope != 0
            && (m.atexit.contains(&f.name)
                || m.handlers.contains(&f.name)
                || w.protected_functions.contains(&f.name)
                || w.protected_decorators.iter().any(|d| has_word(&f.decorators, d)));
        named || via.is_some_and(|v| v.ends_with("atexit.register")) || {
            let ctx = m.ctx(start, end);
            ctx.finally || ctx.except
        }
    }

    /// Every call of function `scope` is protected (and there is one).
    fn scope_protected(
        &self,
        check: &Check,
        mi: usize,
        scope: usize,
        depth: usize,
        memo: &mut HashMap<(usize, usize), bool>,
    ) -> bool {
        if let Some(&v) = memo.get(&(mi, scope)) {
            return v;
        }
        memo.insert((mi, scope), false); // a cycle proves nothing
        let callers = self.callers(mi, scope);
        let v = depth < MAX_DEPTH
            && !callers.is_empty()
            && callers.iter().all(|&r| {
                let c = self.call(r);
                self.lex_protected(check, r.0, c.start, c.end, c.scope, c.via.as_deref())
                    || self.scope_protected(check, r.0, c.scope, depth + 1, memo)
            });
        memo.insert((mi, scope), v);
        v
    }

    /// `unprotected`: neither this call nor any other call of the same names in its file runs on
    /// the exception path.
    fn unprotected(&self, check: &Check, site: &Site) -> bool {
        if self.lex_protected(check, site.module, site.start, site.end, site.scope, None)
            || self.scope_protected(check, site.module, site.scope, 0, &mut HashMap::new())
        {
            return false;
        }
        let h = self.helpers(&check.calls, false);
        let m = &self.modules[site.module];
        !m.calls.iter().any(|c| {
            self.matches(site.module, c, &check.calls, &h)
                && self.lex_protected(check, site.module, c.start, c.end, c.scope, c.via.as_deref())
        })
    }

    /// A call of `pats` precedes `pos` in `scope`, or precedes every call of that function.
    #[allow(clippy::too_many_arguments)]
    fn preceded(
        &self,
        mi: usize,
        scope: usize,
        pos: usize,
        pats: &[Pattern],
        h: &Helpers,
        depth: usize,
        memo: &mut HashMap<(usize, usize, usize), bool>,
    ) -> bool {
        if let Some(&v) = memo.get(&(mi, scope, pos)) {
            return v;
        }
        memo.insert((mi, scope, pos), false);
        let v = self.calls_in(mi, scope).any(|(_, c)| c.end <= pos && self.matches(mi, c, pats, h)) || {
            let callers = self.callers(mi, scope);
            depth < MAX_DEPTH
                && !callers.is_empty()
                && callers.iter().all(|&r| {
                    let c = self.call(r);
                    self.preceded(r.0, c.scope, c.start, pats, h, depth + 1, memo)
                })
        };
        memo.insert((mi, scope, pos), v);
        v
    }

    fn call_before(&self, check: &Check, site: &mut Site) -> bool {
        let m = &self.modules[site.module];
        let Some((_, first)) = self
            .calls_in(site.module, site.scope)
            .filter(|(_, c)| c.end <= site.start && Self::direct_any(&check.call_before, c))
            .last()
        else {
            return false;
        };
        site.notes.push(format!("after `{}` at line {}", first.callee, m.position(first.start).0));
        if check.call_between.is_empty() {
            return true;
        }
        let h = self.helpers(&check.call_between, false);
        match self.calls_in(site.module, site.scope).find(|(_, c)| {
            c.start >= first.end && c.end <= site.start && self.matches(site.module, c, &check.call_between, &h)
        }) {
            Some((_, b)) => {
                site.notes.push(format!("with `{}` at line {} in between", b.callee, m.position(b.start).0));
                true
            }
            None => false,
        }
    }

    /// A call under the guard, or of functions whose own calls of `pats` are all guarded.
    fn guarded_call(&self, mi: usize, c: &Call, pats: &[Pattern], h: &Helpers, g: &regex::Regex, depth: usize) -> bool {
        if self.modules[mi].guarded(c.start, c.end, g) {
            return true;
        }
        if depth >= MAX_DEPTH || Self::direct_any(pats, c) {
            return false;
        }
        let targets: Vec<&Helper> =
            h.by_name.get(&c.last).into_iter().flatten().filter(|x| self.resolves(mi, c, x)).collect();
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
        let Some(me) = site.call.map(|ci| &m.calls[ci]) else { return false };
        let here = m.ctx(site.start, site.end);
        if here.in_loop {
            return false;
        }
        let h = self.helpers(&check.calls, false);
        for (_, a) in self.calls_in(site.module, site.scope) {
            if a.end > site.start || !self.matches(site.module, a, &check.calls, &h) {
                continue;
            }
            if Self::direct_any(&check.calls, a) && a.args != me.args {
                continue;
            }
            let actx = m.ctx(a.start, a.end);
            let exclusive = actx.arms.iter().any(|&(s, arm)| {
                here.arms.iter().any(|&(s2, arm2)| s == s2 && arm != arm2 && arm != FINALLY_ARM && arm2 != FINALLY_ARM)
            });
            if actx.in_loop
                || exclusive
                || m.exits_before(a.start, a.end, site.start)
                || check.guard.as_ref().is_some_and(|g| self.guarded_call(site.module, a, &check.calls, &h, g, 0))
            {
                continue;
            }
            site.notes.push(format!("`{}` at line {} already ran", a.callee, m.position(a.start).0));
            return true;
        }
        false
    }
}
