//! Runs the side paths of one or several LoRA pairs that read the same input (q, k and v read
//! one normalised row, as do gate and up): each token's row is normalised and rounded once for
//! all of them, a token's A stages run before any B stage, and the pool is forked once per
//! stage for the set instead of once per matrix. Every output is the same dot in the same
//! order however the work is split, so the bits are those of one pair at a time.

use std::cell::Cell;

use rayon::prelude::*;

use super::Rows;
use crate::attention::F16SumOrder;
use crate::dispatch::{kernels, Kernels};
use crate::norm::{rms_norm_row, rms_scale, Input};
use crate::packed::RowsThen;
use crate::{KernelError, Weights};

/// One pair of a call: A (r, cols), B (rows, r), its scale, and the (n, rows) outputs it adds to.
pub struct LoraPair<'w, 'o> {
    pub a: Weights<'w>,
    pub b: Weights<'w>,
    pub scale: f32,
    pub out: &'o mut [f32],
}

thread_local! {
    /// One task's input row (normalised, rounded) and `x A^T` for its tokens and pairs: per
    /// thread, reused from call to call, so decode allocates nothing once the first call has
    /// sized them.
    static SCRATCH: Cell<(Vec<f32>, Vec<f32>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// Bytes of weights times tokens below which the pool's fork-join costs more than it saves.
const PAR_MIN_WORK: usize = 256 * 1024;

/// For one token, the A matrices of a call when they total at least this many bytes, and each
/// B matrix of at least this many, have their rows split over the pool: one core reads a 3B
/// model's side paths far slower than the memory bus allows (docs/benchmarks-log.md, issue 21), while the
/// default model's (q, k and v's A: 54 KiB; its largest B: 48 KiB) are done before a fork-join
/// would be.
const PAR_MIN_BYTES: usize = 64 * 1024;

/// Adds the side path of the pair `a` (r, cols), `b` (rows, r) for `n` tokens of `x` (n, cols)
/// to `out` (n, rows): `out += scale * ((x A^T) B^T)`, rounded and summed as ggml does (see
/// the module's comment). A and B may be F32, F16 or BF16, each on its own. `order` is the
/// order the pass sums its f16 dots in: [`F16SumOrder::for_batch`] of its tokens, or one
/// row's for a batch that must carry the bits of single steps (speculative verification);
/// tinyBLAS's order is used only where the pass's is tinyBLAS's and ggml's matmul would take
/// these `n` tokens there too.
pub fn lora_add(
    a: &Weights,
    b: &Weights,
    x: Input,
    n: usize,
    order: F16SumOrder,
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let pair = LoraPair {
        a: *a,
        b: *b,
        scale,
        out,
    };
    lora_add_fused([Some(pair)], x, n, order)
}

/// [`lora_add`] for several pairs that read the same `x`, each into its own `out` (`None`: a
/// layer without one): the same bits as one call per pair, with `x`'s rows normalised and
/// rounded once for the set (when the A matrices share a type) and one fork-join of the pool
/// per stage. Nothing is added unless every pair fits.
pub fn lora_add_fused<const N: usize>(
    mut pairs: [Option<LoraPair>; N],
    x: Input,
    n: usize,
    order: F16SumOrder,
) -> Result<(), KernelError> {
    for p in pairs.iter().flatten() {
        check(p, x, n)?;
    }
    let mut copies: [(Vec<f32>, Vec<f32>); N] = std::array::from_fn(|_| Default::default());
    let matrices = pairs
        .each_ref()
        .map(|p| p.as_ref().map(|p| (p.a, p.b, p.scale)));
    let stages = stages_of(matrices, (n, order), &mut copies)?;
    let Some(first) = stages.iter().flatten().next().copied() else {
        return Ok(());
    };
    // One rounded input serves the set only if every A rounds it the same way.
    if stages.iter().flatten().any(|s| !s.a.rounds_as(first.a)) {
        for p in pairs {
            lora_add_fused([p], x, n, order)?;
        }
        return Ok(());
    }
    if n == 0 {
        return Ok(());
    }
    let plan = Plan {
        stages: &stages,
        // Every pair's A is as wide as a row of `x` (checked above).
        cols: x.rows().len() / n,
        x,
        k: kernels(),
    };
    let threads = rayon::current_num_threads();
    let work = stages
        .iter()
        .flatten()
        .map(|s| s.a_bytes + s.b_bytes)
        .sum::<usize>()
        .saturating_mul(n);
    let mut outs: [&mut [f32]; N] = std::array::from_fn(|_| Default::default());
    for (o, p) in outs.iter_mut().zip(pairs.iter_mut()) {
        if let Some(p) = p {
            *o = &mut *p.out;
        }
    }
    if n == 1 {
        plan.one_token(outs, threads);
    } else if work < PAR_MIN_WORK || threads < 2 {
        plan.tokens(0, outs);
    } else {
        // Tokens split over the pool; each task runs every pair for its tokens.
        let per_task = n.div_ceil(4 * threads).max(1);
        let mut tasks: Vec<[&mut [f32]; N]> = Vec::new();
        tasks.resize_with(n.div_ceil(per_task), || {
            std::array::from_fn(|_| Default::default())
        });
        for (i, (o, s)) in outs.into_iter().zip(&stages).enumerate() {
            let Some(s) = s else { continue };
            for (task, o) in tasks.iter_mut().zip(o.chunks_mut(per_task * s.rows.max(1))) {
                task[i] = o;
            }
        }
        tasks
            .into_par_iter()
            .enumerate()
            .for_each(|(t, outs)| plan.tokens(t * per_task, outs));
    }
    Ok(())
}

/// Checks one pair against `x` and its `out`.
fn check(p: &LoraPair, x: Input, n: usize) -> Result<(), KernelError> {
    check_shapes((&p.a, &p.b), x, n, p.out.len())
}

/// Checks A and B against each other, `x` (n tokens) and an output of `out_len` values.
fn check_shapes(
    (a, b): (&Weights, &Weights),
    x: Input,
    n: usize,
    out_len: usize,
) -> Result<(), KernelError> {
    a.check()?;
    b.check()?;
    x.check(n, a.cols)?;
    if b.cols != a.rows {
        return Err(KernelError::Length {
            what: "lora_b's columns (the rank of lora_a)",
            unit: "columns",
            expected: a.rows,
            got: b.cols,
        });
    }
    let expected = n.checked_mul(b.rows).ok_or(KernelError::Overflow {
        what: "out",
        rows: n,
        cols: b.rows,
    })?;
    if out_len != expected {
        return Err(KernelError::Length {
            what: "out",
            unit: "values",
            expected,
            got: out_len,
        });
    }
    Ok(())
}

/// One pair of [`lora_one_token_then`]: A (r, cols), B (rows, r), its scale, and the length
/// of the output (one token's `rows` values) its B stage will add to.
#[derive(Clone, Copy)]
pub struct LoraSide<'w> {
    pub a: Weights<'w>,
    pub b: Weights<'w>,
    pub scale: f32,
    pub out_len: usize,
}

/// The side paths of one token (decode) with their B stages left to the base matmul's tasks:
/// runs every pair's A stage now (over the pool when large, as [`lora_add_fused`] does), then
/// `then` with an adder `add(i, first, rows)` that adds pair `i`'s B stage to that pair's
/// output rows `first..first + rows.len()`; `then` passes it to
/// [`crate::matvec_fused_then`], so the rows are added by the task that has just written
/// them and the pool is forked once for base and B instead of twice. The sums are those of
/// [`lora_add_fused`] for one token, bit for bit, however the rows are split. Every pair is
/// checked before anything runs; an adder call outside a pair's rows adds nothing.
pub fn lora_one_token_then<const N: usize, R>(
    pairs: [Option<LoraSide>; N],
    x: Input,
    order: F16SumOrder,
    then: impl FnOnce(&RowsThen<'_>) -> R,
) -> Result<R, KernelError> {
    for p in pairs.iter().flatten() {
        check_shapes((&p.a, &p.b), x, 1, p.out_len)?;
    }
    let mut copies: [(Vec<f32>, Vec<f32>); N] = std::array::from_fn(|_| Default::default());
    let matrices = pairs.map(|p| p.map(|p| (p.a, p.b, p.scale)));
    let stages = stages_of(matrices, (1, order), &mut copies)?;
    let Some(first) = stages.iter().flatten().next().copied() else {
        return Ok(then(&|_, _, _| {}));
    };
    let (k, threads) = (kernels(), rayon::current_num_threads());
    let (mut xr, mut xa) = SCRATCH.take();
    let mut parts = split_by_rank(&mut xa, &stages);
    let cols = x.rows().len();
    if stages.iter().flatten().all(|s| s.a.rounds_as(first.a)) {
        let plan = Plan {
            stages: &stages,
            cols,
            x,
            k,
        };
        plan.input_row(0, &mut xr);
        plan.a_stages(&xr, &mut parts, threads);
    } else {
        // A matrices of different types each take the input rounded their own way.
        for (part, s) in parts.iter_mut().zip(&stages) {
            let one = [*s];
            let plan = Plan {
                stages: &one,
                cols,
                x,
                k,
            };
            plan.input_row(0, &mut xr);
            plan.a_stages(&xr, std::slice::from_mut(part), threads);
        }
    }
    for (part, s) in parts.iter_mut().zip(&stages) {
        if let Some(s) = s {
            s.b.round(part);
        }
    }
    let parts = parts.map(|p| &*p);
    let add = |i: usize, first: usize, out: &mut [f32]| {
        let (Some(Some(s)), Some(xa)) = (stages.get(i), parts.get(i)) else {
            return;
        };
        if first.saturating_add(out.len()) <= s.rows {
            s.b.sub(first, out.len(), s.rank)
                .add_dots(k, xa, s.scale, out);
        }
    };
    let result = then(&add);
    SCRATCH.set((xr, xa));
    Ok(result)
}

/// Each pair's stage (`None` where a layer has none) from its A, B and scale, viewed for `n`
/// tokens of a pass summing in `order`; F32 matrices that must be copied to be read as floats
/// are copied into `copies`.
fn stages_of<'a, const N: usize>(
    matrices: [Option<(Weights<'a>, Weights<'a>, f32)>; N],
    (n, order): (usize, F16SumOrder),
    copies: &'a mut [(Vec<f32>, Vec<f32>); N],
) -> Result<[Option<Stage<'a>>; N], KernelError> {
    let mut stages = [None; N];
    for ((m, (ca, cb)), s) in matrices
        .iter()
        .zip(copies.iter_mut())
        .zip(stages.iter_mut())
    {
        if let Some((a, b, scale)) = m {
            *s = Some(Stage {
                a: Rows::of(a, "lora_a", (n, order), ca)?,
                b: Rows::of(b, "lora_b", (n, order), cb)?,
                rank: a.rows,
                rows: b.rows,
                a_bytes: a.data.len(),
                b_bytes: b.data.len(),
                scale: *scale,
            });
        }
    }
    Ok(stages)
}

/// `xa` sized to every stage's rank and cut into one part per stage (empty where none), where
/// each pair's `x A^T` goes.
fn split_by_rank<'x, const N: usize>(
    xa: &'x mut Vec<f32>,
    stages: &[Option<Stage>; N],
) -> [&'x mut [f32]; N] {
    let ranks = stages.map(|s| s.map_or(0, |s| s.rank));
    xa.resize(ranks.iter().sum(), 0.0);
    let mut parts: [&mut [f32]; N] = std::array::from_fn(|_| Default::default());
    let mut rest = &mut xa[..];
    for (part, rank) in parts.iter_mut().zip(ranks) {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(rank);
        *part = head;
        rest = tail;
    }
    parts
}

/// One pair's matrices in their types, and what the schedule needs to know of them.
#[derive(Clone, Copy)]
struct Stage<'a> {
    a: Rows<'a>,
    b: Rows<'a>,
    rank: usize,
    rows: usize,
    a_bytes: usize,
    b_bytes: usize,
    scale: f32,
}

/// A call's pairs (`None` where a layer has none), its input and the kernels: what every task
/// reads.
struct Plan<'s, 'a, 'x, const N: usize> {
    stages: &'s [Option<Stage<'a>>; N],
    cols: usize,
    x: Input<'x>,
    k: &'static Kernels,
}

impl<const N: usize> Plan<'_, '_, '_, N> {
    /// Token `t`'s row of `x`, normalised if `x` asks for it, rounded as the A matrices take it.
    fn input_row(&self, t: usize, xr: &mut Vec<f32>) {
        let cols = self.cols;
        xr.resize(cols, 0.0);
        match self.x {
            Input::Rows(all) => xr.copy_from_slice(&all[t * cols..(t + 1) * cols]),
            Input::RmsNormed { rows, weight, eps } => {
                let row = &rows[t * cols..(t + 1) * cols];
                rms_norm_row(row, weight, rms_scale(row, eps), xr);
            }
        }
        if let Some(s) = self.stages.iter().flatten().next() {
            s.a.round(xr);
        }
    }

    /// Tokens `first..` (as many as the outputs hold) on the calling thread: each token's row
    /// made once and its A stages run into the scratch, then each pair's B stage for all the
    /// tokens.
    fn tokens(&self, first: usize, mut outs: [&mut [f32]; N]) {
        let (mut xr, mut xa) = SCRATCH.take();
        let count = self
            .stages
            .iter()
            .zip(outs.iter())
            .find_map(|(s, o)| s.filter(|s| s.rows > 0).map(|s| o.len() / s.rows))
            .unwrap_or(0);
        let total_rank: usize = self.stages.iter().flatten().map(|s| s.rank).sum();
        xa.resize(count * total_rank, 0.0);
        for t in 0..count {
            self.input_row(first + t, &mut xr);
            let mut at = 0;
            for s in self.stages.iter().flatten() {
                let block = &mut xa[at * count..(at + s.rank) * count];
                s.a.dots(self.k, &xr, &mut block[t * s.rank..(t + 1) * s.rank]);
                at += s.rank;
            }
        }
        let mut at = 0;
        for (s, out) in self.stages.iter().zip(outs.iter_mut()) {
            let Some(s) = s else { continue };
            let block = &mut xa[at * count..(at + s.rank) * count];
            s.b.round(block);
            s.b.add_dots_tokens(self.k, block, (s.rank, s.rows), s.scale, out);
            at += s.rank;
        }
        SCRATCH.set((xr, xa));
    }

    /// Every pair's `x A^T` for one token's row `xr` into its part, over the pool when the A
    /// matrices are large ([`PAR_MIN_BYTES`]), else on the calling thread.
    fn a_stages(&self, xr: &[f32], parts: &mut [&mut [f32]], threads: usize) {
        let (k, cols) = (self.k, self.cols);
        let a_bytes: usize = self.stages.iter().flatten().map(|s| s.a_bytes).sum();
        if threads > 1 && a_bytes >= PAR_MIN_BYTES {
            let most = self.stages.iter().flatten().map(|s| s.rank).max();
            let chunk = most.unwrap_or(1).div_ceil(threads).max(1);
            parts
                .par_iter_mut()
                .zip(self.stages.par_iter())
                .for_each(|(part, s)| {
                    let Some(s) = s else { return };
                    part.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| {
                        s.a.sub(c * chunk, o.len(), cols).dots(k, xr, o);
                    })
                });
        } else {
            for (part, s) in parts.iter_mut().zip(self.stages) {
                if let Some(s) = s {
                    s.a.dots(k, xr, part);
                }
            }
        }
    }

    /// One token (decode): the row made once; the A stages, then the B stages, each over the
    /// pool when their matrices are large ([`PAR_MIN_BYTES`]), else on the calling thread.
    fn one_token(&self, mut outs: [&mut [f32]; N], threads: usize) {
        let (mut xr, mut xa) = SCRATCH.take();
        self.input_row(0, &mut xr);
        let mut parts = split_by_rank(&mut xa, self.stages);
        self.a_stages(&xr, &mut parts, threads);
        let (k, each) = (self.k, self.stages.iter().flatten());
        for (part, s) in parts.iter_mut().zip(self.stages) {
            if let Some(s) = s {
                s.b.round(part);
            }
        }
        // A B matrix is split only when large on its own: the default model's largest (48
        // KiB) is done before a fork-join would be, even beside its twin (gate and up).
        let split = |s: &Stage| s.b_bytes >= PAR_MIN_BYTES;
        if threads > 1 && each.clone().any(split) {
            // Chunks of whole 8-row groups, so each row is summed as it is unsplit.
            outs.par_iter_mut()
                .zip(parts.par_iter())
                .zip(self.stages.par_iter())
                .for_each(|((out, xa), s)| {
                    let Some(s) = s else { return };
                    let chunk = match split(s) {
                        true => s.rows.div_ceil(2 * threads).next_multiple_of(8).max(8),
                        false => s.rows.max(1),
                    };
                    out.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| {
                        s.b.sub(c * chunk, o.len(), s.rank)
                            .add_dots(k, xa, s.scale, o)
                    })
                });
        } else {
            for ((out, xa), s) in outs.iter_mut().zip(parts.iter()).zip(self.stages) {
                if let Some(s) = s {
                    s.b.add_dots(k, xa, s.scale, out);
                }
            }
        }
        SCRATCH.set((xr, xa));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lora::tests::{both_inputs, halves, two_matmuls};
    use crate::testutil::*;
    use crate::GgmlType;

    /// [`lora_add_fused`] for a list of the lengths the test uses.
    fn fused(
        list: Vec<Option<LoraPair>>,
        x: Input,
        n: usize,
        order: F16SumOrder,
    ) -> Result<(), KernelError> {
        let len = list.len();
        let mut list = list.into_iter();
        let mut next = || list.next().flatten();
        match len {
            3 => lora_add_fused([next(), next(), next()], x, n, order),
            4 => lora_add_fused([next(), next(), next(), next()], x, n, order),
            6 => lora_add_fused(std::array::from_fn::<_, 6, _>(|_| next()), x, n, order),
            len => panic!("no case for {len} pairs"),
        }
    }

    /// A pair's rank, B's rows and A's type.
    type Shape = (usize, usize, GgmlType);

    /// Pairs of the shapes `(rank, rows, a type)` over `cols` columns, random, F16 B.
    fn pairs(r: &mut Rng, cols: usize, shapes: &[Shape]) -> Vec<(Vec<u8>, Vec<u8>)> {
        shapes
            .iter()
            .map(|&(rank, rows, ta)| {
                let a = random_f32(r, rank * cols, 0.1);
                let a = match ta {
                    GgmlType::F32 => a.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    _ => halves(&a),
                };
                (a, halves(&random_f32(r, rows * rank, 0.1)))
            })
            .collect()
    }

    /// The fused call gives every pair the bits of the two matmuls ggml runs for it alone: one
    /// token with A and B over the pool (a 3B layer's q, k, v), one token on the calling
    /// thread, a prompt split over the pool and one that is not, A matrices of two types (each
    /// rounds the input its own way) and more pairs than one group holds.
    #[test]
    fn fused_pairs_equal_each_pair_alone_bit_for_bit() {
        use GgmlType::{F16, F32};
        let mut r = rng(94);
        let cases: [(usize, usize, &[Shape]); 6] = [
            (
                1,
                3072,
                &[(16, 3072, F16), (16, 1024, F16), (16, 1024, F16)],
            ),
            (1, 576, &[(16, 576, F16), (8, 192, F16), (16, 192, F16)]),
            (70, 256, &[(16, 512, F16), (16, 512, F16)]),
            (3, 64, &[(8, 40, F16), (16, 24, F16)]),
            (2, 64, &[(8, 40, F16), (8, 24, F32)]),
            (
                4,
                32,
                &[
                    (8, 8, F16),
                    (8, 16, F16),
                    (8, 24, F16),
                    (8, 8, F16),
                    (8, 32, F16),
                ],
            ),
        ];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (n, cols, shapes) in cases {
            let data = pairs(&mut r, cols, shapes);
            let weights: Vec<(Weights, Weights)> = data
                .iter()
                .zip(shapes)
                .map(|((da, db), &(rank, rows, ta))| {
                    (
                        Weights::new(ta, da, rank, cols).unwrap(),
                        Weights::new(F16, db, rows, rank).unwrap(),
                    )
                })
                .collect();
            let x = random_f32(&mut r, n * cols, 2.0);
            let norm = random_f32(&mut r, cols, 1.0);
            let starts: Vec<Vec<f32>> = shapes
                .iter()
                .map(|&(_, rows, _)| random_f32(&mut r, n * rows, 1.0))
                .collect();
            for input in both_inputs(&x, &norm) {
                let mut got = starts.clone();
                let mut list: Vec<Option<LoraPair>> = weights
                    .iter()
                    .zip(got.iter_mut())
                    .enumerate()
                    .map(|(i, ((a, b), out))| {
                        Some(LoraPair {
                            a: *a,
                            b: *b,
                            scale: 0.5 + i as f32,
                            out,
                        })
                    })
                    .collect();
                // A layer without a pair between them, as an adapter on q and v only leaves k.
                list.insert(1, None);
                let order = F16SumOrder::for_batch(n);
                pool.install(|| fused(list, input, n, order)).unwrap();
                for (i, ((a, b), (got, start))) in
                    weights.iter().zip(got.iter().zip(&starts)).enumerate()
                {
                    let mut want = start.clone();
                    two_matmuls(a, b, input, n, 0.5 + i as f32, &mut want);
                    assert!(
                        got.iter()
                            .zip(&want)
                            .all(|(g, w)| g.to_bits() == w.to_bits()),
                        "n {n} cols {cols} pair {i} of {shapes:?}"
                    );
                }
            }
        }
    }

    /// A decode step's B stages riding in the base matmul's tasks give the bits of the base
    /// matmul and then the side paths as one call: a 3B-sized set whose A and largest B go over
    /// the pool, A matrices of two types, a matrix without a pair, base matrices run one by
    /// one (mixed formats), on one thread and on three.
    #[test]
    fn b_stages_in_the_matmul_tasks_equal_the_matmul_then_the_side_paths() {
        use crate::{matvec_fused, matvec_fused_then, PackedWeights};
        use GgmlType::{F16, F32, Q4_0, Q4_1, Q8_0};
        let mut r = rng(96);
        let cols = 1536;
        // (base format, rows, the pair's rank and A type; None: no pair)
        type Matrix = (GgmlType, usize, Option<(usize, GgmlType)>);
        let cases: [&[Matrix]; 3] = [
            &[
                (Q4_1, 2048, Some((16, F16))),
                (Q4_1, 256, None),
                (Q4_1, 256, Some((8, F16))),
            ],
            &[(Q4_0, 1024, Some((16, F16))), (Q4_0, 64, Some((16, F32)))],
            &[(Q4_0, 1024, Some((16, F16))), (Q8_0, 64, Some((8, F16)))],
        ];
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (c, set) in cases.iter().enumerate() {
            let bytes: Vec<Vec<u8>> = set
                .iter()
                .map(|&(ty, rows, _)| {
                    random_f32(&mut r, rows * cols, 0.1)
                        .chunks_exact(cols)
                        .flat_map(|row| crate::quantize_row(ty, row).unwrap())
                        .collect()
                })
                .collect();
            let packed: Vec<PackedWeights> = set
                .iter()
                .zip(&bytes)
                .map(|(&(ty, rows, _), b)| {
                    let w = Weights::new(ty, b, rows, cols).unwrap();
                    PackedWeights::pack_any_cpu(&w).unwrap().unwrap()
                })
                .collect();
            let shapes: Vec<Shape> = set
                .iter()
                .map(|&(_, rows, p)| p.map_or((8, rows, F16), |(rank, ta)| (rank, rows, ta)))
                .collect();
            let data = pairs(&mut r, cols, &shapes);
            let weights: Vec<Option<(Weights, Weights)>> = set
                .iter()
                .zip(&data)
                .zip(&shapes)
                .map(|((&(_, _, p), (da, db)), &(rank, rows, ta))| {
                    p.map(|_| {
                        (
                            Weights::new(ta, da, rank, cols).unwrap(),
                            Weights::new(F16, db, rows, rank).unwrap(),
                        )
                    })
                })
                .collect();
            let x = random_f32(&mut r, cols, 2.0);
            let norm = random_f32(&mut r, cols, 1.0);
            let refs: Vec<&PackedWeights> = packed.iter().collect();
            for input in both_inputs(&x, &norm) {
                for pool in [&one, &three] {
                    let zeros = || -> Vec<Vec<f32>> {
                        set.iter().map(|&(_, rows, _)| vec![0.0; rows]).collect()
                    };
                    let (mut want, mut got) = (zeros(), zeros());
                    pool.install(|| {
                        let mut outs: Vec<&mut [f32]> =
                            want.iter_mut().map(|o| &mut o[..]).collect();
                        matvec_fused(&refs, input, &mut outs).unwrap();
                        let list: Vec<Option<LoraPair>> = weights
                            .iter()
                            .zip(outs)
                            .enumerate()
                            .map(|(i, (w, out))| {
                                w.map(|(a, b)| LoraPair {
                                    a,
                                    b,
                                    scale: 0.5 + i as f32,
                                    out,
                                })
                            })
                            .collect();
                        let mut list = list.into_iter();
                        let mut next = || list.next().flatten();
                        match set.len() {
                            3 => lora_add_fused(
                                [next(), next(), next()],
                                input,
                                1,
                                F16SumOrder::VecDot,
                            ),
                            _ => lora_add_fused([next(), next()], input, 1, F16SumOrder::VecDot),
                        }
                        .unwrap();
                    });
                    pool.install(|| {
                        let side = |i: usize| {
                            let w: &Option<(Weights, Weights)> = &weights[i];
                            w.map(|(a, b)| LoraSide {
                                a,
                                b,
                                scale: 0.5 + i as f32,
                                out_len: b.rows,
                            })
                        };
                        let mut outs: Vec<&mut [f32]> =
                            got.iter_mut().map(|o| &mut o[..]).collect();
                        let run = |add: &RowsThen| {
                            matvec_fused_then(&refs, input, &mut outs, Some(add)).unwrap()
                        };
                        match set.len() {
                            3 => lora_one_token_then(
                                [side(0), side(1), side(2)],
                                input,
                                F16SumOrder::VecDot,
                                run,
                            ),
                            _ => lora_one_token_then(
                                [side(0), side(1)],
                                input,
                                F16SumOrder::VecDot,
                                run,
                            ),
                        }
                        .unwrap();
                    });
                    for (m, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            g.iter().zip(w).all(|(g, w)| g.to_bits() == w.to_bits()),
                            "case {c} matrix {m}, {} threads",
                            pool.current_num_threads()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_pair_of_the_set_that_does_not_fit_is_an_error_and_nothing_is_added() {
        let mut r = rng(95);
        let data = pairs(&mut r, 32, &[(8, 8, GgmlType::F16), (8, 8, GgmlType::F16)]);
        let a0 = Weights::new(GgmlType::F16, &data[0].0, 8, 32).unwrap();
        let b0 = Weights::new(GgmlType::F16, &data[0].1, 8, 8).unwrap();
        let (mut o0, mut o1) = (vec![1.0; 8], vec![1.0; 7]);
        let list = [
            Some(LoraPair {
                a: a0,
                b: b0,
                scale: 1.0,
                out: &mut o0,
            }),
            Some(LoraPair {
                a: a0,
                b: b0,
                scale: 1.0,
                out: &mut o1,
            }),
        ];
        let x = random_f32(&mut r, 32, 1.0);
        let err = lora_add_fused(list, Input::Rows(&x), 1, F16SumOrder::VecDot).unwrap_err();
        assert!(err.to_string().contains("out"), "{err}");
        assert!(
            o0.iter().all(|&v| v == 1.0),
            "the first pair was added before the error"
        );
    }
}
