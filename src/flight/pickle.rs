//! A small reader for the Python pickles PyTorch's Flight Recorder writes (protocol 2 from the
//! TorchScript pickler, protocol 4/5 from Python's): the opcodes for None, bools, ints, floats,
//! strings, bytes, lists, tuples, dicts, memo, and globals. A global applied to arguments (REDUCE)
//! stays a `Call`, except TorchScript's list builders, which are the list itself.
//! Bad input is an error naming the offset, never a panic: nesting (200 levels) and the values made
//! (8 million, memo copies included) are bounded, so a hostile pickle cannot overflow the stack or
//! exhaust memory.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer too wide for i64 (kept as its decimal-free magnitude is not needed).
    BigInt,
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Global(String, String),
    Call(Box<Value>, Vec<Value>),
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(kv) => kv.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Int(i) => Some(*i != 0),
            _ => None,
        }
    }
    /// A list or a tuple.
    pub fn items(&self) -> &[Value] {
        match self {
            Value::List(v) | Value::Tuple(v) => v,
            _ => &[],
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("not a readable pickle: {what} at byte {at}")]
pub struct Error {
    pub what: String,
    pub at: usize,
}

/// Containers inside containers: a Flight Recorder dump nests about six deep; far more is hostile
/// (and dropping or cloning it would overflow the stack).
pub const MAX_DEPTH: u32 = 200;
/// Values alive at once, memo copies included (about 64 bytes each): the memory bound.
pub const MAX_VALUES: usize = 8_000_000;
/// Stack slots (values and marks) at once.
const MAX_STACK: usize = 1_000_000;

/// How deep a value nests and how many values it holds (itself included).
#[derive(Debug, Clone, Copy, Default)]
struct Meta {
    depth: u32,
    values: usize,
}

impl Meta {
    fn leaf(v: &Value) -> Meta {
        let bytes = match v {
            Value::Str(s) => s.len(),
            Value::Bytes(b) => b.len(),
            _ => 0,
        };
        Meta { depth: 0, values: 1 + bytes / 64 }
    }
    /// The children's aggregate, as held by one more container level.
    fn join(self, other: Meta) -> Meta {
        Meta { depth: self.depth.max(other.depth), values: self.values + other.values }
    }
}

enum Slot {
    V(Value, Meta),
    Mark,
}

/// Read one pickle from `data` (what follows its STOP is ignored).
pub fn parse(data: &[u8]) -> Result<Value, Error> {
    let mut p = Parser { d: data, i: 0, stack: Vec::new(), memo: HashMap::new(), values: 0 };
    p.run()
}

struct Parser<'a> {
    d: &'a [u8],
    i: usize,
    stack: Vec<Slot>,
    memo: HashMap<u64, (Value, Meta)>,
    /// Values made so far (a bound on memory, not an exact count of what is alive).
    values: usize,
}

impl Parser<'_> {
    fn err<T>(&self, what: impl Into<String>) -> Result<T, Error> {
        Err(Error { what: what.into(), at: self.i })
    }
    fn take(&mut self, n: usize) -> Result<&[u8], Error> {
        if n > self.d.len() - self.i {
            return self.err(format!("{n} bytes wanted, {} left", self.d.len() - self.i));
        }
        let s = &self.d[self.i..self.i + n];
        self.i += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<usize, Error> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }
    fn u32(&mut self) -> Result<usize, Error> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    fn u64(&mut self) -> Result<u64, Error> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    fn line(&mut self) -> Result<String, Error> {
        let rest = &self.d[self.i..];
        let Some(n) = rest.iter().position(|&b| b == b'\n') else { return self.err("a line without its newline") };
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.i += n + 1;
        Ok(s)
    }
    /// Count `m.values` more values against the memory bound.
    fn spend(&mut self, m: Meta) -> Result<(), Error> {
        self.values = self.values.saturating_add(m.values);
        if self.values > MAX_VALUES {
            return self.err(format!("more than {MAX_VALUES} values (the reader's memory bound)"));
        }
        Ok(())
    }
    fn push_m(&mut self, v: Value, m: Meta) -> Result<(), Error> {
        if self.stack.len() >= MAX_STACK {
            return self.err(format!("more than {MAX_STACK} values on the stack"));
        }
        self.stack.push(Slot::V(v, m));
        Ok(())
    }
    /// A value made from the input (a leaf).
    fn push(&mut self, v: Value) -> Result<(), Error> {
        let m = Meta::leaf(&v);
        self.spend(m)?;
        self.push_m(v, m)
    }
    /// A container (or call) holding values whose aggregate is `inner`.
    fn push_nested(&mut self, v: Value, inner: Meta) -> Result<(), Error> {
        let m = Meta { depth: inner.depth + 1, values: inner.values + 1 };
        self.check_depth(m.depth)?;
        self.spend(Meta { depth: 0, values: 1 })?;
        self.push_m(v, m)
    }
    fn check_depth(&self, depth: u32) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return self.err(format!("containers nested deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }
    fn pop_m(&mut self) -> Result<(Value, Meta), Error> {
        match self.stack.pop() {
            Some(Slot::V(v, m)) => Ok((v, m)),
            Some(Slot::Mark) => self.err("a mark where a value was expected"),
            None => self.err("an empty stack"),
        }
    }
    fn pop(&mut self) -> Result<Value, Error> {
        self.pop_m().map(|(v, _)| v)
    }
    fn top_m(&mut self) -> Result<(&mut Value, &mut Meta), Error> {
        let at = self.i;
        match self.stack.last_mut() {
            Some(Slot::V(v, m)) => Ok((v, m)),
            _ => Err(Error { what: "no value on the stack".into(), at }),
        }
    }
    /// The values above the topmost mark (with their aggregate), and the mark removed.
    fn pop_mark(&mut self) -> Result<(Vec<Value>, Meta), Error> {
        let Some(m) = self.stack.iter().rposition(|s| matches!(s, Slot::Mark)) else {
            return self.err("no mark on the stack");
        };
        let vals = self.stack.split_off(m + 1);
        self.stack.pop();
        let mut agg = Meta::default();
        let vals = vals
            .into_iter()
            .filter_map(|s| match s {
                Slot::V(v, m) => {
                    agg = agg.join(m);
                    Some(v)
                }
                Slot::Mark => None,
            })
            .collect();
        Ok((vals, agg))
    }
    /// A copy of the top value (for the memo, DUP), counted against the memory bound.
    fn memo_value(&mut self) -> Result<(Value, Meta), Error> {
        // Counted before the copy is made: a copy past the bound is never made.
        let m = *self.top_m()?.1;
        self.spend(m)?;
        Ok((self.top_m()?.0.clone(), m))
    }
    /// The top container grows by values whose aggregate is `inner`.
    fn grow_top(&mut self, inner: Meta) -> Result<(), Error> {
        let depth = inner.depth + 1;
        self.check_depth(depth)?;
        let (_, m) = self.top_m()?;
        m.depth = m.depth.max(depth);
        m.values += inner.values;
        Ok(())
    }
    fn str_of(&self, b: &[u8]) -> Value {
        Value::Str(String::from_utf8_lossy(b).into_owned())
    }
    fn int_text(&self, s: &str) -> Value {
        match s.trim().trim_end_matches('L') {
            "00" => Value::Bool(false),
            "01" => Value::Bool(true),
            t => t.parse().map(Value::Int).unwrap_or(Value::BigInt),
        }
    }
    fn long(&self, b: &[u8]) -> Value {
        if b.len() > 8 {
            return Value::BigInt;
        }
        if b.is_empty() {
            return Value::Int(0);
        }
        let neg = b[b.len() - 1] & 0x80 != 0;
        let mut buf = if neg { [0xffu8; 8] } else { [0u8; 8] };
        buf[..b.len()].copy_from_slice(b);
        Value::Int(i64::from_le_bytes(buf))
    }
    fn set_items(&mut self, vals: Vec<Value>, inner: Meta) -> Result<(), Error> {
        self.grow_top(inner)?;
        if vals.len() % 2 != 0 {
            return self.err("SETITEMS with an odd number of values");
        }
        let mut it = vals.into_iter();
        let mut pairs = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            pairs.push((k, v));
        }
        match self.top_m()?.0 {
            Value::Dict(d) => {
                d.extend(pairs);
                Ok(())
            }
            _ => self.err("SETITEMS on something that is not a dict"),
        }
    }
    fn append(&mut self, vals: Vec<Value>, inner: Meta) -> Result<(), Error> {
        self.grow_top(inner)?;
        match self.top_m()?.0 {
            Value::List(l) => {
                l.extend(vals);
                Ok(())
            }
            _ => self.err("APPEND on something that is not a list"),
        }
    }

    fn run(&mut self) -> Result<Value, Error> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    let v = self.u8()?;
                    if v > 5 {
                        return self.err(format!("protocol {v}"));
                    }
                }
                0x95 => {
                    self.u64()?;
                } // FRAME
                b'.' => return self.pop(),
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let b = self.take(4)?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64;
                    self.push(Value::Int(v))?
                }
                b'K' => {
                    let v = self.u8()? as i64;
                    self.push(Value::Int(v))?
                }
                b'M' => {
                    let v = self.u16()? as i64;
                    self.push(Value::Int(v))?
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?.to_vec();
                    let v = self.long(&b);
                    self.push(v)?
                }
                0x8b => {
                    let n = self.u32()?;
                    let b = self.take(n)?.to_vec();
                    let v = self.long(&b);
                    self.push(v)?
                }
                b'I' | b'L' => {
                    let l = self.line()?;
                    let v = self.int_text(&l);
                    self.push(v)?
                }
                b'G' => {
                    let b = self.take(8)?;
                    let v = f64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
                    self.push(Value::Float(v))?
                }
                b'F' => {
                    let l = self.line()?;
                    let v = l.trim().parse().map(Value::Float).unwrap_or(Value::Float(f64::NAN));
                    self.push(v)?
                }
                b'X' => {
                    let n = self.u32()?;
                    let v = self.take(n).map(|b| b.to_vec())?;
                    let v = self.str_of(&v);
                    self.push(v)?
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = self.take(n).map(|b| b.to_vec())?;
                    let v = self.str_of(&v);
                    self.push(v)?
                }
                0x8d => {
                    let n = self.u64()?;
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    let v = self.take(n).map(|b| b.to_vec())?;
                    let v = self.str_of(&v);
                    self.push(v)?
                }
                b'T' => {
                    let n = self.u32()?;
                    let v = self.take(n).map(|b| b.to_vec())?;
                    let v = self.str_of(&v);
                    self.push(v)?
                }
                b'U' => {
                    let n = self.u8()? as usize;
                    let v = self.take(n).map(|b| b.to_vec())?;
                    let v = self.str_of(&v);
                    self.push(v)?
                }
                b'B' => {
                    let n = self.u32()?;
                    let v = self.take(n)?.to_vec();
                    self.push(Value::Bytes(v))?
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    let v = self.take(n)?.to_vec();
                    self.push(Value::Bytes(v))?
                }
                0x8e => {
                    let n = self.u64()?;
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    let v = self.take(n)?.to_vec();
                    self.push(Value::Bytes(v))?
                }
                0x96 => {
                    let n = self.u64()?;
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    let v = self.take(n)?.to_vec();
                    self.push(Value::Bytes(v))?
                } // BYTEARRAY8
                b'V' => {
                    let l = self.line()?;
                    self.push(Value::Str(l))?
                }
                b'S' => {
                    let l = self.line()?;
                    let l = l.trim().trim_matches(|c| c == '\'' || c == '"').to_string();
                    self.push(Value::Str(l))?
                }
                b'(' => {
                    if self.stack.len() >= MAX_STACK {
                        return self.err(format!("more than {MAX_STACK} values on the stack"));
                    }
                    self.stack.push(Slot::Mark)
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'0' => {
                    self.stack.pop().map(|_| ()).ok_or(Error { what: "POP on an empty stack".into(), at: self.i })?
                }
                b'2' => {
                    let (v, m) = self.memo_value()?;
                    self.push_m(v, m)?
                }
                b']' => self.push(Value::List(Vec::new()))?,
                b'l' => {
                    let (v, m) = self.pop_mark()?;
                    self.push_nested(Value::List(v), m)?
                }
                b'a' => {
                    let (v, m) = self.pop_m()?;
                    self.append(vec![v], m)?
                }
                b'e' => {
                    let (v, m) = self.pop_mark()?;
                    self.append(v, m)?
                }
                b')' => self.push(Value::Tuple(Vec::new()))?,
                b't' => {
                    let (v, m) = self.pop_mark()?;
                    self.push_nested(Value::Tuple(v), m)?
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut v = Vec::with_capacity(n);
                    let mut agg = Meta::default();
                    for _ in 0..n {
                        let (x, m) = self.pop_m()?;
                        agg = agg.join(m);
                        v.push(x);
                    }
                    v.reverse();
                    self.push_nested(Value::Tuple(v), agg)?
                }
                b'}' => self.push(Value::Dict(Vec::new()))?,
                b'd' => {
                    let (v, m) = self.pop_mark()?;
                    self.push(Value::Dict(Vec::new()))?;
                    self.set_items(v, m)?
                }
                b's' => {
                    let (v, mv) = self.pop_m()?;
                    let (k, mk) = self.pop_m()?;
                    self.set_items(vec![k, v], mk.join(mv))?
                }
                b'u' => {
                    let (v, m) = self.pop_mark()?;
                    self.set_items(v, m)?
                }
                0x8f => self.push(Value::List(Vec::new()))?, // EMPTY_SET: kept as a list
                0x90 => {
                    let (v, m) = self.pop_mark()?;
                    self.append(v, m)?
                } // ADDITEMS
                0x91 => {
                    let (v, m) = self.pop_mark()?;
                    self.push_nested(Value::List(v), m)?
                } // FROZENSET
                b'q' => {
                    let k = self.u8()? as u64;
                    let v = self.memo_value()?;
                    self.memo.insert(k, v);
                }
                b'r' => {
                    let k = self.u32()? as u64;
                    let v = self.memo_value()?;
                    self.memo.insert(k, v);
                }
                b'p' => {
                    let l = self.line()?;
                    let k = l.trim().parse().unwrap_or(u64::MAX);
                    let v = self.memo_value()?;
                    self.memo.insert(k, v);
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    let v = self.memo_value()?;
                    self.memo.insert(k, v);
                }
                b'h' | b'j' | b'g' => {
                    let k = match op {
                        b'h' => self.u8()? as u64,
                        b'j' => self.u32()? as u64,
                        _ => {
                            let l = self.line()?;
                            l.trim().parse().unwrap_or(u64::MAX)
                        }
                    };
                    let Some(m) = self.memo.get(&k).map(|(_, m)| *m) else {
                        return self.err(format!("memo {k} was never set"));
                    };
                    self.spend(m)?;
                    let v = self.memo.get(&k).map(|(v, _)| v.clone()).unwrap_or(Value::None);
                    self.push_m(v, m)?
                }
                b'c' => {
                    let m = self.line()?;
                    let n = self.line()?;
                    self.push(Value::Global(m, n))?
                }
                0x93 => {
                    let n = self.pop()?;
                    let m = self.pop()?;
                    match (m, n) {
                        (Value::Str(m), Value::Str(n)) => self.push(Value::Global(m, n))?,
                        _ => return self.err("STACK_GLOBAL without two strings"),
                    }
                }
                b'R' | 0x81 => {
                    let (args, ma) = self.pop_m()?;
                    let (f, mf) = self.pop_m()?;
                    let args = match args {
                        Value::Tuple(a) => a,
                        other => vec![other],
                    };
                    let v = match &f {
                        // TorchScript writes typed lists as torch.jit._pickle.build_intlist([...]).
                        Value::Global(m, n)
                            if m == "torch.jit._pickle" && n.starts_with("build_") && args.len() == 1 =>
                        {
                            args.into_iter().next().unwrap_or(Value::None)
                        }
                        _ => Value::Call(Box::new(f), args),
                    };
                    self.push_nested(v, ma.join(mf))?
                }
                b'b' => {
                    // BUILD: state applied to an object; the object stays as it was.
                    self.pop()?;
                }
                other => return self.err(format!("unknown opcode 0x{other:02x}")),
            }
        }
    }
}

/// Does this look like a pickle (protocol 2 to 5)?
pub fn looks_like(head: &[u8]) -> bool {
    head.len() >= 3 && head[0] == 0x80 && (2..=5).contains(&head[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps({'version': '2.10', 'entries': [{'a': [1, -2, 70000, 2**40], 'b': (None, True, 1.5)}]}, protocol=2)`
    const P2: &[u8] = b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq\x01X\x04\x00\x00\x002.10q\x02X\x07\x00\x00\x00entriesq\x03]q\x04}q\x05(X\x01\x00\x00\x00aq\x06]q\x07(K\x01J\xfe\xff\xff\xffJp\x11\x01\x00\x8a\x06\x00\x00\x00\x00\x00\x01eX\x01\x00\x00\x00bq\x08N\x88G?\xf8\x00\x00\x00\x00\x00\x00\x87q\tuau.";

    #[test]
    fn reads_protocol_2() {
        let v = parse(P2).unwrap();
        assert_eq!(v.get("version").and_then(Value::as_str), Some("2.10"));
        let e = &v.get("entries").unwrap().items()[0];
        let a: Vec<i64> = e.get("a").unwrap().items().iter().filter_map(Value::as_int).collect();
        assert_eq!(a, vec![1, -2, 70000, 1 << 40]);
        assert_eq!(e.get("b").unwrap(), &Value::Tuple(vec![Value::None, Value::Bool(true), Value::Float(1.5)]));
    }

    #[test]
    fn torchscript_list_builders_are_lists() {
        // GLOBAL torch.jit._pickle build_intlist, ([1, 2],) REDUCE
        let d = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\nq\x00]q\x01(K\x01K\x02e\x85q\x02Rq\x03.";
        assert_eq!(parse(d).unwrap(), Value::List(vec![Value::Int(1), Value::Int(2)]));
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        for n in 0..P2.len() {
            assert!(parse(&P2[..n]).is_err(), "cut at {n}");
        }
        assert!(parse(b"\x80\x02\xff").unwrap_err().what.contains("unknown opcode 0xff"));
        assert!(parse(b"\x80\x02h\x05.").unwrap_err().what.contains("memo 5"));
        assert!(parse(b"\x80\x02X\xff\xff\xff\xff").is_err());
        assert!(parse(b"\x80\x02(((((((((.").is_err());
        assert!(parse(b"\x80\x02a.").is_err());
        assert!(parse(b"\x80\x02Ns.").is_err());
        // Nesting past the bound, built with APPEND (no recursion anywhere: dropping it is safe too).
        let mut deep = b"\x80\x02".to_vec();
        deep.extend(std::iter::repeat_n(b']', 5000));
        deep.extend(std::iter::repeat_n(b'a', 4999));
        deep.push(b'.');
        assert!(parse(&deep).unwrap_err().what.contains("nested deeper than 200 levels"));
        let mut ok = b"\x80\x02".to_vec();
        ok.extend(std::iter::repeat_n(b']', 150));
        ok.extend(std::iter::repeat_n(b'a', 149));
        ok.push(b'.');
        assert!(parse(&ok).is_ok(), "150 levels is within the bound");
        // A billion laughs through the memo: a list doubled by DUP + APPENDS copies.
        let mut laugh = b"\x80\x02]q\x00K\x01a".to_vec();
        for _ in 0..40 {
            // [x] -> [x, x]: MARK, get 0, get 0... as a new list, memoised again.
            laugh.extend(b"(h\x00h\x00lq\x00");
        }
        laugh.push(b'.');
        assert!(parse(&laugh).unwrap_err().what.contains("memory bound"));
        // Every byte value after a valid start.
        for b in 0..=255u8 {
            let _ = parse(&[0x80, 2, b, b'.', b, b, b]);
        }
    }
}
