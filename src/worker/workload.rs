//! The workload's inputs and its CPU reference: deterministic per (rank, token), so every rank can
//! rebuild any peer's tokens to check what it received without moving them over the network.

/// Sizes of one run (the same on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub world: usize,
    pub tokens: usize,
    pub hidden: usize,
    pub experts: usize,
    pub topk: usize,
}

impl Shape {
    pub fn experts_per_rank(&self) -> usize {
        self.experts / self.world
    }
    pub fn row_bytes(&self) -> usize {
        self.hidden * 2
    }
    /// Most rows a rank can receive: every token of every rank.
    pub fn max_recv(&self) -> usize {
        self.world * self.tokens
    }
    /// The data allocation each rank exports: recv_x then recv_src.
    pub fn data_bytes(&self) -> usize {
        self.max_recv() * self.row_bytes() + self.max_recv() * 4
    }
    pub fn src_offset_bytes(&self) -> usize {
        self.max_recv() * self.row_bytes()
    }
    pub fn validate(&self) -> Result<(), String> {
        let s = self;
        if s.world == 0 || s.world > 32 {
            return Err(format!("--world {}: between 1 and 32 ranks (one node's intranode domain)", s.world));
        }
        if s.tokens == 0 || s.tokens > 1 << 20 {
            return Err(format!("--tokens {}: between 1 and 1048576", s.tokens));
        }
        if s.hidden == 0 || s.hidden % 8 != 0 || s.hidden > 1 << 16 {
            return Err(format!(
                "--hidden {}: a positive multiple of 8 (16-byte rows of bf16), at most 65536",
                s.hidden
            ));
        }
        if s.experts == 0 || s.experts % s.world != 0 {
            return Err(format!("--experts {}: must be a positive multiple of --world {}", s.experts, s.world));
        }
        if s.experts > 8192 {
            return Err(format!("--experts {}: at most 8192", s.experts));
        }
        if s.topk == 0 || s.topk > s.experts || s.topk > 64 {
            return Err(format!("--topk {}: between 1 and min(--experts, 64)", s.topk));
        }
        let rows = s.max_recv() as u128 * s.row_bytes() as u128;
        if rows > i32::MAX as u128 * 16 || s.max_recv() > i32::MAX as usize {
            return Err("--world x --tokens x --hidden is too large for one receive buffer".into());
        }
        Ok(())
    }
}

/// Word offsets in the signal buffer; mirrors `SignalLayout` in kernels/ep_common.cuh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalLayout {
    pub counts: usize,
    pub ecounts: usize,
    pub nflag: usize,
    pub bflag: usize,
    pub words: usize,
}

impl SignalLayout {
    pub fn new(world: usize, experts_per_rank: usize) -> Self {
        let w = world;
        let counts = 0;
        let ecounts = 2 * w * w;
        let nflag = ecounts + 2 * w * experts_per_rank;
        let bflag = nflag + w;
        Self { counts, ecounts, nflag, bflag, words: bflag + w }
    }
}

/// `meta` written by ep_notify: send_base[W], recv_base[W], recv_total, expert_recv[EL].
pub fn meta_len(shape: &Shape) -> usize {
    2 * shape.world + 1 + shape.experts_per_rank()
}

struct SplitMix(u64);
impl SplitMix {
    fn new(seed: u64) -> Self {
        Self(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) from 24 bits.
    fn unit(bits: u32) -> f32 {
        (bits & 0x00ff_ffff) as f32 * (1.0 / 16_777_216.0)
    }
}

fn seed(kind: u64, rank: usize, token: usize) -> u64 {
    kind.wrapping_mul(0x1000_0000_01b3) ^ ((rank as u64) << 40) ^ token as u64
}

pub fn bf16_to_f32(v: u16) -> f32 {
    f32::from_bits((v as u32) << 16)
}

/// Round to nearest even, NaN kept quiet (same rule as the kernels).
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7f80_0000) == 0x7f80_0000 && (u & 0x007f_ffff) != 0 {
        return ((u >> 16) | 0x0040) as u16;
    }
    let u = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (u >> 16) as u16
}

/// Token `t` of rank `rank`: `hidden` bf16 values in [-1, 1).
pub fn gen_row(rank: usize, t: usize, out: &mut [u16]) {
    let mut g = SplitMix::new(seed(1, rank, t));
    for pair in out.chunks_mut(2) {
        let r = g.next();
        for (i, v) in pair.iter_mut().enumerate() {
            let bits = (r >> (32 * i)) as u32;
            *v = f32_to_bf16(SplitMix::unit(bits) * 2.0 - 1.0);
        }
    }
}

/// Top-k experts (distinct) and weights of every token of `rank`.
pub fn gen_topk(rank: usize, shape: &Shape) -> (Vec<i32>, Vec<f32>) {
    let (t_n, k_n, e_n) = (shape.tokens, shape.topk, shape.experts);
    let mut idx = Vec::with_capacity(t_n * k_n);
    let mut w = Vec::with_capacity(t_n * k_n);
    for t in 0..t_n {
        let mut g = SplitMix::new(seed(2, rank, t));
        let start = idx.len();
        while idx.len() - start < k_n {
            let e = (g.next() % e_n as u64) as i32;
            if !idx[start..].contains(&e) {
                idx.push(e);
            }
        }
        for _ in 0..k_n {
            w.push(0.05 + 0.95 * SplitMix::unit(g.next() as u32));
        }
    }
    (idx, w)
}

pub fn gen_x(rank: usize, shape: &Shape) -> Vec<u16> {
    let mut x = vec![0u16; shape.tokens * shape.hidden];
    for (t, row) in x.chunks_mut(shape.hidden).enumerate() {
        gen_row(rank, t, row);
    }
    x
}

/// What ep_notify computes locally for one source rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `[T][W]`: position of token t in the chunk for rank r, or -1.
    pub pos: Vec<i32>,
    /// Tokens sent to each rank.
    pub counts: Vec<usize>,
    /// Tokens that chose each expert (global expert ids).
    pub expert_counts: Vec<usize>,
}

pub fn layout(topk_idx: &[i32], shape: &Shape) -> Layout {
    let (w, k, el) = (shape.world, shape.topk, shape.experts_per_rank());
    let mut pos = vec![-1i32; shape.tokens * w];
    let mut counts = vec![0usize; w];
    let mut expert_counts = vec![0usize; shape.experts];
    for t in 0..shape.tokens {
        let mut mask = 0u64;
        for &e in &topk_idx[t * k..(t + 1) * k] {
            mask |= 1 << (e as usize / el);
            expert_counts[e as usize] += 1;
        }
        for r in 0..w {
            if mask >> r & 1 == 1 {
                pos[t * w + r] = counts[r] as i32;
                counts[r] += 1;
            }
        }
    }
    Layout { pos, counts, expert_counts }
}

/// Sum of the token's top-k weights per destination rank, in k order (as the kernel does).
pub fn rank_weights(idx: &[i32], w: &[f32], shape: &Shape) -> Vec<f32> {
    let el = shape.experts_per_rank();
    let mut out = vec![0f32; shape.world];
    for (e, wt) in idx.iter().zip(w) {
        out[*e as usize / el] += *wt;
    }
    out
}

/// The combined row: sum over destination ranks in rank order of weight * row, fused
/// multiply-add in f32, rounded to bf16 (as ep_combine does).
pub fn combine_row(x_row: &[u16], dests: &[(usize, f32)], out: &mut [u16]) {
    for (h, o) in out.iter_mut().enumerate() {
        let v = bf16_to_f32(x_row[h]);
        let mut acc = 0f32;
        for &(_, wr) in dests {
            acc = wr.mul_add(v, acc);
        }
        *o = f32_to_bf16(acc);
    }
}

/// What this rank's buffers should hold after dispatch + combine, given every rank's top-k.
pub struct Expected {
    pub send_base: Vec<usize>,
    pub recv_base: Vec<usize>,
    pub recv_total: usize,
    pub expert_recv: Vec<usize>,
}

pub fn expected(me: usize, layouts: &[Layout], shape: &Shape) -> Expected {
    let w = shape.world;
    let el = shape.experts_per_rank();
    let c = |s: usize, r: usize| layouts[s].counts[r];
    let send_base = (0..w).map(|r| (0..me).map(|s| c(s, r)).sum()).collect();
    let recv_base = (0..w).map(|s| (0..s).map(|s2| c(s2, me)).sum()).collect();
    let recv_total = (0..w).map(|s| c(s, me)).sum();
    let expert_recv = (0..el).map(|l| layouts.iter().map(|lay| lay.expert_counts[me * el + l]).sum()).collect();
    Expected { send_base, recv_base, recv_total, expert_recv }
}

/// What the device returned, copied to the host.
pub struct Observed<'a> {
    pub meta: &'a [i32],
    pub recv_x: &'a [u16],
    pub recv_src: &'a [i32],
    pub out: &'a [u16],
}

#[derive(Debug)]
pub struct CheckReport {
    pub ok: bool,
    pub rows_checked: usize,
    pub max_abs_err: f32,
    pub failure: Option<String>,
}

/// Compare the device's layout, received rows and combined output with the CPU reference.
pub fn check(
    me: usize,
    shape: &Shape,
    layouts: &[Layout],
    my_x: &[u16],
    my_idx: &[i32],
    my_w: &[f32],
    obs: &Observed,
) -> CheckReport {
    let (w, h, k, el) = (shape.world, shape.hidden, shape.topk, shape.experts_per_rank());
    let exp = expected(me, layouts, shape);
    let fail = |msg: String, rows: usize, err: f32| CheckReport {
        ok: false,
        rows_checked: rows,
        max_abs_err: err,
        failure: Some(msg),
    };
    let got = |i: usize| obs.meta[i] as i64;
    for r in 0..w {
        if got(r) != exp.send_base[r] as i64 {
            return fail(format!("send_base[{r}]={} expected {}", got(r), exp.send_base[r]), 0, 0.0);
        }
        if got(w + r) != exp.recv_base[r] as i64 {
            return fail(format!("recv_base[{r}]={} expected {}", got(w + r), exp.recv_base[r]), 0, 0.0);
        }
    }
    if got(2 * w) != exp.recv_total as i64 {
        return fail(format!("recv_total={} expected {}", got(2 * w), exp.recv_total), 0, 0.0);
    }
    for l in 0..el {
        if got(2 * w + 1 + l) != exp.expert_recv[l] as i64 {
            return fail(
                format!("tokens for local expert {l}: {} expected {}", got(2 * w + 1 + l), exp.expert_recv[l]),
                0,
                0.0,
            );
        }
    }
    // Every received row: right source token, bit-exact content.
    let mut row = vec![0u16; h];
    let mut rows = 0;
    for (s, lay) in layouts.iter().enumerate() {
        for t in 0..shape.tokens {
            let p = lay.pos[t * w + me];
            if p < 0 {
                continue;
            }
            let slot = exp.recv_base[s] + p as usize;
            if obs.recv_src[slot] != t as i32 {
                return fail(
                    format!("recv row {slot} (rank {s}'s chunk) holds token {}, expected {t}", obs.recv_src[slot]),
                    rows,
                    0.0,
                );
            }
            gen_row(s, t, &mut row);
            if obs.recv_x[slot * h..(slot + 1) * h] != row[..] {
                let j = (0..h).find(|&j| obs.recv_x[slot * h + j] != row[j]).unwrap_or(0);
                return fail(format!("recv row {slot} (rank {s} token {t}) differs at element {j}"), rows, 0.0);
            }
            rows += 1;
        }
    }
    // Combined output of every own token.
    let mut max_err = 0f32;
    let mut refrow = vec![0u16; h];
    let my_lay = &layouts[me];
    for t in 0..shape.tokens {
        let wr = rank_weights(&my_idx[t * k..(t + 1) * k], &my_w[t * k..(t + 1) * k], shape);
        let dests: Vec<(usize, f32)> = (0..w).filter(|&r| my_lay.pos[t * w + r] >= 0).map(|r| (r, wr[r])).collect();
        combine_row(&my_x[t * h..(t + 1) * h], &dests, &mut refrow);
        for (j, (&got, &want)) in obs.out[t * h..(t + 1) * h].iter().zip(&refrow).enumerate() {
            let (a, b) = (bf16_to_f32(got), bf16_to_f32(want));
            let err = (a - b).abs();
            // NaN (a 0xffff row never written) fails too.
            if err.is_nan() || err > 1e-2 * b.abs() + 1e-3 {
                return fail(format!("combined token {t} element {j}: {a} expected {b}"), rows, err.max(max_err));
            }
            max_err = max_err.max(err);
        }
    }
    CheckReport { ok: true, rows_checked: rows, max_abs_err: max_err, failure: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape { world: 3, tokens: 37, hidden: 16, experts: 12, topk: 3 }
    }

    #[test]
    fn bf16_round_trip_and_rounding() {
        for v in [0.0f32, 1.0, -1.5, 3.140625, 65280.0] {
            assert_eq!(bf16_to_f32(f32_to_bf16(v)), v);
        }
        // 1 + 2^-8 is halfway between two bf16 values: ties to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), f32_to_bf16(1.0));
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0 + 3.0 / 512.0)), 1.0078125);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn inputs_are_deterministic_and_distinct() {
        let s = shape();
        assert_eq!(gen_topk(1, &s), gen_topk(1, &s));
        assert_ne!(gen_topk(1, &s).0, gen_topk(2, &s).0);
        let (idx, w) = gen_topk(0, &s);
        for t in 0..s.tokens {
            let row = &idx[t * 3..t * 3 + 3];
            assert!(row[0] != row[1] && row[0] != row[2] && row[1] != row[2]);
            assert!(row.iter().all(|&e| e >= 0 && (e as usize) < s.experts));
        }
        assert!(w.iter().all(|&x| (0.05..1.0).contains(&x)));
        let mut a = vec![0u16; 16];
        let mut b = vec![0u16; 16];
        gen_row(0, 5, &mut a);
        gen_row(1, 5, &mut b);
        assert_ne!(a, b);
        assert!(a.iter().all(|&v| bf16_to_f32(v).abs() <= 1.0));
    }

    #[test]
    fn signal_layout_matches_header_formula() {
        let l = SignalLayout::new(4, 64);
        assert_eq!((l.counts, l.ecounts, l.nflag, l.bflag, l.words), (0, 32, 32 + 512, 32 + 512 + 4, 32 + 512 + 8));
    }

    #[test]
    fn layout_positions_are_dense_prefix_sums() {
        let s = shape();
        let (idx, _) = gen_topk(0, &s);
        let lay = layout(&idx, &s);
        for r in 0..s.world {
            let mut seen: Vec<i32> = (0..s.tokens).map(|t| lay.pos[t * s.world + r]).filter(|&p| p >= 0).collect();
            assert_eq!(seen.len(), lay.counts[r]);
            let sorted = seen.clone();
            seen.sort();
            assert_eq!(seen, sorted, "positions follow token order");
            assert_eq!(seen, (0..lay.counts[r] as i32).collect::<Vec<_>>());
        }
        assert_eq!(lay.expert_counts.iter().sum::<usize>(), s.tokens * s.topk);
    }

    /// (layouts, meta, recv_x, recv_src, out, x, topk_idx, topk_w)
    type Sim = (Vec<Layout>, Vec<i32>, Vec<u16>, Vec<i32>, Vec<u16>, Vec<u16>, Vec<i32>, Vec<f32>);

    /// Build what a correct device run would hold on rank `me`, entirely on the CPU.
    fn simulate(me: usize, s: &Shape) -> Sim {
        let tk: Vec<_> = (0..s.world).map(|r| gen_topk(r, s)).collect();
        let lays: Vec<_> = tk.iter().map(|(i, _)| layout(i, s)).collect();
        let e = expected(me, &lays, s);
        let mut meta = vec![0i32; meta_len(s)];
        for r in 0..s.world {
            meta[r] = e.send_base[r] as i32;
            meta[s.world + r] = e.recv_base[r] as i32;
        }
        meta[2 * s.world] = e.recv_total as i32;
        for (l, v) in e.expert_recv.iter().enumerate() {
            meta[2 * s.world + 1 + l] = *v as i32;
        }
        let h = s.hidden;
        let mut recv_x = vec![0u16; e.recv_total * h];
        let mut recv_src = vec![-1i32; e.recv_total];
        for (src, lay) in lays.iter().enumerate() {
            for t in 0..s.tokens {
                let p = lay.pos[t * s.world + me];
                if p >= 0 {
                    let slot = e.recv_base[src] + p as usize;
                    gen_row(src, t, &mut recv_x[slot * h..(slot + 1) * h]);
                    recv_src[slot] = t as i32;
                }
            }
        }
        let x = gen_x(me, s);
        let (idx, w) = tk[me].clone();
        let mut out = vec![0u16; s.tokens * h];
        for t in 0..s.tokens {
            let wr = rank_weights(&idx[t * s.topk..(t + 1) * s.topk], &w[t * s.topk..(t + 1) * s.topk], s);
            let d: Vec<_> = (0..s.world).filter(|&r| lays[me].pos[t * s.world + r] >= 0).map(|r| (r, wr[r])).collect();
            combine_row(&x[t * h..(t + 1) * h], &d, &mut out[t * h..(t + 1) * h]);
        }
        (lays, meta, recv_x, recv_src, out, x, idx, w)
    }

    #[test]
    fn check_accepts_a_correct_run_and_catches_each_kind_of_error() {
        let s = shape();
        let me = 1;
        let (lays, meta, recv_x, recv_src, out, x, idx, w) = simulate(me, &s);
        let run = |meta: &[i32], rx: &[u16], rs: &[i32], o: &[u16]| {
            check(me, &s, &lays, &x, &idx, &w, &Observed { meta, recv_x: rx, recv_src: rs, out: o })
        };
        let good = run(&meta, &recv_x, &recv_src, &out);
        assert!(good.ok, "{:?}", good.failure);
        assert!(good.rows_checked > 0);
        assert_eq!(good.max_abs_err, 0.0);

        let mut m2 = meta.clone();
        m2[2 * s.world] += 1;
        assert!(!run(&m2, &recv_x, &recv_src, &out).ok);

        let mut rx = recv_x.clone();
        rx[5] ^= 1;
        let r = run(&meta, &rx, &recv_src, &out);
        assert!(!r.ok && r.failure.unwrap().contains("differs"));

        let mut rs = recv_src.clone();
        rs.swap(0, 1);
        assert!(!run(&meta, &recv_x, &rs, &out).ok);

        let mut o = out.clone();
        o[7] = f32_to_bf16(bf16_to_f32(o[7]) + 0.5);
        let r = run(&meta, &recv_x, &recv_src, &o);
        assert!(!r.ok && r.failure.unwrap().contains("combined"));
    }

    #[test]
    fn validation_names_the_bad_flag() {
        let ok = Shape { world: 4, tokens: 4096, hidden: 7168, experts: 256, topk: 8 };
        assert!(ok.validate().is_ok());
        assert!(Shape { hidden: 7, ..ok }.validate().unwrap_err().contains("--hidden"));
        assert!(Shape { experts: 250, ..ok }.validate().unwrap_err().contains("--experts"));
        assert!(Shape { topk: 300, ..ok }.validate().unwrap_err().contains("--topk"));
        assert!(Shape { world: 33, ..ok }.validate().unwrap_err().contains("--world"));
        assert!(Shape { tokens: 0, ..ok }.validate().unwrap_err().contains("--tokens"));
    }
}
