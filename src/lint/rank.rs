//! Which ranks take a branch: each `if` condition on the way to a site is evaluated for a few
//! sample ranks (0, 1, 2 and 5), in three-valued logic (unknown for anything that is not the rank,
//! a literal or a rank predicate such as `is_main_process()`). A condition is rank-selective when
//! some sample ranks take the branch and others do not; conditions that do not depend on the rank
//! are taken to hold alike on every rank, and compared by their text.

use std::sync::LazyLock;

use regex::Regex;
use tree_sitter::Node;

use super::python::{squash, text};

/// The sample ranks: rank 0, two others and a "last" one. -1 (the "not distributed" sentinel of
/// many scripts) is never one of them, so `rank != -1` holds on every rank.
pub const DOMAIN: [i64; 4] = [0, 1, 2, 5];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    T,
    F,
    U,
}

impl Tri {
    fn not(self) -> Tri {
        match self {
            Tri::T => Tri::F,
            Tri::F => Tri::T,
            Tri::U => Tri::U,
        }
    }
    fn and(self, o: Tri) -> Tri {
        match (self, o) {
            (Tri::F, _) | (_, Tri::F) => Tri::F,
            (Tri::T, Tri::T) => Tri::T,
            _ => Tri::U,
        }
    }
    fn or(self, o: Tri) -> Tri {
        match (self, o) {
            (Tri::T, _) | (_, Tri::T) => Tri::T,
            (Tri::F, Tri::F) => Tri::F,
            _ => Tri::U,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum V {
    Int(i64),
    Bool(bool),
    Set(Vec<i64>),
    U,
}

/// Names that hold on rank 0 only (`is_main_process()`, `args.is_master`, `master_process`).
const ZERO_PREDICATES: &[&str] = &[
    "is_main_process",
    "is_main",
    "is_master",
    "is_master_process",
    "master_process",
    "is_rank_zero",
    "is_rank_0",
    "is_rank0",
    "is_global_zero",
    "is_local_main_process",
    "is_local_master",
    "is_global_master",
    "is_primary",
    "is_global_primary",
    "is_local_primary",
    "is_first_rank",
    "is_leader",
    "is_chief",
    "is_main_rank",
    "is_root",
];

/// An expression whose value is a rank: a name like `rank`, `local_rank`, `args.global_rank`,
/// `self.rank_idx`, `RANK` (not `first_rank`, `per_rank_load`, `mtp_on_this_rank`: flags), a call
/// like `dist.get_rank()` or `mpu.get_tensor_model_parallel_rank()`, or `os.environ["RANK"]`.
pub fn rank_like(t: &str) -> bool {
    static NAME: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)^_*((local|global|node|machine|ddp|dist|dp|tp|pp|cp|ep|data_parallel|tensor_model_parallel|pipeline_model_parallel|expert_model_parallel|context_parallel|process|proc|my|cur|current|world|group|pg)_?)?rank(_?(id|idx|index))?$",
        )
        .expect("valid")
    });
    static CALL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)^get_(\w+_)?rank$").expect("valid"));
    static ENV: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"\[\s*["'](LOCAL_|GLOBAL_)?RANK["']\s*\]|\.get\(\s*["'](LOCAL_|GLOBAL_)?RANK["']|getenv\(\s*["'](LOCAL_|GLOBAL_)?RANK["']"#)
            .expect("valid")
    });
    if t.starts_with(['"', '\'']) {
        return false;
    }
    if ENV.is_match(t) {
        return true;
    }
    if let Some(callee) = t.strip_suffix(')').and_then(|x| x.split_once('(')).map(|(c, _)| c) {
        return CALL.is_match(callee.rsplit('.').next().unwrap_or(callee));
    }
    NAME.is_match(t.rsplit('.').next().unwrap_or(t))
}

fn last_name(t: &str) -> &str {
    let t = t.trim_end_matches("()");
    t.rsplit('.').next().unwrap_or(t)
}

struct Eval<'a> {
    src: &'a str,
    rank: i64,
    /// The text of the first rank expression met: another one is a different quantity (unknown).
    who: Option<String>,
}

impl Eval<'_> {
    fn leaf(&mut self, n: Node) -> V {
        let t = squash(text(self.src, n));
        let name = last_name(&t);
        if ZERO_PREDICATES.contains(&name)
            || (n.kind() == "call" && ZERO_PREDICATES.contains(&last_name(&callee(self.src, n))))
        {
            return V::Bool(self.rank == 0);
        }
        if name == "is_last_process" || last_name(&callee(self.src, n)) == "is_last_process" {
            return V::Bool(self.rank == *DOMAIN.last().unwrap());
        }
        if rank_like(&t) {
            match &self.who {
                Some(w) if *w != t => return V::U,
                Some(_) => {}
                None => self.who = Some(t.clone()),
            }
            return V::Int(self.rank);
        }
        V::U
    }

    fn eval(&mut self, n: Node, depth: usize) -> V {
        if depth > 64 {
            return V::U;
        }
        match n.kind() {
            "integer" => text(self.src, n).replace('_', "").parse().map_or(V::U, V::Int),
            "true" => V::Bool(true),
            "false" => V::Bool(false),
            "parenthesized_expression" => n.named_child(0).map_or(V::U, |c| self.eval(c, depth + 1)),
            "unary_operator" => {
                let op = n.child_by_field_name("operator").map(|o| text(self.src, o));
                match (op, n.child_by_field_name("argument").map(|a| self.eval(a, depth + 1))) {
                    (Some("-"), Some(V::Int(i))) => V::Int(-i),
                    _ => V::U,
                }
            }
            "not_operator" => match n.child_by_field_name("argument").map(|a| truthy(&self.eval(a, depth + 1))) {
                Some(Tri::T) => V::Bool(false),
                Some(Tri::F) => V::Bool(true),
                _ => V::U,
            },
            "boolean_operator" => {
                let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) else {
                    return V::U;
                };
                let op = n.child_by_field_name("operator").map(|o| text(self.src, o)).unwrap_or("");
                let (a, b) = (truthy(&self.eval(l, depth + 1)), truthy(&self.eval(r, depth + 1)));
                tri_v(if op == "and" { a.and(b) } else { a.or(b) })
            }
            "binary_operator" => {
                let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) else {
                    return V::U;
                };
                let op = n.child_by_field_name("operator").map(|o| text(self.src, o)).unwrap_or("");
                match (self.eval(l, depth + 1), self.eval(r, depth + 1)) {
                    (V::Int(a), V::Int(b)) => match op {
                        "+" => V::Int(a + b),
                        "-" => V::Int(a - b),
                        "*" => V::Int(a * b),
                        "%" if b != 0 => V::Int(a.rem_euclid(b)),
                        "//" if b != 0 => V::Int(a.div_euclid(b)),
                        _ => V::U,
                    },
                    _ => V::U,
                }
            }
            "list" | "set" | "tuple" => {
                let mut c = n.walk();
                let mut out = Vec::new();
                for k in n.named_children(&mut c) {
                    match self.eval(k, depth + 1) {
                        V::Int(i) => out.push(i),
                        _ => return V::U,
                    }
                }
                V::Set(out)
            }
            "comparison_operator" => self.compare(n, depth),
            "identifier" | "attribute" | "subscript" | "call" => {
                // `int(x)`: the value of x.
                if n.kind() == "call" && callee(self.src, n) == "int" {
                    if let Some(a) = n.child_by_field_name("arguments").and_then(|a| a.named_child(0)) {
                        if !rank_like(text(self.src, a)) {
                            return self.eval(a, depth + 1);
                        }
                    }
                }
                self.leaf(n)
            }
            _ => V::U,
        }
    }

    fn compare(&mut self, n: Node, depth: usize) -> V {
        let mut c = n.walk();
        let operands: Vec<Node> = n.named_children(&mut c).collect();
        let mut c2 = n.walk();
        let ops: Vec<String> =
            n.children_by_field_name("operators", &mut c2).map(|o| squash(text(self.src, o))).collect();
        if operands.len() != ops.len() + 1 {
            return V::U;
        }
        let vals: Vec<V> = operands.iter().map(|o| self.eval(*o, depth + 1)).collect();
        let mut acc = Tri::T;
        for (i, op) in ops.iter().enumerate() {
            acc = acc.and(cmp(&vals[i], op, &vals[i + 1]));
        }
        tri_v(acc)
    }
}

fn callee(src: &str, n: Node) -> String {
    if n.kind() != "call" {
        return String::new();
    }
    n.child_by_field_name("function").map(|f| squash(text(src, f))).unwrap_or_default()
}

fn tri_v(t: Tri) -> V {
    match t {
        Tri::T => V::Bool(true),
        Tri::F => V::Bool(false),
        Tri::U => V::U,
    }
}

fn truthy(v: &V) -> Tri {
    let of = |x: bool| if x { Tri::T } else { Tri::F };
    match v {
        V::Bool(b) => of(*b),
        V::Int(i) => of(*i != 0),
        V::Set(s) => of(!s.is_empty()),
        V::U => Tri::U,
    }
}

fn cmp(a: &V, op: &str, b: &V) -> Tri {
    let bool_of = |x: bool| if x { Tri::T } else { Tri::F };
    match (a, op, b) {
        (V::Int(x), "==", V::Int(y)) => bool_of(x == y),
        (V::Int(x), "!=", V::Int(y)) => bool_of(x != y),
        (V::Int(x), "<", V::Int(y)) => bool_of(x < y),
        (V::Int(x), "<=", V::Int(y)) => bool_of(x <= y),
        (V::Int(x), ">", V::Int(y)) => bool_of(x > y),
        (V::Int(x), ">=", V::Int(y)) => bool_of(x >= y),
        (V::Int(x), "in", V::Set(s)) => bool_of(s.contains(x)),
        (V::Int(x), "notin", V::Set(s)) => bool_of(!s.contains(x)),
        (V::Bool(x), "==", V::Bool(y)) => bool_of(x == y),
        (V::Bool(x), "!=", V::Bool(y)) => bool_of(x != y),
        _ => Tri::U,
    }
}

/// A condition's value on each sample rank.
pub type Sig = [Tri; DOMAIN.len()];

fn sig_of(src: &str, n: Node) -> Sig {
    let mut out = [Tri::U; DOMAIN.len()];
    for (i, r) in DOMAIN.iter().enumerate() {
        let mut e = Eval { src, rank: *r, who: None };
        out[i] = truthy(&e.eval(n, 0));
    }
    out
}

/// Some sample ranks take the branch and others do not (or may not).
pub fn selective(s: &Sig) -> bool {
    let has = |t: Tri| s.contains(&t);
    (has(Tri::F) && (has(Tri::T) || has(Tri::U))) || (has(Tri::T) && has(Tri::U))
}

/// The branch conditions on the way to a site, split into the rank-selective part (one value per
/// sample rank) and the rank-uniform part (texts with their polarity).
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub sig: Sig,
    pub selective: bool,
    pub uniform: Vec<(String, bool)>,
    /// The selective conditions as written (innermost first), for messages.
    pub rank_conds: Vec<String>,
}

/// `a and b` holding: both hold (split so that a uniform conjunct is compared on its own).
fn conjuncts<'a>(src: &str, n: Node<'a>, out: &mut Vec<Node<'a>>) {
    let mut n = n;
    while n.kind() == "parenthesized_expression" && n.named_child_count() == 1 {
        n = n.named_child(0).unwrap();
    }
    if n.kind() == "boolean_operator" && n.child_by_field_name("operator").is_some_and(|o| text(src, o) == "and") {
        if let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) {
            conjuncts(src, l, out);
            conjuncts(src, r, out);
            return;
        }
    }
    out.push(n);
}

/// One conjunct of a branch condition as the site sees it: rank-uniform (its text without
/// spaces, and whether it holds), or rank-selective (its value per sample rank, and its text).
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Uniform(String, bool),
    Rank(Sig, String),
}

/// The parts of condition `node` on a branch where it holds (`positive`: each `and` conjunct
/// apart) or where it does not (whole). Taken at parse time, while the tree is there.
pub fn parts(src: &str, node: Node, positive: bool) -> Vec<Part> {
    let mut nodes = Vec::new();
    if positive {
        conjuncts(src, node, &mut nodes);
    } else {
        nodes.push(node);
    }
    let mut out = Vec::new();
    for mut n in nodes {
        // `not x` holding is x not holding: one text for both, so that they contradict.
        let mut positive = positive;
        loop {
            match n.kind() {
                "not_operator" => match n.child_by_field_name("argument") {
                    Some(a) => {
                        n = a;
                        positive = !positive;
                    }
                    None => break,
                },
                "parenthesized_expression" if n.named_child_count() == 1 => n = n.named_child(0).unwrap(),
                _ => break,
            }
        }
        let mut s = sig_of(src, n);
        if !positive {
            s = s.map(Tri::not);
        }
        if s.iter().all(|t| *t == Tri::U) {
            out.push(Part::Uniform(squash(text(src, n)), positive));
        } else {
            let t = text(src, n).split_whitespace().collect::<Vec<_>>().join(" ");
            out.push(Part::Rank(s, if positive { t } else { format!("not ({t})") }));
        }
    }
    out
}

/// The path of a site from the parts of its conditions, innermost first.
pub fn path<'a>(parts: impl Iterator<Item = &'a Part>) -> Path {
    let mut p = Path { sig: [Tri::T; DOMAIN.len()], selective: false, uniform: Vec::new(), rank_conds: Vec::new() };
    for part in parts {
        match part {
            Part::Uniform(t, positive) => p.uniform.push((t.clone(), *positive)),
            Part::Rank(s, t) => {
                for (a, b) in p.sig.iter_mut().zip(s) {
                    *a = a.and(*b);
                }
                p.rank_conds.push(t.clone());
            }
        }
    }
    p.uniform.sort();
    p.selective = selective(&p.sig);
    p
}

/// Two sites run on complementary sets of ranks under the same rank-uniform conditions (the
/// paired-barrier pattern: `if rank != 0: barrier()` ... `if rank == 0: barrier()`).
pub fn complementary(a: &Path, b: &Path) -> bool {
    a.uniform == b.uniform
        && a.sig.iter().zip(b.sig.iter()).all(|(x, y)| matches!((x, y), (Tri::T, Tri::F) | (Tri::F, Tri::T)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(cond: &str) -> Path {
        let src = format!("if {cond}:\n    dist.barrier()\n");
        let checks = super::super::check::builtin().unwrap();
        let want = super::super::python::Wanted::of(&checks);
        let m = super::super::python::parse("t.py", src, &want).unwrap();
        let i = m.calls.iter().position(|c| c.last == "barrier").unwrap();
        path(m.call_ctx(i).conds.iter().flat_map(|c| m.cond_parts(c)))
    }

    #[test]
    fn rank_conditions_are_told_from_uniform_ones() {
        for c in [
            "rank == 0",
            "rank != 0",
            "dist.get_rank() == 0",
            "args.local_rank in [-1, 0]",
            "RANK in {-1, 0}",
            "local_rank not in [-1, 0]",
            "int(os.environ['RANK']) == 0",
            "is_main_process()",
            "accelerator.is_main_process",
            "not master_process",
            "rank % 2 == 0",
            "rank > 0",
            "self.rank == 0 and epoch % 10 == 0",
            "rank == 0 or verbose",
            "mpu.get_tensor_model_parallel_rank() == 0",
            "self.rank_idx != 0",
            "utils.is_primary(args)",
        ] {
            assert!(path_of(c).selective, "{c} should be rank-selective");
        }
        for c in [
            "rank != -1",
            "args.local_rank != -1",
            "RANK >= 0",
            "world_size > 1",
            "args.distributed",
            "dist.is_initialized()",
            "self.local_rank != self.priority_rank",
            "num_ranks == 8",
            "not self.is_built_on_rank()",
            "self.per_rank_object_load",
            "not mtp_on_this_rank",
            "first_rank",
            "rank0",
        ] {
            assert!(!path_of(c).selective, "{c} should not be rank-selective");
        }
    }

    #[test]
    fn paired_conditions_are_complementary_only_with_the_same_uniform_part() {
        assert!(complementary(&path_of("rank > 0"), &path_of("rank == 0")));
        assert!(complementary(&path_of("local_rank not in [-1, 0]"), &path_of("local_rank == 0")));
        assert!(complementary(&path_of("not is_main_process()"), &path_of("is_main_process()")));
        assert!(!complementary(&path_of("rank > 0"), &path_of("rank == 0 and cycle != -1")));
        assert!(!complementary(&path_of("rank > 1"), &path_of("rank == 0")));
        assert!(!complementary(&path_of("rank == 0"), &path_of("rank == 0")));
    }
}
