//! The evaluator: each check's sites, then its conditions, over all linted files at once (a call
//! of a function defined in any of them counts as the calls that function makes).

use std::collections::HashSet;

use streaming_iterator::StreamingIterator;

use super::check::{Check, Pattern};
use super::python::{Call, Module, FINALLY_ARM};

/// How far calls are followed through callers (deeper chains are not looked at).
const MAX_DEPTH: usize = 12;

pub struct Program {
    pub modules: Vec<Module>,
}

/// A function of the linted files whose body makes a matching call (directly or through another).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Wrapper {
    module: usize,
    name: String,
    is_method: bool,
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

impl Program {
    pub fn new(mut modules: Vec<Module>) -> Program {
        // Function names passed to other calls count as calls of those functions.
        let defined: HashSet<String> = modules
            .iter()
            .flat_map(|m| m.scopes.iter().skip(1).filter(|s| !s.is_method).map(|s| s.name.clone()))
            .collect();
        for m in &mut modules {
            let refs = std::mem::take(&mut m.refs);
            for (name, r) in refs {
                // A signal handler runs only on that signal, not on the paths the checks follow.
                let handler = r.via.as_deref().is_some_and(|v| v == "signal.signal" || v == "signal");
                if defined.contains(&name) && !handler {
                    m.calls.push(r);
                }
            }
            m.calls.sort_by_key(|c| c.start);
        }
        Program { modules }
    }

    fn call(&self, r: CallRef) -> &Call {
        &self.modules[r.0].calls[r.1]
    }

    fn direct(p: &Pattern, c: &Call) -> bool {
        if c.last != p.last || (p.method_only && !c.attr) || (p.no_positional && c.positional > 0) {
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

    /// Functions that make a call matching `pats` on their normal path (not in an `except`).
    fn wrappers(&self, pats: &[Pattern]) -> HashSet<Wrapper> {
        // A method call (`.destroy`) depends on its receiver, which a helper's body does not show.
        let pats: Vec<Pattern> = pats.iter().filter(|p| !p.method_only).cloned().collect();
        let pats = &pats[..];
        let mut w = HashSet::new();
        loop {
            let mut grew = false;
            for (mi, m) in self.modules.iter().enumerate() {
                for c in &m.calls {
                    if c.scope == 0 || !self.matches(mi, c, pats, &w) || m.ctx(c.start, c.end).except {
                        continue;
                    }
                    let s = &m.scopes[c.scope];
                    grew |= w.insert(Wrapper { module: mi, name: s.name.clone(), is_method: s.is_method });
                }
            }
            if !grew {
                return w;
            }
        }
    }

    /// Functions whose last call (outside other calls' arguments) matches `pats` or is one of
    /// these: calling one ends with that call, as a barrier helper does.
    fn tail_wrappers(&self, pats: &[Pattern]) -> HashSet<Wrapper> {
        let mut w = HashSet::new();
        loop {
            let mut grew = false;
            for (mi, m) in self.modules.iter().enumerate() {
                for (si, s) in m.scopes.iter().enumerate().skip(1) {
                    let top: Vec<&Call> = m.calls.iter().filter(|c| c.scope == si && c.via.is_none()).collect();
                    let last = top
                        .iter()
                        .filter(|c| !top.iter().any(|o| o.start < c.start && c.end <= o.end))
                        .max_by_key(|c| c.end);
                    if last.is_some_and(|c| self.matches(mi, c, pats, &w)) {
                        grew |= w.insert(Wrapper { module: mi, name: s.name.clone(), is_method: s.is_method });
                    }
                }
            }
            if !grew {
                return w;
            }
        }
    }

    fn resolves(&self, mi: usize, c: &Call, module: usize, name: &str, is_method: bool) -> bool {
        c.last == name && (!is_method || c.attr) && (mi == module || !self.modules[mi].defines(name, is_method))
    }

    fn matches(&self, mi: usize, c: &Call, pats: &[Pattern], w: &HashSet<Wrapper>) -> bool {
        (c.via.is_none() && pats.iter().any(|p| Self::direct(p, c)))
            || w.iter().any(|x| self.resolves(mi, c, x.module, &x.name, x.is_method))
    }

    /// Calls (and references) of function `scope` of module `mi`.
    fn callers(&self, mi: usize, scope: usize) -> Vec<CallRef> {
        if scope == 0 {
            return Vec::new();
        }
        let s = &self.modules[mi].scopes[scope];
        let mut out = Vec::new();
        for (mj, m) in self.modules.iter().enumerate() {
            for (ci, c) in m.calls.iter().enumerate() {
                if self.resolves(mj, c, mi, &s.name, s.is_method) && !(mj == mi && c.scope == scope) {
                    out.push((mj, ci));
                }
            }
        }
        out
    }

    fn calls_in(&self, mi: usize, scope: usize) -> impl Iterator<Item = (usize, &Call)> {
        self.modules[mi].calls.iter().enumerate().filter(move |(_, c)| c.scope == scope)
    }

    /// The sites of a check, before its conditions.
    pub fn sites(&self, check: &Check) -> Vec<Site> {
        let mut out = Vec::new();
        for (mi, m) in self.modules.iter().enumerate() {
            if !check.calls.is_empty() {
                for (ci, c) in m.calls.iter().enumerate() {
                    if c.via.is_none() && check.calls.iter().any(|p| Self::direct(p, c)) {
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

    /// Whether every condition of the check holds at `site` (adding notes to it).
    pub fn holds(&self, check: &Check, site: &mut Site) -> bool {
        let m = &self.modules[site.module];
        let call = site.call.map(|ci| &m.calls[ci]);
        let w = &check.def.when;
        let ctx = m.ctx(site.start, site.end);
        if check.imports.as_ref().is_some_and(|re| !re.is_match(&m.imports)) {
            return false;
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
        if check.in_branch.as_ref().is_some_and(|re| !ctx.conds.iter().any(|c| re.is_match(c))) {
            return false;
        }
        if w.in_except.is_some_and(|e| e != ctx.except) {
            return false;
        }
        if check.guard.as_ref().is_some_and(|g| m.guarded(site.start, site.end, g)) {
            return false;
        }
        if !check.no_call.is_empty() && !self.no_call(check, site) {
            return false;
        }
        if w.unprotected == Some(true) && !self.unprotected(check, site) {
            return false;
        }
        if !check.no_call_before.is_empty() {
            let wr = self.tail_wrappers(&check.no_call_before);
            if self.preceded(site.module, site.scope, site.start, &check.no_call_before, &wr, 0) {
                return false;
            }
        }
        if !check.call_before.is_empty() && !self.call_before(check, site) {
            return false;
        }
        if !check.call_after.is_empty() {
            let wr = self.wrappers(&check.call_after);
            let later = self
                .calls_in(site.module, site.scope)
                .find(|(_, c)| c.start >= site.end && self.matches(site.module, c, &check.call_after, &wr));
            match later {
                Some((_, c)) => site.notes.push(format!("`{}` follows at line {}", c.callee, m.position(c.start).0)),
                None => return false,
            }
        }
        if !check.no_call_in_function.is_empty() {
            let wr = self.wrappers(&check.no_call_in_function);
            if self
                .calls_in(site.module, site.scope)
                .any(|(_, c)| self.matches(site.module, c, &check.no_call_in_function, &wr))
            {
                return false;
            }
        }
        if w.twice == Some(true) && !self.twice(check, site) {
            return false;
        }
        true
    }

    /// `no_call`: some chain of callers from an entry point (module-level code) to the site makes
    /// none of the calls. No entry point among the linted files: nothing can be said.
    fn no_call(&self, check: &Check, site: &mut Site) -> bool {
        let wr = self.wrappers(&check.no_call);
        let makes = |mi: usize, scope: usize| {
            let m = &self.modules[mi];
            self.calls_in(mi, scope)
                .any(|(_, c)| self.matches(mi, c, &check.no_call, &wr) && !m.ctx(c.start, c.end).except)
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
                    let c = self.call(r);
                    stack.push((r.0, c.scope, depth + 1, Some(r)));
                }
            }
        }
        false
    }

    fn lex_protected(&self, mi: usize, start: usize, end: usize, scope: usize, via: Option<&str>) -> bool {
        let m = &self.modules[mi];
        let ctx = m.ctx(start, end);
        let f = &m.scopes[scope];
        ctx.finally
            || ctx.except
            || (scope != 0
                && (f.name == "__exit__"
                    || f.name == "__aexit__"
                    || m.atexit.contains(&f.name)
                    || m.handlers.contains(&f.name)))
            || via.is_some_and(|v| v.ends_with("atexit.register"))
    }

    fn protected(&self, mi: usize, start: usize, end: usize, scope: usize, via: Option<&str>, depth: usize) -> bool {
        if self.lex_protected(mi, start, end, scope, via) {
            return true;
        }
        let callers = self.callers(mi, scope);
        depth < MAX_DEPTH
            && !callers.is_empty()
            && callers.iter().all(|&r| {
                let c = self.call(r);
                self.protected(r.0, c.start, c.end, c.scope, c.via.as_deref(), depth + 1)
            })
    }

    /// `unprotected`: neither this call nor any other call of the same names in its file runs on
    /// the exception path.
    fn unprotected(&self, check: &Check, site: &Site) -> bool {
        if self.protected(site.module, site.start, site.end, site.scope, None, 0) {
            return false;
        }
        let wr = self.wrappers(&check.calls);
        let m = &self.modules[site.module];
        !m.calls.iter().any(|c| {
            self.matches(site.module, c, &check.calls, &wr)
                && self.lex_protected(site.module, c.start, c.end, c.scope, c.via.as_deref())
        })
    }

    /// A call of `pats` precedes `pos` in `scope`, or precedes every call of that function.
    fn preceded(
        &self,
        mi: usize,
        scope: usize,
        pos: usize,
        pats: &[Pattern],
        wr: &HashSet<Wrapper>,
        depth: usize,
    ) -> bool {
        if self.calls_in(mi, scope).any(|(_, c)| c.end <= pos && self.matches(mi, c, pats, wr)) {
            return true;
        }
        let callers = self.callers(mi, scope);
        depth < MAX_DEPTH
            && !callers.is_empty()
            && callers.iter().all(|&r| {
                let c = self.call(r);
                self.preceded(r.0, c.scope, c.start, pats, wr, depth + 1)
            })
    }

    fn call_before(&self, check: &Check, site: &mut Site) -> bool {
        let m = &self.modules[site.module];
        let Some((_, first)) = self
            .calls_in(site.module, site.scope)
            .filter(|(_, c)| {
                c.end <= site.start && c.via.is_none() && check.call_before.iter().any(|p| Self::direct(p, c))
            })
            .last()
        else {
            return false;
        };
        site.notes.push(format!("after `{}` at line {}", first.callee, m.position(first.start).0));
        if check.call_between.is_empty() {
            return true;
        }
        let wr = self.wrappers(&check.call_between);
        match self.calls_in(site.module, site.scope).find(|(_, c)| {
            c.start >= first.end && c.end <= site.start && self.matches(site.module, c, &check.call_between, &wr)
        }) {
            Some((_, b)) => {
                site.notes.push(format!("with `{}` at line {} in between", b.callee, m.position(b.start).0));
                true
            }
            None => false,
        }
    }

    /// A call under the guard, or of functions whose own calls of `pats` are all guarded.
    fn guarded_call(
        &self,
        mi: usize,
        c: &Call,
        pats: &[Pattern],
        wr: &HashSet<Wrapper>,
        g: &regex::Regex,
        depth: usize,
    ) -> bool {
        if self.modules[mi].guarded(c.start, c.end, g) {
            return true;
        }
        if depth >= MAX_DEPTH || (c.via.is_none() && pats.iter().any(|p| Self::direct(p, c))) {
            return false;
        }
        let targets: Vec<&Wrapper> =
            wr.iter().filter(|x| self.resolves(mi, c, x.module, &x.name, x.is_method)).collect();
        !targets.is_empty()
            && targets.iter().all(|x| {
                let wm = &self.modules[x.module];
                wm.calls
                    .iter()
                    .filter(|k| {
                        let s = &wm.scopes[k.scope];
                        k.scope != 0 && s.name == x.name && s.is_method == x.is_method
                    })
                    .filter(|k| self.matches(x.module, k, pats, wr))
                    .all(|k| self.guarded_call(x.module, k, pats, wr, g, depth + 1))
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
        let wr = self.wrappers(&check.calls);
        for (_, a) in self.calls_in(site.module, site.scope) {
            if a.end > site.start || !self.matches(site.module, a, &check.calls, &wr) {
                continue;
            }
            let direct = a.via.is_none() && check.calls.iter().any(|p| Self::direct(p, a));
            if direct && a.args != me.args {
                continue;
            }
            let actx = m.ctx(a.start, a.end);
            let exclusive = actx.arms.iter().any(|&(s, arm)| {
                here.arms.iter().any(|&(s2, arm2)| s == s2 && arm != arm2 && arm != FINALLY_ARM && arm2 != FINALLY_ARM)
            });
            if actx.in_loop
                || exclusive
                || m.exits_before(a.start, a.end, site.start)
                || check.guard.as_ref().is_some_and(|g| self.guarded_call(site.module, a, &check.calls, &wr, g, 0))
            {
                continue;
            }
            site.notes.push(format!("`{}` at line {} already ran", a.callee, m.position(a.start).0));
            return true;
        }
        false
    }
}
