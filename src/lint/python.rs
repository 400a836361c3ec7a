//! Python sources through tree-sitter: the calls, functions and statement context the checks need.

use std::collections::HashSet;

use tree_sitter::{Node, Parser, Tree};

/// A function (or the module itself, scope 0) that calls belong to.
#[derive(Debug, Clone)]
pub struct Scope {
    pub name: String,
    /// Defined directly in a class body: called as `x.name()`.
    pub is_method: bool,
    /// Its decorators as written (`@pytest.fixture`).
    pub decorators: String,
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
    /// Keyword arguments: name and value as written.
    pub keywords: Vec<(String, String)>,
    /// Passes `**kwargs` (its keywords are unknown).
    pub splat_kw: bool,
    /// The argument list as written.
    pub args: String,
    pub start: usize,
    pub end: usize,
    pub scope: usize,
    /// A function passed by name to another call (`spawn(worker)`, `atexit.register(f)`): the
    /// callee of that call. Such a reference counts as a call of the function.
    pub via: Option<String>,
}

/// Where a site sits inside its function.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    pub finally: bool,
    pub except: bool,
    pub in_loop: bool,
    /// Conditions of the enclosing `if`/`elif` (for `else`, the ones it negates).
    pub conds: Vec<String>,
    /// (branching statement, arm): arms of one `if`, or a `try` body and its handlers, exclude each other.
    pub arms: Vec<(usize, u32)>,
}

pub const FINALLY_ARM: u32 = u32::MAX;

pub struct Module {
    pub path: String,
    pub src: String,
    pub tree: Tree,
    pub scopes: Vec<Scope>,
    pub calls: Vec<Call>,
    /// The text of every import statement.
    pub imports: String,
    /// Functions registered with `atexit.register(f)` or `@atexit.register`.
    pub atexit: HashSet<String>,
    /// Functions installed with `signal.signal(sig, f)`: an exit path of their own.
    pub handlers: HashSet<String>,
    /// Function names passed by name to a call (`(name, via)`), resolved into `calls` once all
    /// files are known.
    pub refs: Vec<(String, Call)>,
}

#[derive(Debug)]
pub struct SyntaxError {
    pub line: u64,
    pub column: u64,
    pub text: String,
}

pub fn parse(path: &str, src: String) -> Result<Module, SyntaxError> {
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
    let mut m = Module {
        path: path.to_string(),
        scopes: vec![Scope {
            name: "<module>".into(),
            is_method: false,
            decorators: String::new(),
            start: 0,
            end: src.len(),
        }],
        calls: Vec::new(),
        imports: String::new(),
        atexit: HashSet::new(),
        handlers: HashSet::new(),
        refs: Vec::new(),
        src: String::new(),
        tree: tree.clone(),
    };
    walk(&src, root, &mut m);
    m.src = src;
    m.tree = tree;
    Ok(m)
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

fn text<'a>(src: &'a str, n: Node) -> &'a str {
    &src[n.byte_range()]
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Every node, with the function it belongs to (iterative: nesting depth is the input's).
fn walk(src: &str, root: Node, m: &mut Module) {
    let mut stack = vec![(root, 0usize)];
    while let Some((n, outer)) = stack.pop() {
        let mut scope = outer;
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
                let is_method = p
                    .is_some_and(|b| b.kind() == "block" && b.parent().is_some_and(|c| c.kind() == "class_definition"));
                m.scopes.push(Scope { name, is_method, decorators, start: n.start_byte(), end: n.end_byte() });
                scope = m.scopes.len() - 1;
            }
            "import_statement" | "import_from_statement" => {
                m.imports.push_str(text(src, n));
                m.imports.push('\n');
            }
            "call" => call(src, n, scope, m),
            _ => {}
        }
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).collect();
        stack.extend(kids.into_iter().rev().map(|k| (k, scope)));
    }
}

fn call(src: &str, n: Node, scope: usize, m: &mut Module) {
    let Some(f) = n.child_by_field_name("function") else { return };
    let (last, attr) = match f.kind() {
        "identifier" => (text(src, f).to_string(), false),
        "attribute" => {
            // `", ".join(...)` and friends: a method of a literal is never one of ours.
            if f.child_by_field_name("object").is_some_and(|o| {
                matches!(o.kind(), "string" | "concatenated_string" | "integer" | "float" | "list" | "dict" | "tuple")
            }) {
                return;
            }
            match f.child_by_field_name("attribute") {
                Some(a) => (text(src, a).to_string(), true),
                None => return,
            }
        }
        _ => return,
    };
    let callee = squash(text(src, f));
    let mut c = Call {
        callee: callee.clone(),
        last,
        attr,
        positional: 0,
        keywords: Vec::new(),
        splat_kw: false,
        args: String::new(),
        start: n.start_byte(),
        end: n.end_byte(),
        scope,
        via: None,
    };
    let mut refs = Vec::new();
    if let Some(args) = n.child_by_field_name("arguments") {
        c.args = text(src, args).to_string();
        let mut cur = args.walk();
        for a in args.named_children(&mut cur) {
            match a.kind() {
                "keyword_argument" => {
                    let k = a.child_by_field_name("name").map(|x| text(src, x).to_string()).unwrap_or_default();
                    let v = a.child_by_field_name("value");
                    if let Some(v) = v.filter(|v| v.kind() == "identifier") {
                        refs.push((text(src, v).to_string(), v));
                    }
                    c.keywords.push((k, v.map(|v| text(src, v).trim().to_string()).unwrap_or_default()));
                }
                "dictionary_splat" => c.splat_kw = true,
                "comment" => {}
                "identifier" => {
                    refs.push((text(src, a).to_string(), a));
                    c.positional += 1;
                }
                _ => c.positional += 1,
            }
        }
    }
    if callee == "atexit.register" {
        if let Some((name, _)) = refs.first() {
            m.atexit.insert(name.clone());
        }
    }
    if callee == "signal.signal" || callee == "signal" {
        m.handlers.extend(refs.iter().map(|(n, _)| n.clone()));
    }
    for (name, node) in refs {
        let r = Call {
            callee: name.clone(),
            last: name.clone(),
            attr: false,
            positional: 0,
            keywords: Vec::new(),
            splat_kw: false,
            args: String::new(),
            start: node.start_byte(),
            end: node.end_byte(),
            scope,
            via: Some(callee.clone()),
        };
        m.refs.push((name, r));
    }
    m.calls.push(c);
}

impl Module {
    /// 1-based line and column of a byte offset.
    pub fn position(&self, byte: usize) -> (u64, u64) {
        let before = &self.src[..byte];
        let line = before.matches('\n').count() as u64 + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u64 + 1;
        (line, col)
    }

    pub fn line_text(&self, byte: usize) -> &str {
        let start = self.src[..byte].rfind('\n').map_or(0, |i| i + 1);
        let end = self.src[byte..].find('\n').map_or(self.src.len(), |i| byte + i);
        self.src[start..end].trim()
    }

    pub fn scope_at(&self, start: usize, end: usize) -> usize {
        let mut best = 0;
        for (i, s) in self.scopes.iter().enumerate().skip(1) {
            if s.start <= start && end <= s.end && s.start >= self.scopes[best].start {
                best = i;
            }
        }
        best
    }

    fn node(&self, start: usize, end: usize) -> Node<'_> {
        self.tree.root_node().descendant_for_byte_range(start, end).unwrap_or(self.tree.root_node())
    }

    /// The statement context of the node at `start..end`, up to its function.
    pub fn ctx(&self, start: usize, end: usize) -> Ctx {
        let mut ctx = Ctx::default();
        let mut cur = self.node(start, end);
        while let Some(p) = cur.parent() {
            match p.kind() {
                "function_definition" | "lambda" => break,
                "finally_clause" => ctx.finally = true,
                "except_clause" | "except_group_clause" => ctx.except = true,
                "for_statement" | "while_statement" if p.child_by_field_name("body") == Some(cur) => ctx.in_loop = true,
                "elif_clause" if p.child_by_field_name("consequence") == Some(cur) => {
                    if let Some(c) = p.child_by_field_name("condition") {
                        ctx.conds.push(text(&self.src, c).to_string());
                    }
                }
                "if_statement" => {
                    let cond = p.child_by_field_name("condition");
                    let arm = if p.child_by_field_name("consequence") == Some(cur) {
                        Some(0)
                    } else if matches!(cur.kind(), "elif_clause" | "else_clause") {
                        let mut c = p.walk();
                        let i = p.children_by_field_name("alternative", &mut c).position(|a| a == cur);
                        i.map(|i| i as u32 + 1)
                    } else {
                        None
                    };
                    if let Some(arm) = arm {
                        if let Some(c) = cond {
                            ctx.conds.push(text(&self.src, c).to_string());
                        }
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
            cur = p;
        }
        ctx
    }

    /// An `if <guard>: ... return` earlier in an enclosing block of the function, or an enclosing
    /// `if <guard>:`.
    pub fn guarded(&self, start: usize, end: usize, guard: &regex::Regex) -> bool {
        if self.ctx(start, end).conds.iter().any(|c| guard.is_match(c)) {
            return true;
        }
        let mut cur = self.node(start, end);
        while let Some(p) = cur.parent() {
            if matches!(p.kind(), "function_definition" | "lambda") {
                break;
            }
            if p.kind() == "block" || p.kind() == "module" {
                let mut c = p.walk();
                for s in p.named_children(&mut c).take_while(|s| s.end_byte() <= cur.start_byte()) {
                    if s.kind() == "if_statement"
                        && s.child_by_field_name("condition").is_some_and(|c| guard.is_match(text(&self.src, c)))
                        && s.child_by_field_name("consequence").is_some_and(|b| exits(b))
                    {
                        return true;
                    }
                }
            }
            cur = p;
        }
        false
    }

    /// After the node at `start..end`, a `return` or `raise` ends one of its enclosing blocks
    /// before control reaches `later` (a byte offset outside those blocks).
    pub fn exits_before(&self, start: usize, end: usize, later: usize) -> bool {
        let mut cur = self.node(start, end);
        while let Some(p) = cur.parent() {
            if matches!(p.kind(), "function_definition" | "lambda" | "module") || p.byte_range().contains(&later) {
                break;
            }
            if p.kind() == "block" {
                let mut c = p.walk();
                if p.named_children(&mut c).any(|s| {
                    s.start_byte() >= cur.end_byte() && matches!(s.kind(), "return_statement" | "raise_statement")
                }) {
                    return true;
                }
            }
            cur = p;
        }
        false
    }
}

/// A block whose statements include a `return` or `raise` at its own level.
fn exits(b: Node) -> bool {
    let mut c = b.walk();
    let found = b.named_children(&mut c).any(|s| matches!(s.kind(), "return_statement" | "raise_statement"));
    found
}
