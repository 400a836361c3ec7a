//! Python sources through tree-sitter: the calls, functions, assignments and statement context the
//! checks need, computed once per file (the evaluator then answers each site in constant or
//! logarithmic time). Everything the checks ask of the tree is taken during the parse, so the tree
//! is dropped before the next file is parsed: a thousand files' trees do not stay in memory.

use std::collections::{HashMap, HashSet};

use regex::Regex;
use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, Parser};

use super::check::Check;
use super::rank;

/// A function (or the module itself, scope 0) that calls belong to.
#[derive(Debug, Clone)]
pub struct Scope {
    pub name: String,
    /// Defined directly in a class body: called as `x.name()`.
    pub is_method: bool,
    /// That class's name.
    pub class: Option<String>,
    /// Its decorators as written (`@pytest.fixture`).
    pub decorators: String,
    /// Its parameters and their defaults as written (`backend`, `'gloo'`).
    pub params: Vec<(String, Option<String>)>,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone)]
pub struct Call {
    /// The callee as written, without whitespace (`torch.distributed.destroy_process_group`).
    pub callee: String,
    /// Its last name (`destroy_process_group`).
    pub last: String,
    /// `x.last(...)` rather than `last(...)`.
    pub attr: bool,
    pub positional: usize,
    /// Keyword arguments: name and value as written, and the value's byte range.
    /// (Boxed slices: a Call is made for every call of every file.)
    pub keywords: Box<[(String, String)]>,
    pub keyword_spans: Box<[(usize, usize)]>,
    /// The first positional argument's byte range.
    pub first_arg: Option<(usize, usize)>,
    /// Passes `**kwargs` (its keywords are unknown).
    pub splat_kw: bool,
    /// The argument list's byte range (`Module::args`: its text).
    pub args: (usize, usize),
    pub start: usize,
    pub end: usize,
    /// Where the callee's last name is written (for renaming edits).
    pub name_start: usize,
    pub scope: usize,
    /// A function passed by name to another call (`spawn(worker)`, `atexit.register(f)`): the
    /// callee of that call. Such a reference counts as a call of the function.
    pub via: Option<Box<str>>,
    /// The call is a whole expression statement (its value is dropped).
    pub statement: bool,
    /// Its statement context (an index into `Module::ctxs`).
    pub ctx: u32,
    /// Bit i: under `Wanted::guards[i]` (see `Module::is_guarded`).
    pub guarded: u64,
    /// The innermost block of its function with a `return` or `raise` after the call's statement.
    /// (u32 as tree-sitter's own offsets: a Call is made for every call of every file.)
    pub exit_block: Option<(u32, u32)>,
}

/// A site that is no call: a statement of a kind the checks ask for, or a query's capture.
#[derive(Debug, Clone, Copy)]
pub struct Stmt {
    pub start: usize,
    pub end: usize,
    pub scope: usize,
    pub ctx: u32,
    pub guarded: u64,
}

/// What the checks will ask of a file beyond its calls, known before it is parsed: guard regexes
/// (`unless_guarded`), statement kinds and queries of their sites.
pub struct Wanted<'a> {
    pub guards: Vec<&'a Regex>,
    pub kinds: Vec<&'a str>,
    pub queries: Vec<(&'a str, &'a tree_sitter::Query)>,
}

impl<'a> Wanted<'a> {
    pub fn of(checks: &'a [Check]) -> Wanted<'a> {
        let mut w = Wanted { guards: Vec::new(), kinds: Vec::new(), queries: Vec::new() };
        for c in checks {
            if let Some(g) = &c.guard {
                if !w.guards.iter().any(|x| x.as_str() == g.as_str()) {
                    w.guards.push(g);
                }
            }
            if let Some(k) = &c.statement_kind {
                if !w.kinds.contains(&k.as_str()) {
                    w.kinds.push(k);
                }
            } else if let (Some(q), Some(text)) = (&c.query, &c.def.site.query) {
                if !w.queries.iter().any(|(t, _)| t == text) {
                    w.queries.push((text, q));
                }
            }
        }
        assert!(w.guards.len() <= 64, "at most 64 distinct unless_guarded regexes");
        w
    }
}

/// An `if`/`elif` condition on the way from a site to its function, with the branch taken.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cond {
    pub start: usize,
    pub end: usize,
    /// The site is in the branch where the condition holds (false: an `elif`/`else` past it).
    pub positive: bool,
}

/// Where a site sits inside its function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Ctx {
    pub finally: bool,
    pub except: bool,
    pub in_loop: bool,
    /// Conditions of the enclosing `if`/`elif`/`else` arms, innermost first.
    pub conds: Vec<Cond>,
    /// (branching statement, arm): arms of one `if`, or a `try` body and its handlers, exclude each other.
    pub arms: Vec<(usize, u32)>,
    /// The innermost enclosing `except` clause (start, end) and its `try` statement (start, end).
    pub handler: Option<((usize, usize), (usize, usize))>,
    /// The innermost enclosing loop's body (start, end).
    pub loop_body: Option<(usize, usize)>,
    /// The `try` statement (start, end) of the innermost enclosing `finally` clause.
    pub finally_try: Option<(usize, usize)>,
}

pub const FINALLY_ARM: u32 = u32::MAX;

/// `name = value` (or `a.b = value`) as written, in a function or at module level.
#[derive(Debug, Clone)]
pub struct Assign {
    pub scope: usize,
    pub target: String,
    pub value: String,
    pub start: usize,
}

pub struct Module {
    pub path: String,
    pub src: String,
    line_starts: Vec<usize>,
    pub scopes: Vec<Scope>,
    pub calls: Vec<Call>,
    /// The distinct statement contexts of calls and sites (most calls share one with others).
    ctxs: Vec<Ctx>,
    /// The rank analysis of each condition in a context, by (start, end, positive).
    conds: HashMap<(usize, usize, bool), Vec<rank::Part>>,
    /// `Wanted::guards` as written: bit i of `guarded` is the i-th.
    guards: Vec<String>,
    /// The text of every import statement.
    pub imports: String,
    /// Every identifier named by an import statement (`from a.b import c as d`: a, b, c, d).
    pub import_words: HashSet<String>,
    /// Modules imported with `from m import *` (their last dotted name).
    pub star_imports: Vec<String>,
    /// Functions registered with `atexit.register(f)` or `@atexit.register`.
    pub atexit: HashSet<String>,
    /// Functions installed with `signal.signal(sig, f)` (or `self.f`): an exit path of their own.
    pub handlers: HashSet<String>,
    pub assigns: Vec<Assign>,
    /// Classes defined in the file.
    pub classes: HashSet<String>,
    /// Statements of the wanted kinds (`return_statement`): the sites of simple queries.
    pub statements: HashMap<&'static str, Vec<Stmt>>,
    /// The captures `@site` of the wanted queries, by query text.
    pub query_sites: HashMap<String, Vec<Stmt>>,
    /// Function names passed by name to a call (`(name, via)`), resolved into `calls` once all
    /// files are known.
    pub refs: Vec<Ref>,
}

/// A name passed to call `call` (`spawn(worker)`), at `start..end`.
#[derive(Debug, Clone)]
pub struct Ref {
    pub name: String,
    pub start: usize,
    pub end: usize,
    pub call: usize,
}

#[derive(Debug)]
pub struct SyntaxError {
    pub line: u64,
    pub column: u64,
    pub text: String,
}

/// Parse `src` and take what the checks need (`want`: see `Wanted::of`); the tree is dropped.
pub fn parse(path: &str, src: String, want: &Wanted) -> Result<Module, SyntaxError> {
    let mut parser = Parser::new();
    parser.set_language(&tree_sitter_python::LANGUAGE.into()).expect("the grammar matches the tree-sitter version");
    let tree = parser.parse(&src, None).ok_or(SyntaxError { line: 1, column: 1, text: "the parser gave up".into() })?;
    let root = tree.root_node();
    if root.has_error() {
        let bad = first_error(root).unwrap_or(root);
        let p = bad.start_position();
        let line = src.lines().nth(p.row).unwrap_or("").trim_end();
        // tree-sitter-python's view: a syntax error, or (rarely) syntax its grammar lacks.
        let what = if bad.is_missing() { format!("missing `{}`", bad.kind()) } else { "syntax error".into() };
        return Err(SyntaxError {
            line: p.row as u64 + 1,
            column: p.column as u64 + 1,
            text: format!("{what}: {line}"),
        });
    }
    let mut line_starts = vec![0];
    line_starts.extend(memchr::memchr_iter(b'\n', src.as_bytes()).map(|i| i + 1));
    let mut m = Module {
        path: path.to_string(),
        scopes: vec![Scope {
            name: "<module>".into(),
            is_method: false,
            class: None,
            decorators: String::new(),
            params: Vec::new(),
            start: 0,
            end: src.len(),
        }],
        calls: Vec::new(),
        ctxs: Vec::new(),
        conds: HashMap::new(),
        guards: want.guards.iter().map(|g| g.as_str().to_string()).collect(),
        imports: String::new(),
        import_words: HashSet::new(),
        star_imports: Vec::new(),
        atexit: HashSet::new(),
        handlers: HashSet::new(),
        assigns: Vec::new(),
        classes: HashSet::new(),
        statements: HashMap::new(),
        query_sites: HashMap::new(),
        refs: Vec::new(),
        line_starts,
        src: String::new(),
    };
    let mut f = Facts {
        want,
        src: &src,
        root,
        ctx_ids: HashMap::new(),
        ctx_guard: Vec::new(),
        last_exit: HashMap::new(),
        exit_ifs: HashMap::new(),
        scope_by_start: HashMap::new(),
    };
    walk(&src, root, &mut m, &mut f);
    for (q_text, q) in &want.queries {
        let idx = q.capture_index_for_name("site").expect("checked at load");
        let mut spans = Vec::new();
        let mut cur = tree_sitter::QueryCursor::new();
        let mut it = cur.matches(q, root, src.as_bytes());
        while let Some(mat) = it.next() {
            spans.extend(mat.captures.iter().filter(|c| c.index == idx).map(|c| c.node.byte_range()));
        }
        let mut out = Vec::new();
        for r in spans {
            let node = root.descendant_for_byte_range(r.start, r.end).unwrap_or(root);
            let mut anc = Vec::new();
            let mut p = node.parent();
            while let Some(x) = p {
                anc.push(x);
                p = x.parent();
            }
            anc.reverse();
            let scope = anc
                .iter()
                .rev()
                .find(|x| x.kind() == "function_definition")
                .map_or(0, |x| f.scope_by_start.get(&x.start_byte()).copied().unwrap_or(0));
            let (ctx, guarded, _) = f.of(&mut m, &anc, node);
            out.push(Stmt { start: r.start, end: r.end, scope, ctx, guarded });
        }
        m.query_sites.insert(q_text.to_string(), out);
    }
    drop(f);
    drop(tree);
    drop(parser);
    let mut m = m.compact();
    m.src = src;
    Ok(m)
}

/// What the walk remembers while it takes each site's facts from its ancestors.
struct Facts<'a, 'w> {
    want: &'a Wanted<'w>,
    src: &'a str,
    root: Node<'a>,
    ctx_ids: HashMap<Ctx, u32>,
    /// Per context: the guards one of its conditions matches.
    ctx_guard: Vec<u64>,
    /// Per block (node id): the start of its last `return`/`raise` statement.
    last_exit: HashMap<usize, Option<usize>>,
    /// Per block or module (node id): its `if <guard>: ... return` statements, (end, guards).
    exit_ifs: HashMap<usize, Vec<(usize, u64)>>,
    scope_by_start: HashMap<usize, usize>,
}

impl<'a> Facts<'a, '_> {
    fn intern(&mut self, m: &mut Module, ctx: Ctx) -> u32 {
        if let Some(&i) = self.ctx_ids.get(&ctx) {
            return i;
        }
        for c in &ctx.conds {
            m.conds.entry((c.start, c.end, c.positive)).or_insert_with(|| {
                let node = self.root.descendant_for_byte_range(c.start, c.end).unwrap_or(self.root);
                rank::parts(self.src, node, c.positive)
            });
        }
        let mut mask = 0u64;
        for (i, g) in self.want.guards.iter().enumerate() {
            if ctx.conds.iter().any(|c| g.is_match(&self.src[c.start..c.end])) {
                mask |= 1 << i;
            }
        }
        let i = m.ctxs.len() as u32;
        m.ctxs.push(ctx.clone());
        self.ctx_ids.insert(ctx, i);
        self.ctx_guard.push(mask);
        i
    }

    /// The context, guards and exit block of `n`, whose ancestors are `anc` (the root first).
    fn of(&mut self, m: &mut Module, anc: &[Node<'a>], n: Node<'a>) -> (u32, u64, Option<(u32, u32)>) {
        let id = self.intern(m, ctx_of(anc, n));
        let mut guarded = self.ctx_guard[id as usize];
        let mut exit_block = None;
        for i in (0..anc.len()).rev() {
            let p = anc[i];
            let cur = anc.get(i + 1).copied().unwrap_or(n);
            let kind = p.kind();
            if matches!(kind, "function_definition" | "lambda") {
                break;
            }
            if kind == "block" && exit_block.is_none() && self.last_exit(p).is_some_and(|s| s >= cur.end_byte()) {
                exit_block = Some((p.start_byte() as u32, p.end_byte() as u32));
            }
            if !self.want.guards.is_empty() && (kind == "block" || kind == "module") {
                guarded |= self.exit_ifs(p).iter().filter(|(e, _)| *e <= cur.start_byte()).fold(0, |a, (_, g)| a | g);
            }
        }
        (id, guarded, exit_block)
    }

    fn last_exit(&mut self, block: Node) -> Option<usize> {
        *self.last_exit.entry(block.id()).or_insert_with(|| {
            let mut c = block.walk();
            let last = block
                .named_children(&mut c)
                .filter(|s| matches!(s.kind(), "return_statement" | "raise_statement"))
                .map(|s| s.start_byte())
                .max();
            last
        })
    }

    fn exit_ifs(&mut self, block: Node) -> &[(usize, u64)] {
        let (src, guards) = (self.src, &self.want.guards);
        self.exit_ifs.entry(block.id()).or_insert_with(|| {
            let mut c = block.walk();
            let mut out = Vec::new();
            for s in block.named_children(&mut c).filter(|s| s.kind() == "if_statement") {
                let Some(cond) = s.child_by_field_name("condition") else { continue };
                if !s.child_by_field_name("consequence").is_some_and(|b| exits(b)) {
                    continue;
                }
                let mask = guards
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.is_match(text(src, cond)))
                    .fold(0u64, |a, (i, _)| a | 1 << i);
                if mask != 0 {
                    out.push((s.end_byte(), mask));
                }
            }
            out
        })
    }
}

/// The first error or missing node, in source order (iterative: nesting depth is the input's).
fn first_error(root: Node) -> Option<Node> {
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.is_error() || n.is_missing() {
            return Some(n);
        }
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).filter(|k| k.has_error()).collect();
        stack.extend(kids.into_iter().rev());
    }
    None
}

pub fn text<'a>(src: &'a str, n: Node) -> &'a str {
    &src[n.byte_range()]
}

pub fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every node in source order, with the function it belongs to (a tree cursor: no allocation
/// per node, and nesting depth is the input's).
fn walk<'a>(src: &str, root: Node<'a>, m: &mut Module, f: &mut Facts<'a, '_>) {
    let mut cur = root.walk();
    // (depth of the def, its scope): the functions the cursor is inside.
    let mut open: Vec<(usize, usize)> = Vec::new();
    // The cursor's ancestors, the root first: a site's context is read from them (`parent()`
    // walks down from the root each time).
    let mut anc: Vec<Node<'a>> = Vec::new();
    loop {
        let n = cur.node();
        let outer = open.last().map_or(0, |s| s.1);
        let scope = visit(src, n, outer, &anc, m, f);
        if scope != outer {
            open.push((anc.len(), scope));
        }
        if cur.goto_first_child() {
            anc.push(n);
            continue;
        }
        loop {
            while open.last().is_some_and(|s| s.0 == anc.len()) {
                open.pop();
            }
            if cur.goto_next_sibling() {
                break;
            }
            if !cur.goto_parent() {
                return;
            }
            anc.pop();
        }
    }
}

/// What one node adds to the module; the scope its children belong to.
fn visit<'a>(src: &str, n: Node<'a>, outer: usize, anc: &[Node<'a>], m: &mut Module, f: &mut Facts<'a, '_>) -> usize {
    let mut scope = outer;
    if n.kind().ends_with("_statement") && f.want.kinds.contains(&n.kind()) {
        let (ctx, guarded, _) = f.of(m, anc, n);
        let st = Stmt { start: n.start_byte(), end: n.end_byte(), scope: outer, ctx, guarded };
        m.statements.entry(n.kind()).or_default().push(st);
    }
    match n.kind() {
        "function_definition" => {
            let name = n.child_by_field_name("name").map(|x| text(src, x).to_string()).unwrap_or_default();
            // A method's def sits in a class body block (maybe under a decorator).
            let mut p = n.parent();
            let mut decorators = String::new();
            if let Some(dec) = p.filter(|x| x.kind() == "decorated_definition") {
                let mut c = dec.walk();
                for d in dec.children(&mut c).filter(|d| d.kind() == "decorator") {
                    decorators.push_str(text(src, d));
                    decorators.push('\n');
                    if squash(text(src, d)).starts_with("@atexit.register") {
                        m.atexit.insert(name.clone());
                    }
                }
                p = dec.parent();
            }
            let class = p
                .filter(|b| b.kind() == "block")
                .and_then(|b| b.parent())
                .filter(|c| c.kind() == "class_definition")
                .and_then(|c| c.child_by_field_name("name"))
                .map(|x| text(src, x).to_string());
            let is_method = class.is_some();
            let params = n.child_by_field_name("parameters").map(|ps| params(src, ps)).unwrap_or_default();
            m.scopes.push(Scope {
                name,
                is_method,
                class,
                decorators,
                params,
                start: n.start_byte(),
                end: n.end_byte(),
            });
            scope = m.scopes.len() - 1;
            f.scope_by_start.insert(n.start_byte(), scope);
        }
        "import_statement" | "import_from_statement" => import(src, n, m),
        "class_definition" => {
            if let Some(name) = n.child_by_field_name("name") {
                m.classes.insert(text(src, name).to_string());
            }
        }
        "assignment" => {
            if let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) {
                if matches!(l.kind(), "identifier" | "attribute") {
                    m.assigns.push(Assign {
                        scope,
                        target: squash(text(src, l)),
                        value: text(src, r).to_string(),
                        start: n.start_byte(),
                    });
                }
            }
        }
        "call" => call(src, n, scope, anc, m, f),
        _ => {}
    }
    scope
}

fn params(src: &str, ps: Node) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut c = ps.walk();
    for p in ps.named_children(&mut c) {
        match p.kind() {
            "identifier" => out.push((text(src, p).to_string(), None)),
            "default_parameter" | "typed_default_parameter" => {
                let name = p.child_by_field_name("name").map(|x| text(src, x).to_string()).unwrap_or_default();
                let value = p.child_by_field_name("value").map(|x| text(src, x).to_string());
                out.push((name, value));
            }
            "typed_parameter" => {
                let mut c2 = p.walk();
                let id = p.named_children(&mut c2).find(|x| x.kind() == "identifier");
                if let Some(id) = id {
                    out.push((text(src, id).to_string(), None));
                }
            }
            _ => {}
        }
    }
    out
}

fn import(src: &str, n: Node, m: &mut Module) {
    let t = text(src, n);
    m.imports.push_str(t);
    m.imports.push('\n');
    for w in t.split(|c: char| !is_ident_char(c)).filter(|w| !w.is_empty()) {
        m.import_words.insert(w.to_string());
    }
    if n.kind() == "import_from_statement" {
        let mut c = n.walk();
        if n.children(&mut c).any(|k| k.kind() == "wildcard_import") {
            if let Some(module) = n.child_by_field_name("module_name") {
                let name = text(src, module).trim_start_matches('.');
                let last = name.rsplit('.').next().unwrap_or("");
                if !last.is_empty() {
                    m.star_imports.push(last.to_string());
                }
            }
        }
    }
}

fn call<'a>(src: &str, n: Node<'a>, scope: usize, anc: &[Node<'a>], m: &mut Module, facts: &mut Facts<'a, '_>) {
    let Some(f) = n.child_by_field_name("function") else { return };
    let (last, attr, name_start) = match f.kind() {
        "identifier" => (text(src, f).to_string(), false, f.start_byte()),
        "attribute" => {
            // `", ".join(...)` and friends: a method of a literal is never one of ours.
            if f.child_by_field_name("object").is_some_and(|o| {
                matches!(o.kind(), "string" | "concatenated_string" | "integer" | "float" | "list" | "dict" | "tuple")
            }) {
                return;
            }
            match f.child_by_field_name("attribute") {
                Some(a) => (text(src, a).to_string(), true, a.start_byte()),
                None => return,
            }
        }
        _ => return,
    };
    let callee = squash(text(src, f));
    let (ctx, guarded, exit_block) = facts.of(m, anc, n);
    let statement = anc.last().is_some_and(|p| p.kind() == "expression_statement" && p.named_child_count() == 1);
    let mut c = Call {
        callee: callee.clone(),
        last,
        attr,
        positional: 0,
        keywords: Box::default(),
        keyword_spans: Box::default(),
        first_arg: None,
        splat_kw: false,
        args: (0, 0),
        start: n.start_byte(),
        end: n.end_byte(),
        name_start,
        scope,
        via: None,
        statement,
        ctx,
        guarded,
        exit_block,
    };
    let mut refs = Vec::new();
    let (mut keywords, mut spans) = (Vec::new(), Vec::new());
    if let Some(args) = n.child_by_field_name("arguments") {
        c.args = (args.start_byte(), args.end_byte());
        let mut cur = args.walk();
        for a in args.named_children(&mut cur) {
            match a.kind() {
                "keyword_argument" => {
                    let k = a.child_by_field_name("name").map(|x| text(src, x).to_string()).unwrap_or_default();
                    let v = a.child_by_field_name("value");
                    if let Some(v) = v.filter(|v| v.kind() == "identifier") {
                        refs.push((text(src, v).to_string(), v));
                    }
                    keywords.push((k, v.map(|v| text(src, v).trim().to_string()).unwrap_or_default()));
                    spans.push(v.map_or((a.end_byte(), a.end_byte()), |v| (v.start_byte(), v.end_byte())));
                }
                "dictionary_splat" => c.splat_kw = true,
                "comment" => {}
                kind => {
                    if c.positional == 0 {
                        c.first_arg = Some((a.start_byte(), a.end_byte()));
                    }
                    if kind == "identifier" {
                        refs.push((text(src, a).to_string(), a));
                    }
                    c.positional += 1;
                }
            }
        }
    }
    c.keywords = keywords.into_boxed_slice();
    c.keyword_spans = spans.into_boxed_slice();
    if callee == "atexit.register" {
        if let Some((name, _)) = refs.first() {
            m.atexit.insert(name.clone());
        }
    }
    if callee == "signal.signal" || callee == "signal" || callee.ends_with(".signal.signal") {
        m.handlers.extend(refs.iter().map(|(n, _)| n.clone()));
        // `signal.signal(sig, self.on_term)`: a method of this file.
        if let Some(args) = n.child_by_field_name("arguments") {
            let mut cur = args.walk();
            for a in args.named_children(&mut cur).filter(|a| a.kind() == "attribute") {
                if let Some(attr) = a.child_by_field_name("attribute") {
                    m.handlers.insert(text(src, attr).to_string());
                }
            }
        }
    }
    for (name, node) in refs {
        m.refs.push(Ref { name, start: node.start_byte(), end: node.end_byte(), call: m.calls.len() });
    }
    m.calls.push(c);
}

impl Module {
    /// A copy made once the tree is freed. The facts were allocated between the tree's nodes, and
    /// the next file's tree does not fit in the holes they leave: RSS grew by twice the facts per
    /// file. The copy packs them into the freed space. `calls` has room for the references to
    /// this file's functions, which `Program::new` adds: growing it there would copy it again.
    fn compact(&self) -> Module {
        let plain: HashSet<&str> =
            self.scopes.iter().skip(1).filter(|s| !s.is_method).map(|s| s.name.as_str()).collect();
        let own_refs = self
            .refs
            .iter()
            .filter(|r| plain.contains(r.name.as_str()) && !is_signal_via(&self.calls[r.call].callee))
            .count();
        let mut calls = Vec::with_capacity(self.calls.len() + own_refs);
        calls.extend(self.calls.iter().cloned());
        Module {
            path: self.path.clone(),
            src: self.src.clone(),
            line_starts: self.line_starts.clone(),
            scopes: self.scopes.clone(),
            calls,
            ctxs: self.ctxs.clone(),
            conds: self.conds.clone(),
            guards: self.guards.clone(),
            imports: self.imports.clone(),
            import_words: self.import_words.clone(),
            star_imports: self.star_imports.clone(),
            atexit: self.atexit.clone(),
            handlers: self.handlers.clone(),
            assigns: self.assigns.clone(),
            classes: self.classes.clone(),
            statements: self.statements.clone(),
            query_sites: self.query_sites.clone(),
            refs: self.refs.clone(),
        }
    }

    /// Reference `r` as a call of the function it names: where the call that it is passed to
    /// sits, `via` that call.
    pub fn ref_call(&self, r: &Ref) -> Call {
        let c = &self.calls[r.call];
        Call {
            callee: r.name.clone(),
            last: r.name.clone(),
            attr: false,
            positional: 0,
            keywords: Box::default(),
            keyword_spans: Box::default(),
            first_arg: None,
            splat_kw: false,
            args: (0, 0),
            start: r.start,
            end: r.end,
            name_start: r.start,
            scope: c.scope,
            via: Some(c.callee.as_str().into()),
            statement: false,
            ctx: c.ctx,
            guarded: c.guarded,
            exit_block: c.exit_block,
        }
    }

    /// The argument list of `c` as written (empty for a reference).
    pub fn args(&self, c: &Call) -> &str {
        &self.src[c.args.0..c.args.1]
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn position(&self, byte: usize) -> (u64, u64) {
        let i = self.line_starts.partition_point(|&s| s <= byte) - 1;
        let col = self.src[self.line_starts[i]..byte].chars().count() as u64 + 1;
        (i as u64 + 1, col)
    }

    /// The byte where the line of `byte` starts, and its indentation.
    pub fn line_start(&self, byte: usize) -> (usize, &str) {
        let i = self.line_starts.partition_point(|&s| s <= byte) - 1;
        let s = self.line_starts[i];
        let line = &self.src[s..];
        let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
        (s, indent)
    }

    pub fn line_text(&self, byte: usize) -> &str {
        let start = self.src[..byte].rfind('\n').map_or(0, |i| i + 1);
        let end = self.src[byte..].find('\n').map_or(self.src.len(), |i| byte + i);
        self.src[start..end].trim()
    }

    /// The statement context of call `ci`.
    pub fn call_ctx(&self, ci: usize) -> &Ctx {
        &self.ctxs[self.calls[ci].ctx as usize]
    }

    /// A statement context by its index (`Call::ctx`, `Stmt::ctx`).
    pub fn ctx(&self, id: u32) -> &Ctx {
        &self.ctxs[id as usize]
    }

    /// The rank analysis of a condition of one of this file's contexts.
    pub fn cond_parts(&self, c: &Cond) -> &[rank::Part] {
        self.conds.get(&(c.start, c.end, c.positive)).map_or(&[], Vec::as_slice)
    }

    /// A site's `guarded` bits hold `guard`: an enclosing `if <guard>:`, or an `if <guard>: ...
    /// return` earlier in an enclosing block of its function.
    pub fn is_guarded(&self, bits: u64, guard: &Regex) -> bool {
        let i = self.guards.iter().position(|g| g == guard.as_str()).expect("the guard was wanted at parse time");
        bits >> i & 1 == 1
    }

    /// After call `ci`, a `return` or `raise` ends one of its enclosing blocks before control
    /// reaches `later` (a byte offset outside those blocks).
    pub fn exits_before(&self, ci: usize, later: usize) -> bool {
        self.calls[ci].exit_block.is_some_and(|(s, e)| !(s as usize..e as usize).contains(&later))
    }

    /// Condition texts of `ctx`, for a guard regex (`else` arms included, as before).
    pub fn cond_texts<'a>(&'a self, ctx: &'a Ctx) -> impl Iterator<Item = &'a str> + 'a {
        ctx.conds.iter().map(move |c| &self.src[c.start..c.end])
    }
}

/// The statement context of `n`, whose ancestors are `anc` (the root first), up to its function.
fn ctx_of(anc: &[Node], n: Node) -> Ctx {
    let mut ctx = Ctx::default();
    for i in (0..anc.len()).rev() {
        let (p, cur) = (anc[i], anc.get(i + 1).copied().unwrap_or(n));
        let parent = i.checked_sub(1).map(|j| anc[j]);
        match p.kind() {
            "function_definition" | "lambda" => break,
            "finally_clause" => {
                ctx.finally = true;
                if ctx.finally_try.is_none() {
                    if let Some(t) = parent {
                        ctx.finally_try = Some((t.start_byte(), t.end_byte()));
                    }
                }
            }
            "except_clause" | "except_group_clause" => {
                ctx.except = true;
                if ctx.handler.is_none() {
                    if let Some(t) = parent {
                        ctx.handler = Some(((p.start_byte(), p.end_byte()), (t.start_byte(), t.end_byte())));
                    }
                }
            }
            "for_statement" | "while_statement" if p.child_by_field_name("body") == Some(cur) => {
                ctx.in_loop = true;
                if ctx.loop_body.is_none() {
                    ctx.loop_body = Some((cur.start_byte(), cur.end_byte()));
                }
            }
            "elif_clause" if p.child_by_field_name("consequence") == Some(cur) => {
                if let Some(c) = p.child_by_field_name("condition") {
                    ctx.conds.push(Cond { start: c.start_byte(), end: c.end_byte(), positive: true });
                }
            }
            "if_statement" => {
                let cond = p.child_by_field_name("condition");
                let mut arm = None;
                if p.child_by_field_name("consequence") == Some(cur) {
                    arm = Some(0);
                    if let Some(c) = cond {
                        ctx.conds.push(Cond { start: c.start_byte(), end: c.end_byte(), positive: true });
                    }
                } else if matches!(cur.kind(), "elif_clause" | "else_clause") {
                    // Past the `if` and every earlier `elif`: their conditions do not hold.
                    let mut c = p.walk();
                    let alts: Vec<Node> = p.children_by_field_name("alternative", &mut c).collect();
                    let i = alts.iter().position(|a| *a == cur);
                    arm = i.map(|i| i as u32 + 1);
                    if let Some(c) = cond {
                        ctx.conds.push(Cond { start: c.start_byte(), end: c.end_byte(), positive: false });
                    }
                    for a in alts.iter().take(i.unwrap_or(0)) {
                        if let Some(c) = a.child_by_field_name("condition") {
                            ctx.conds.push(Cond { start: c.start_byte(), end: c.end_byte(), positive: false });
                        }
                    }
                }
                if let Some(arm) = arm {
                    ctx.arms.push((p.start_byte(), arm));
                }
            }
            "try_statement" => {
                let arm = match cur.kind() {
                    "except_clause" | "except_group_clause" => {
                        let mut c = p.walk();
                        let i = p.children(&mut c).position(|a| a == cur);
                        i.map_or(1, |i| i as u32 + 1)
                    }
                    "finally_clause" => FINALLY_ARM,
                    // The body and the `else` run on the same (no exception) path.
                    _ => 0,
                };
                ctx.arms.push((p.start_byte(), arm));
            }
            _ => {}
        }
    }
    ctx
}

/// A call that installs a signal handler (`signal.signal(sig, f)`).
pub fn is_signal_via(v: &str) -> bool {
    v == "signal.signal" || v == "signal" || v.ends_with(".signal.signal")
}

/// A block whose statements include a `return` or `raise` at its own level.
fn exits(b: Node) -> bool {
    let mut c = b.walk();
    let found = b.named_children(&mut c).any(|s| matches!(s.kind(), "return_statement" | "raise_statement"));
    found
}
