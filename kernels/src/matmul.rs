//! `matmul`: packed weights times a batch of activation rows. Activations are quantized once per
//! call into the weight format's partner format, then rows of the weight matrix are split over
//! the rayon pool in chunks; with several tokens each chunk walks tiles of tokens so its weight
//! rows stay in cache while they are reused.

use std::cell::Cell;
use std::thread::LocalKey;

use rayon::prelude::*;

use crate::block::{cast_blocks, f32_view, ByteBlock};
#[cfg(target_arch = "x86_64")]
use crate::dispatch::KLanes;
use crate::dispatch::{kernels, Bf16Pairs, GemmEntry, Kernels};
use crate::formats::bf16::BF16;
use crate::formats::f16::F16;
use crate::formats::iq4_nl::BlockIq4Nl;
use crate::formats::iq4_xs::BlockIq4Xs;
#[cfg(target_arch = "x86_64")]
use crate::formats::k_lanes::{LaneFormat, Q8KLanes, Unpacked, LANES};
use crate::formats::q2_k::BlockQ2K;
use crate::formats::q3_k::BlockQ3K;
use crate::formats::q4_0::BlockQ4_0;
use crate::formats::q4_1::BlockQ4_1;
use crate::formats::q4_k::BlockQ4K;
use crate::formats::q4x8;
use crate::formats::q5_0::BlockQ5_0;
use crate::formats::q5_1::BlockQ5_1;
#[cfg(target_arch = "x86_64")]
use crate::formats::q5_1_lanes::{Q8_1Lanes, Unpacked as UnpackedQ5_1};
use crate::formats::q5_k::BlockQ5K;
use crate::formats::q6_k::BlockQ6K;
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_1::BlockQ8_1;
use crate::formats::q8_k::BlockQ8K;
use crate::formats::{each_row, each_token};
use crate::norm::Input;
use crate::packed::RowsThen;
use crate::{GgmlType, KernelError, PackedWeights, Weights};

/// Below this much work (weight bytes times tokens) a matmul runs on the calling thread: waking
/// the pool costs a few microseconds, as much as streaming this many bytes.
const PAR_MIN_WORK: usize = 24 * 1024;

/// The smallest batch llama.cpp's x86 builds multiply K-quant weights with its tiled matmul
/// (`ggml_tiled_min_batch`), whose float order differs from the row dot's; our batch kernels for
/// those formats follow it from this many tokens on.
pub(crate) const TILED_MIN_TOKENS: usize = 8;

/// Activation bytes per token tile in the multi-token path: small enough to share L2 with a
/// chunk of weight rows.
const TOKEN_TILE_BYTES: usize = 16 * 1024;

thread_local! {
    // Reused activation buffers. They are taken out of the cell for the duration of a call,
    // so a nested call on the same thread (a rayon worker running another matmul while it
    // waits) finds an empty buffer and allocates its own instead of aliasing this one.
    static ACT_Q8_1: Cell<Vec<BlockQ8_1>> = const { Cell::new(Vec::new()) };
    static ACT_Q8_K: Cell<Vec<BlockQ8K>> = const { Cell::new(Vec::new()) };
    static SCRATCH: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static ACT_SUMS: Cell<Vec<i32>> = const { Cell::new(Vec::new()) };
    // Normalised rows for the float formats, which multiply f32 activations and so cannot
    // normalise them on the way into a quantizer.
    static NORMED: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    // Activations packed to bfloat16 for `vdpbf16ps`.
    static ACT_BF16: Cell<Vec<BF16>> = const { Cell::new(Vec::new()) };
    // Q8_K activations transposed 16 tokens to a group, and a row tile's unpacked weights,
    // for the kernels with tokens in the lanes.
    #[cfg(target_arch = "x86_64")]
    static ACT_LANES: Cell<Vec<Q8KLanes>> = const { Cell::new(Vec::new()) };
    #[cfg(target_arch = "x86_64")]
    static UNPACKED: Cell<Vec<Unpacked>> = const { Cell::new(Vec::new()) };
    #[cfg(target_arch = "x86_64")]
    static ACT_LANES_Q8_1: Cell<Vec<Q8_1Lanes>> = const { Cell::new(Vec::new()) };
    #[cfg(target_arch = "x86_64")]
    static UNPACKED_Q5_1: Cell<Vec<UnpackedQ5_1>> = const { Cell::new(Vec::new()) };
}

/// The float formats: f32 activations against each row (normalised first into a thread-local
/// buffer for [`Input::RmsNormed`], since there is no quantizer to do it on the way).
fn float_matmul<W: Sync>(
    k: &'static Kernels,
    w: &[W],
    cols: usize,
    x: Input,
    shape: Shape,
    out: &mut [f32],
    dot: fn(&Kernels, &[W], &[f32]) -> f32,
) {
    let normed_len = match x {
        Input::Rows(_) => 0,
        Input::RmsNormed { rows, .. } => rows.len(),
    };
    with_buffer(&NORMED, normed_len, |buf| {
        run(
            w,
            cols,
            x.materialize(cols, buf),
            cols,
            shape,
            out,
            |w, a, o| each_token(|w, a| dot(k, w, a), w, a, o),
            |w, a, o| each_row(|w, a| dot(k, w, a), w, a, o),
        )
    });
}

/// BF16 as ggml multiplies it: the activations rounded to bfloat16 first (its `vec_dot_type`),
/// then one token's rows in `ggml_vec_dot_bf16`'s order and a batch's in tinyBLAS's (which
/// llama.cpp runs for two tokens or more when rows are a multiple of 8 long and their number a
/// multiple of 4). Where the CPU has AVX512_BF16, the activations are packed to bfloat16 and
/// multiplied on `vdpbf16ps` in the orders of llama.cpp's AVX-512 builds ([`bf16_pairs_matmul`]).
fn bf16_matmul(
    k: &'static Kernels,
    w: &[BF16],
    cols: usize,
    x: Input,
    shape: Shape,
    out: &mut [f32],
) {
    use crate::formats::bf16::{bf16_to_f32, f32_to_bf16};
    if let Some(pairs) = k.bf16_pairs() {
        // Normalised and packed a few tokens per task, as the quantized formats' activations
        // are (one "block" per element).
        with_buffer(&ACT_BF16, shape.n_tok * cols, |act| {
            quantize_tokens(x, cols, act, cols, shape, |x, a| pairs.pack(x, a));
            bf16_pairs_matmul(pairs, w, cols, act, shape, out);
        });
        return;
    }
    with_buffer(&NORMED, shape.n_tok * cols, |buf| {
        if let Input::Rows(rows) = x {
            buf.copy_from_slice(rows);
        } else {
            x.materialize(cols, buf);
        }
        for v in buf.iter_mut() {
            *v = bf16_to_f32(f32_to_bf16(*v));
        }
        // tinyBLAS's conditions (the LoRA side path's F16 and BF16 stages share them).
        let batch = shape.n_tok >= 2 && cols.is_multiple_of(8) && shape.rows.is_multiple_of(4);
        run(
            w,
            cols,
            buf,
            cols,
            shape,
            out,
            |w, a, o| {
                if batch {
                    k.dot_bf16_batch(w, a, o)
                } else {
                    each_token(|w, a| k.dot_bf16_token(w, a), w, a, o)
                }
            },
            |w, a, o| each_row(|w, a| k.dot_bf16_token(w, a), w, a, o),
        )
    });
}

/// BF16 weights against packed bfloat16 activations on `vdpbf16ps`
/// ([`crate::formats::bf16_pairs`]): a batch that tinyBLAS takes (two tokens or more, rows a
/// multiple of its 32-element step long and their number of its 4-row tile) in tiles of 4
/// rows by up to 4 tokens, bands of row tiles meeting every token while they sit in L1; one
/// token, or a batch tinyBLAS refuses, in `ggml_vec_dot_bf16`'s order row by row.
fn bf16_pairs_matmul(
    p: &Bf16Pairs,
    w: &[BF16],
    cols: usize,
    act: &[BF16],
    shape: Shape,
    out: &mut [f32],
) {
    use crate::formats::bf16_pairs::{STEP, TILE_ROWS as R, TILE_TOKENS};
    let Shape { rows, n_tok, .. } = shape;
    let batch = n_tok >= 2 && cols.is_multiple_of(STEP) && rows.is_multiple_of(R);
    if !batch {
        let one = |w: &[BF16], a: &[BF16]| {
            let mut o = [0.0];
            p.rows(w, a, &mut o);
            o[0]
        };
        run(
            w,
            cols,
            act,
            cols,
            shape,
            out,
            |w, a, o| each_token(one, w, a, o),
            |w, a, o| p.rows(w, a, o),
        );
        return;
    }
    let group = R * cols;
    let per_task = if use_pool(shape) {
        rows_per_task(rows).div_ceil(R)
    } else {
        rows / R
    };
    let band = (L1_WEIGHT_BYTES / (group * size_of::<BF16>())).max(1);
    let body = |(c, s): (usize, &mut [f32])| {
        let groups_here = s.len() / n_tok / R;
        let rows_here = groups_here * R;
        for b0 in (0..groups_here).step_by(band) {
            let b1 = (b0 + band).min(groups_here);
            for t0 in (0..n_tok).step_by(TILE_TOKENS) {
                let t1 = (t0 + TILE_TOKENS).min(n_tok);
                let x = &act[t0 * cols..t1 * cols];
                for i in b0..b1 {
                    let g = c * per_task + i;
                    let at = t0 * rows_here + i * R;
                    p.tile(&w[g * group..(g + 1) * group], x, &mut s[at..], rows_here);
                }
            }
        }
    };
    in_task_rows(out, rows, n_tok, per_task * R, use_pool(shape), body);
}

/// Runs `f` on a thread-local buffer of at least `len` elements (contents unspecified).
fn with_buffer<T: Copy + Default, R>(
    key: &'static LocalKey<Cell<Vec<T>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let mut buf = key.take();
    if buf.len() < len {
        buf.resize(len, T::default());
    }
    let r = f(&mut buf[..len]);
    key.set(buf);
    r
}

fn checked_len(what: &'static str, a: usize, b: usize) -> Result<usize, KernelError> {
    a.checked_mul(b).ok_or(KernelError::Overflow {
        what,
        rows: a,
        cols: b,
    })
}

fn expect_len(what: &'static str, expected: usize, got: usize) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::Length {
            what,
            unit: "floats",
            expected,
            got,
        })
    }
}

/// `out[t*rows + r] = dot(row r of w, x[t*cols .. (t+1)*cols])` for `t` in `0..n_tokens`.
///
/// `x` is (n_tokens, cols) row-major and `out` is (n_tokens, rows). Runs on the current rayon
/// pool (the global one unless called inside `ThreadPool::install`).
pub fn matmul(w: &Weights, x: &[f32], n_tokens: usize, out: &mut [f32]) -> Result<(), KernelError> {
    matmul_input(w, Input::Rows(x), n_tokens, out)
}

/// [`matmul`] of an [`Input`]: with [`Input::RmsNormed`], each row is normalised as it is
/// quantized (bit for bit what normalising the rows first and calling [`matmul`] gives).
pub fn matmul_input(
    w: &Weights,
    x: Input,
    n_tokens: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    w.check()?;
    x.check(n_tokens, w.cols)?;
    expect_len("out", checked_len("out", n_tokens, w.rows)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    if w.cols == 0 {
        out.fill(0.0);
        return Ok(());
    }
    let k = kernels();
    let shape = Shape {
        rows: w.rows,
        n_tok: n_tokens,
        work: w.data.len().saturating_mul(n_tokens),
    };
    let cols = w.cols;
    match w.ty {
        GgmlType::F32 => {
            let mut copy = Vec::new();
            let wf = f32_view(w.data, &mut copy);
            float_matmul(k, wf, cols, x, shape, out, Kernels::dot_f32);
        }
        GgmlType::F16 => {
            let wh = cast_blocks::<F16>(w.data);
            float_matmul(k, wh, cols, x, shape, out, Kernels::dot_f16);
        }
        GgmlType::BF16 => bf16_matmul(k, cast_blocks::<BF16>(w.data), cols, x, shape, out),
        GgmlType::Q4_0 => quantized_matmul::<BlockQ4_0, _>(
            k,
            &Q8_1_ACTS,
            w,
            x,
            shape,
            out,
            Kernels::dot_q4_0,
            Some(Kernels::rows_q4_0),
        ),
        GgmlType::Q4_1 => quantized_matmul::<BlockQ4_1, _>(
            k,
            &Q8_1_ACTS,
            w,
            x,
            shape,
            out,
            Kernels::dot_q4_1,
            Some(Kernels::rows_q4_1),
        ),
        GgmlType::Q5_0 => quantized_matmul::<BlockQ5_0, _>(
            k,
            &Q8_1_ACTS,
            w,
            x,
            shape,
            out,
            Kernels::dot_q5_0,
            Some(Kernels::rows_q5_0),
        ),
        GgmlType::Q5_1 => {
            #[cfg(target_arch = "x86_64")]
            if lanes_matmul(k, Q5_1Lanes, w, x, shape, out) {
                return Ok(());
            }
            quantized_matmul::<BlockQ5_1, _>(
                k,
                &Q8_1_ACTS,
                w,
                x,
                shape,
                out,
                Kernels::dot_q5_1,
                Some(Kernels::rows_q5_1),
            )
        }
        GgmlType::IQ4_NL => quantized_matmul::<BlockIq4Nl, _>(
            k,
            &Q8_1_ACTS,
            w,
            x,
            shape,
            out,
            Kernels::dot_iq4_nl,
            Some(Kernels::rows_iq4_nl),
        ),
        GgmlType::Q8_0 => quantized_matmul::<BlockQ8_0, _>(
            k,
            &Q8_1_ACTS,
            w,
            x,
            shape,
            out,
            Kernels::dot_q8_0,
            Some(Kernels::rows_q8_0),
        ),
        GgmlType::Q4_K => quantized_matmul::<BlockQ4K, _>(
            k,
            &Q8_K_ACTS,
            w,
            x,
            shape,
            out,
            Kernels::dot_q4_k,
            None,
        ),
        GgmlType::Q5_K => k_quant_matmul::<BlockQ5K>(
            k,
            w,
            x,
            shape,
            out,
            [Kernels::dot_q5_k_batch, Kernels::dot_q5_k],
            None,
        ),
        GgmlType::Q6_K => k_quant_matmul::<BlockQ6K>(
            k,
            w,
            x,
            shape,
            out,
            [Kernels::dot_q6_k_batch, Kernels::dot_q6_k],
            None,
        ),
        GgmlType::IQ4_XS => k_quant_matmul::<BlockIq4Xs>(
            k,
            w,
            x,
            shape,
            out,
            [Kernels::dot_iq4_xs_batch, Kernels::dot_iq4_xs],
            Some(Kernels::rows_iq4_xs),
        ),
        GgmlType::Q2_K => k_quant_matmul::<BlockQ2K>(
            k,
            w,
            x,
            shape,
            out,
            [Kernels::dot_q2_k_batch, Kernels::dot_q2_k],
            Some(Kernels::rows_q2_k),
        ),
        GgmlType::Q3_K => k_quant_matmul::<BlockQ3K>(
            k,
            w,
            x,
            shape,
            out,
            [Kernels::dot_q3_k_batch, Kernels::dot_q3_k],
            Some(Kernels::rows_q3_k),
        ),
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Shape {
    rows: usize,
    n_tok: usize,
    /// Weight bytes times tokens: what decides whether the pool is worth waking.
    work: usize,
}

/// The activation side of an integer matmul: the partner block format, its length, the
/// thread-local buffer its blocks are quantized into, and the quantizer.
struct Activations<A: 'static> {
    block_len: usize,
    buffer: &'static LocalKey<Cell<Vec<A>>>,
    quantize: fn(&Kernels, &[f32], &mut [A]),
}

/// Q8_1-style 32-element blocks, partner of Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0 and IQ4_NL.
const Q8_1_ACTS: Activations<BlockQ8_1> = Activations {
    block_len: 32,
    buffer: &ACT_Q8_1,
    quantize: Kernels::quantize_q8_1,
};

/// Q8_K 256-element blocks, partner of the K-quants and IQ4_XS.
const Q8_K_ACTS: Activations<BlockQ8K> = Activations {
    block_len: 256,
    buffer: &ACT_Q8_K,
    quantize: Kernels::quantize_q8_k,
};

/// A kernel-table method: weights, activations, results.
type KernelFn<B, A> = fn(&Kernels, &[B], &[A], &mut [f32]);

/// `batch` from [`TILED_MIN_TOKENS`] tokens on (the K-quants' batch kernels, in the order of the
/// tiled matmul llama.cpp switches to there), `row` below.
fn by_batch<B, A>(shape: Shape, batch: KernelFn<B, A>, row: KernelFn<B, A>) -> KernelFn<B, A> {
    if shape.n_tok >= TILED_MIN_TOKENS {
        batch
    } else {
        row
    }
}

/// A batch of [`TILED_MIN_TOKENS`] or more on the kernels with tokens in the lanes
/// ([`crate::formats::k_lanes`], [`crate::formats::q5_1_lanes`]), where the table has them, by
/// the plan `plan` makes: true when it ran.
#[cfg(target_arch = "x86_64")]
fn lanes_matmul<P: LanePlan>(
    k: &'static Kernels,
    plan: impl FnOnce(KLanes) -> P,
    w: &Weights,
    x: Input,
    shape: Shape,
    out: &mut [f32],
) -> bool
where
    P::W: ByteBlock,
{
    let Some(lanes) = k.k_lanes().filter(|_| shape.n_tok >= TILED_MIN_TOKENS) else {
        return false;
    };
    let blocks = cast_blocks::<P::W>(w.data);
    on_lanes(&plan(lanes), k, blocks, w.cols, x, shape, out);
    true
}

/// A weight format's kernels with tokens in the lanes, for [`on_lanes`].
#[cfg(target_arch = "x86_64")]
trait LanePlan: Sync {
    type W: Sync;
    /// A quantized activation block, a group's transposed block, an unpacked weight block.
    type A: Copy + Default + Send + Sync + 'static;
    type G: Copy + Default + Send + Sync + 'static;
    type U: Copy + Default + 'static;
    /// Rows a call multiplies at once (each activation load serves that many).
    const ROWS: usize;
    fn acts(&self) -> &Activations<Self::A>;
    fn group_buffer(&self) -> &'static LocalKey<Cell<Vec<Self::G>>>;
    fn unpacked_buffer(&self) -> &'static LocalKey<Cell<Vec<Self::U>>>;
    fn transpose(&self, a: &[Self::A], out: &mut [Self::G]);
    fn unpack(&self, w: &Self::W, u: &mut Self::U);
    /// `n <= ROWS` rows (`u`, `g.len()` unpacked blocks each) against one group.
    fn rows(&self, n: usize, u: &[Self::U], g: &[Self::G], out: &mut [[f32; LANES]]);
}

#[cfg(target_arch = "x86_64")]
struct KQuantLanes<F>(KLanes, std::marker::PhantomData<F>);

#[cfg(target_arch = "x86_64")]
impl<F: LaneFormat> LanePlan for KQuantLanes<F> {
    type W = F;
    type A = BlockQ8K;
    type G = Q8KLanes;
    type U = Unpacked;
    const ROWS: usize = 4;
    fn acts(&self) -> &Activations<BlockQ8K> {
        &Q8_K_ACTS
    }
    fn group_buffer(&self) -> &'static LocalKey<Cell<Vec<Q8KLanes>>> {
        &ACT_LANES
    }
    fn unpacked_buffer(&self) -> &'static LocalKey<Cell<Vec<Unpacked>>> {
        &UNPACKED
    }
    fn transpose(&self, a: &[BlockQ8K], out: &mut [Q8KLanes]) {
        crate::formats::k_lanes::transpose(a, out);
    }
    fn unpack(&self, w: &F, u: &mut Unpacked) {
        self.0.unpack(w, u);
    }
    fn rows(&self, n: usize, u: &[Unpacked], g: &[Q8KLanes], out: &mut [[f32; LANES]]) {
        if n == Self::ROWS {
            self.0.rows::<F, 4>(u, g, out);
        } else {
            for r in 0..n {
                self.0.rows::<F, 1>(&u[r * g.len()..], g, &mut out[r..]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
struct Q5_1Lanes(KLanes);

#[cfg(target_arch = "x86_64")]
impl LanePlan for Q5_1Lanes {
    type W = BlockQ5_1;
    type A = BlockQ8_1;
    type G = Q8_1Lanes;
    type U = UnpackedQ5_1;
    const ROWS: usize = 1;
    fn acts(&self) -> &Activations<BlockQ8_1> {
        &Q8_1_ACTS
    }
    fn group_buffer(&self) -> &'static LocalKey<Cell<Vec<Self::G>>> {
        &ACT_LANES_Q8_1
    }
    fn unpacked_buffer(&self) -> &'static LocalKey<Cell<Vec<Self::U>>> {
        &UNPACKED_Q5_1
    }
    fn transpose(&self, a: &[BlockQ8_1], out: &mut [Self::G]) {
        crate::formats::q5_1_lanes::transpose(a, out);
    }
    fn unpack(&self, w: &BlockQ5_1, u: &mut Self::U) {
        self.0.unpack_q5_1(w, u);
    }
    fn rows(&self, _n: usize, u: &[Self::U], g: &[Self::G], out: &mut [[f32; LANES]]) {
        self.0.row_q5_1(u, g, &mut out[0]);
    }
}

/// The driver of the kernels with tokens in the lanes: the activations quantized as for the
/// row kernels, then transposed 16 tokens to a group; each task takes a run of rows,
/// `P::ROWS` at a time, unpacks their blocks once and meets every group of tokens with them.
#[cfg(target_arch = "x86_64")]
fn on_lanes<P: LanePlan>(
    plan: &P,
    k: &'static Kernels,
    w: &[P::W],
    cols: usize,
    x: Input,
    shape: Shape,
    out: &mut [f32],
) {
    let acts = plan.acts();
    let Shape { rows, n_tok, .. } = shape;
    let nb = cols / acts.block_len;
    let groups = n_tok.div_ceil(LANES);
    let parallel = use_pool(shape);
    with_buffer(acts.buffer, nb * n_tok, |act| {
        quantize_tokens(x, cols, act, nb, shape, |x, a| (acts.quantize)(k, x, a));
        with_buffer(plan.group_buffer(), nb * groups, |t| {
            let body = |(g, o): (usize, &mut [P::G])| {
                let end = ((g + 1) * LANES).min(n_tok);
                plan.transpose(&act[g * LANES * nb..end * nb], o);
            };
            if parallel {
                t.par_chunks_mut(nb).enumerate().for_each(body);
            } else {
                t.chunks_mut(nb).enumerate().for_each(body);
            }
            let t = &*t;
            let task_rows = if parallel {
                rows_per_task(rows).next_multiple_of(P::ROWS)
            } else {
                rows
            };
            let body = |(c, s): (usize, &mut [f32])| {
                let rows_here = s.len() / n_tok;
                let r0 = c * task_rows;
                with_buffer(plan.unpacked_buffer(), P::ROWS * nb, |u| {
                    let mut tile = [[0f32; LANES]; 4];
                    for i0 in (0..rows_here).step_by(P::ROWS) {
                        let n = (rows_here - i0).min(P::ROWS);
                        let blocks = &w[(r0 + i0) * nb..(r0 + i0 + n) * nb];
                        for (b, u) in blocks.iter().zip(u.iter_mut()) {
                            plan.unpack(b, u);
                        }
                        for (g, a) in t.chunks_exact(nb).enumerate() {
                            plan.rows(n, u, a, &mut tile);
                            let t0 = g * LANES;
                            let here = (n_tok - t0).min(LANES);
                            for (dt, s) in s
                                .chunks_exact_mut(rows_here)
                                .skip(t0)
                                .take(here)
                                .enumerate()
                            {
                                for (v, row) in s[i0..i0 + n].iter_mut().zip(&tile) {
                                    *v = row[dt];
                                }
                            }
                        }
                    }
                });
            };
            in_task_rows(out, rows, n_tok, task_rows, parallel, body);
        });
    });
}

/// A matmul of a format dotted against Q8_K whose batches the kernels with tokens in the lanes
/// take (the K-quants but Q4_K, and IQ4_XS): a batch of [`TILED_MIN_TOKENS`] or more goes to
/// them where the table has them, else the integer dots run (`[batch, row]`: the tiled order's
/// kernel from that many tokens on, the row dot below; `rows` decode's own, where the table
/// has one).
fn k_quant_matmul<B: LaneBlock>(
    k: &'static Kernels,
    w: &Weights,
    x: Input,
    shape: Shape,
    out: &mut [f32],
    [batch, row]: [KernelFn<B, BlockQ8K>; 2],
    rows: Option<KernelFn<B, BlockQ8K>>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let plan = |lanes| KQuantLanes::<B>(lanes, std::marker::PhantomData);
        if lanes_matmul(k, plan, w, x, shape, out) {
            return;
        }
    }
    let dot = by_batch(shape, batch, row);
    quantized_matmul::<B, _>(k, &Q8_K_ACTS, w, x, shape, out, dot, rows);
}

/// A block [`k_quant_matmul`] takes: one the lanes kernels know, where they exist.
#[cfg(target_arch = "x86_64")]
trait LaneBlock: LaneFormat + ByteBlock {}
#[cfg(target_arch = "x86_64")]
impl<B: LaneFormat + ByteBlock> LaneBlock for B {}
#[cfg(not(target_arch = "x86_64"))]
trait LaneBlock: ByteBlock {}
#[cfg(not(target_arch = "x86_64"))]
impl<B: ByteBlock> LaneBlock for B {}

/// Quantizes the activations once into the partner format, then runs the integer dots.
#[allow(clippy::too_many_arguments)]
fn quantized_matmul<B: ByteBlock, A: Copy + Default + Send + Sync>(
    k: &'static Kernels,
    acts: &Activations<A>,
    w: &Weights,
    x: Input,
    shape: Shape,
    out: &mut [f32],
    dot: KernelFn<B, A>,
    rows: Option<KernelFn<B, A>>,
) {
    let nb = w.cols / acts.block_len;
    with_buffer(acts.buffer, nb * shape.n_tok, |act| {
        quantize_tokens(x, w.cols, act, nb, shape, |x, a| (acts.quantize)(k, x, a));
        run(
            cast_blocks::<B>(w.data),
            nb,
            act,
            nb,
            shape,
            out,
            |w, a, o| dot(k, w, a, o),
            |w, a, o| match rows {
                Some(rows) => rows(k, w, a, o),
                None => {
                    for (o, w) in o.iter_mut().zip(w.chunks_exact(a.len())) {
                        dot(k, w, a, std::slice::from_mut(o));
                    }
                }
            },
        );
    });
}

/// Quantizes every token's activations (normalising them first for [`Input::RmsNormed`]); in
/// parallel over tokens when there are several.
fn quantize_tokens<A: Send>(
    x: Input,
    cols: usize,
    act: &mut [A],
    blocks_per_token: usize,
    shape: Shape,
    quantize: impl Fn(&[f32], &mut [A]) + Sync,
) {
    if shape.n_tok >= 4 && use_pool(shape) && blocks_per_token > 0 {
        // A few tokens per task: their norms' scales are computed together.
        const TOKENS: usize = 8;
        act.par_chunks_mut(TOKENS * blocks_per_token)
            .enumerate()
            .for_each(|(c, a)| {
                let t = c * TOKENS;
                let end = (t + TOKENS).min(shape.n_tok);
                x.quantize(t..end, cols, a, blocks_per_token, &quantize)
            });
    } else {
        x.quantize(0..shape.n_tok, cols, act, blocks_per_token, &quantize);
    }
}

fn use_pool(shape: Shape) -> bool {
    shape.work >= PAR_MIN_WORK && rayon::current_num_threads() > 1
}

/// Rows per task: about eight tasks per thread, so a core slowed by something else hands work
/// to the other, but at least 8 rows so a task outweighs its scheduling cost, and at most 512.
fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(8 * rayon::current_num_threads())
        .clamp(8, 512)
}

/// The common driver. `w` holds `rows` rows of `w_per_row` units, `act` holds `n_tok` tokens
/// of `a_per_tok` units; `dot(row, tokens, out)` multiplies one row by `out.len()` consecutive
/// tokens (the multi-token kernels unpack each weight block once for up to four tokens);
/// `rows(w, token, out)` multiplies `out.len()` consecutive rows by one token (decode).
#[allow(clippy::too_many_arguments)]
fn run<W: Sync, A: Sync>(
    w: &[W],
    w_per_row: usize,
    act: &[A],
    a_per_tok: usize,
    shape: Shape,
    out: &mut [f32],
    dot: impl Fn(&[W], &[A], &mut [f32]) + Sync,
    rows1: impl Fn(&[W], &[A], &mut [f32]) + Sync,
) {
    let Shape { rows, n_tok, .. } = shape;
    debug_assert_eq!(w.len(), rows * w_per_row);
    debug_assert_eq!(act.len(), n_tok * a_per_tok);
    let row = |r: usize| &w[r * w_per_row..(r + 1) * w_per_row];
    let parallel = use_pool(shape);
    let chunk = if parallel { rows_per_task(rows) } else { rows };

    if n_tok == 1 {
        let body = |(c, o): (usize, &mut [f32])| {
            let r0 = c * chunk;
            rows1(&w[r0 * w_per_row..(r0 + o.len()) * w_per_row], act, o);
        };
        if parallel {
            out.par_chunks_mut(chunk).enumerate().for_each(body);
        } else {
            body((0, out));
        }
        return;
    }

    // Several tokens: each task computes a (chunk rows) x (all tokens) tile into scratch laid
    // out as (task, row-in-task, token), walking tokens in tiles so the task's weight rows and
    // one tile of activations share the cache; then results are copied to (token, row) order.
    let tile = (TOKEN_TILE_BYTES / (a_per_tok * size_of::<A>()).max(1)).clamp(4, n_tok.max(4));
    with_buffer(&SCRATCH, rows * n_tok, |scratch| {
        let body = |(c, t): (usize, &mut [f32])| {
            let r0 = c * chunk;
            for t0 in (0..n_tok).step_by(tile) {
                let t1 = (t0 + tile).min(n_tok);
                let tokens = &act[t0 * a_per_tok..t1 * a_per_tok];
                for (i, per_row) in t.chunks_mut(n_tok).enumerate() {
                    dot(row(r0 + i), tokens, &mut per_row[t0..t1]);
                }
            }
        };
        if parallel {
            scratch
                .par_chunks_mut(chunk * n_tok)
                .enumerate()
                .for_each(body);
        } else {
            body((0, &mut *scratch));
        }
        transpose_rows(scratch, rows, n_tok, out, parallel);
    });
}

/// `out[t * rows + r] = scratch[r * n_tok + t]`, in tiles of [`TRANSPOSE_TILE`] rows by as many
/// tokens, a tile of tokens per task. Row by row, every write went to another cache line (a
/// token's results are `rows` floats apart): a sixth of a Q5_0 prompt's time on one thread.
fn transpose_rows(scratch: &[f32], rows: usize, n_tok: usize, out: &mut [f32], parallel: bool) {
    const TILE: usize = TRANSPOSE_TILE;
    let body = |(c, o): (usize, &mut [f32])| {
        let t0 = c * TILE;
        for r0 in (0..rows).step_by(TILE) {
            let r1 = (r0 + TILE).min(rows);
            for (dt, o) in o.chunks_exact_mut(rows).enumerate() {
                let from = r0 * n_tok + t0 + dt;
                for (i, v) in o[r0..r1].iter_mut().enumerate() {
                    *v = scratch[from + i * n_tok];
                }
            }
        }
    };
    if parallel {
        out.par_chunks_mut(rows * TILE).enumerate().for_each(body);
    } else {
        out.chunks_mut(rows * TILE).enumerate().for_each(body);
    }
}

/// Rows (and tokens) per tile of [`transpose_rows`]: sixteen floats are one 64-byte line, so
/// each token's writes fill whole lines and the sixteen scratch lines read stay in L1.
const TRANSPOSE_TILE: usize = 16;

/// Bytes of repacked weights a prefill band keeps hot: half of a typical 32 KiB L1 data cache,
/// leaving the rest for the tokens' activations.
const L1_WEIGHT_BYTES: usize = 16 * 1024;

/// [`matmul`] over weights interleaved 8 rows to a block (`blocks`: `rows / 8` groups of
/// `cols / 32`): activations quantized once (with their integer sums, which fold in Q4_0's
/// offset), then each task takes a run of row groups and walks the tokens [`GemmEntry::TOKENS`]
/// at a time, so a group's unpacked weights serve that many tokens.
pub(crate) fn matmul_x8<B: GemmEntry>(
    blocks: &[B],
    p: &PackedWeights,
    x: Input,
    n_tokens: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    x.check(n_tokens, p.cols)?;
    expect_len("out", checked_len("out", n_tokens, p.rows)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let k = kernels();
    let nb = p.cols / 32;
    const G: usize = q4x8::ROWS;
    let groups = p.rows / G;
    let shape = Shape {
        rows: p.rows,
        n_tok: n_tokens,
        work: p.bytes().saturating_mul(n_tokens),
    };
    let group = |g: usize| &blocks[g * nb..(g + 1) * nb];
    // Groups per task: the row split of `run`, in whole groups.
    let per_task = if use_pool(shape) {
        rows_per_task(p.rows).div_ceil(G)
    } else {
        groups
    };
    with_buffer(&ACT_Q8_1, nb * n_tokens, |act| {
        quantize_tokens(x, p.cols, act, nb, shape, |x, a| k.quantize_q8_1(x, a));
        let spb = B::SUMS_PER_BLOCK;
        with_buffer(&ACT_SUMS, nb * n_tokens * spb, |sums| {
            B::sums(act, sums);
            if n_tokens == 1 {
                let body = |(c, o): (usize, &mut [f32])| {
                    let g0 = c * per_task;
                    let w = &blocks[g0 * nb..(g0 + o.len() / G) * nb];
                    k.gemv_x8(w, act, sums, o);
                };
                if use_pool(shape) {
                    out.par_chunks_mut(per_task * G).enumerate().for_each(body);
                } else {
                    body((0, out));
                }
                return;
            }
            // Several tokens. Cache blocking: a band of groups small enough to stay in L1
            // meets every token in turn, so each weight byte comes from memory once per band
            // instead of once per few tokens (a whole matrix outgrows L2), and each token's
            // activations once per band of groups. Each task writes its rows of every token
            // (token, row in task): on one thread that is `out` itself; with several, a
            // scratch copied into `out` a token at a time, in runs of the task's rows.
            // Where the table multiplies two groups at once, a band holds pairs of them.
            let pairs = k.has_gemm_x8_pairs::<B>();
            let band = (L1_WEIGHT_BYTES / (nb * std::mem::size_of::<B>()).max(1)).max(1);
            let band = if pairs {
                band.next_multiple_of(2)
            } else {
                band
            };
            let task_rows = per_task * G;
            let body = |(c, s): (usize, &mut [f32])| {
                let rows_here = s.len() / n_tokens;
                const { assert!(B::TOKENS <= q4x8::MAX_CALL_TOKENS) };
                let mut tile = [0f32; 2 * G * q4x8::MAX_CALL_TOKENS];
                for b0 in (0..rows_here / G).step_by(band) {
                    let b1 = (b0 + band).min(rows_here / G);
                    for t0 in (0..n_tokens).step_by(B::TOKENS) {
                        let t1 = (t0 + B::TOKENS).min(n_tokens);
                        let a = &act[t0 * nb..t1 * nb];
                        let su = &sums[t0 * nb * spb..t1 * nb * spb];
                        let mut i = b0;
                        while i < b1 {
                            let g = c * per_task + i;
                            let two = pairs && i + 1 < b1;
                            let n = if two { 2 } else { 1 };
                            let tile = &mut tile[..(t1 - t0) * n * G];
                            if two {
                                k.gemm_x8_pairs(&blocks[g * nb..(g + 2) * nb], a, su, tile);
                            } else {
                                k.gemm_x8(group(g), a, su, tile);
                            }
                            for (dt, r) in tile.chunks_exact(n * G).enumerate() {
                                let at = (t0 + dt) * rows_here + i * G;
                                s[at..at + n * G].copy_from_slice(r);
                            }
                            i += n;
                        }
                    }
                }
            };
            in_task_rows(out, p.rows, n_tokens, task_rows, use_pool(shape), body);
        });
    });
    Ok(())
}

/// Runs `body((task, s))` for each task of `task_rows` rows (the last may have fewer), where
/// `s` holds the task's rows of every token, token after token: on one thread that is `out`
/// itself; with several, a per-task scratch copied into `out` a token at a time, in runs of
/// the task's rows (tasks cannot share `out`, whose rows interleave by token).
fn in_task_rows(
    out: &mut [f32],
    rows: usize,
    n_tok: usize,
    task_rows: usize,
    parallel: bool,
    body: impl Fn((usize, &mut [f32])) + Sync + Send,
) {
    if !parallel {
        body((0, out));
        return;
    }
    with_buffer(&SCRATCH, rows * n_tok, |scratch| {
        scratch
            .par_chunks_mut(task_rows * n_tok)
            .enumerate()
            .for_each(body);
        out.par_chunks_mut(rows).enumerate().for_each(|(t, row)| {
            for (c, o) in row.chunks_mut(task_rows).enumerate() {
                let at = c * task_rows * n_tok + t * o.len();
                o.copy_from_slice(&scratch[at..at + o.len()]);
            }
        });
    });
}

/// [`crate::packed::matvec_fused`] for matrices of one interleaved format: `blocks[i]` holds
/// `outs[i].len()` rows of `cols` columns.
pub(crate) fn matvec_x8_fused<B: GemmEntry>(
    blocks: &[&[B]],
    cols: usize,
    x: Input,
    outs: &mut [&mut [f32]],
    then: Option<&RowsThen<'_>>,
) -> Result<(), KernelError> {
    const G: usize = q4x8::ROWS;
    x.check(1, cols)?;
    let nb = cols / 32;
    let mut work = 0usize;
    for (b, o) in blocks.iter().zip(outs.iter()) {
        if !o.len().is_multiple_of(G) || b.len() != o.len() / G * nb {
            return Err(KernelError::Length {
                what: "out",
                unit: "floats",
                expected: b.len() / nb.max(1) * G,
                got: o.len(),
            });
        }
        work = work.saturating_add(std::mem::size_of_val(*b));
    }
    let k = kernels();
    let shape = Shape {
        rows: outs.iter().map(|o| o.len()).sum(),
        n_tok: 1,
        work,
    };
    with_buffer(&ACT_Q8_1, nb, |act| {
        x.quantize(0..1, cols, act, nb, &|x: &[f32], a: &mut [BlockQ8_1]| {
            k.quantize_q8_1(x, a)
        });
        with_buffer(&ACT_SUMS, nb * B::SUMS_PER_BLOCK, |sums| {
            B::sums(act, sums);
            let (act, sums) = (&*act, &*sums);
            if !use_pool(shape) {
                for (i, (w, o)) in blocks.iter().zip(outs.iter_mut()).enumerate() {
                    k.gemv_x8(w, act, sums, o);
                    if let Some(then) = then {
                        then(i, 0, o);
                    }
                }
                return;
            }
            // The same row split as one matrix gets, over every matrix's rows at once (nested
            // parallel iterators: no task list is allocated per token).
            let per_task = rows_per_task(shape.rows).div_ceil(G) * G;
            blocks
                .par_iter()
                .zip(outs.par_iter_mut())
                .enumerate()
                .for_each(|(i, (w, o))| {
                    w.par_chunks(per_task / G * nb)
                        .zip(o.par_chunks_mut(per_task))
                        .enumerate()
                        .for_each(|(c, (w, o))| {
                            k.gemv_x8(w, act, sums, o);
                            if let Some(then) = then {
                                then(i, c * per_task, o);
                            }
                        });
                });
        });
    });
    Ok(())
}

/// [`matmul`] over Q4_K interleaved 8 rows to a block (`blocks`: `rows / 8` groups of
/// `cols / 256`), as ggml's repacked `forward_mul_mat` splits a batch: the first `4·⌊n/4⌋`
/// tokens, quantized by the 4-row quantizer's rule, through the gemm four at a time, the rest,
/// quantized as every Q8_K row, through the gemv one at a time. Rows are split over the pool in
/// whole groups; a row's bits do not depend on the split.
pub(crate) fn matmul_q4_kx8(
    blocks: &[crate::formats::q4_kx8::BlockQ4Kx8],
    p: &PackedWeights,
    x: Input,
    n_tokens: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    use crate::formats::q4_kx8::{GEMM_TOKENS, ROWS as G};
    x.check(n_tokens, p.cols)?;
    expect_len("out", checked_len("out", n_tokens, p.rows)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let k = kernels();
    let nb = p.cols / 256;
    let groups = p.rows / G;
    let shape = Shape {
        rows: p.rows,
        n_tok: n_tokens,
        work: p.bytes().saturating_mul(n_tokens),
    };
    let per_task = if use_pool(shape) {
        rows_per_task(p.rows).div_ceil(G)
    } else {
        groups
    };
    // Tokens before `n_gemm` go through the gemm.
    let n_gemm = n_tokens - n_tokens % GEMM_TOKENS;
    with_buffer(&ACT_Q8_K, nb * n_tokens, |act| {
        let quantize = |t: usize, a: &mut [BlockQ8K]| {
            let q = |x: &[f32], a: &mut [BlockQ8K]| {
                if t < n_gemm {
                    k.quantize_q8_k_4x8(x, a)
                } else {
                    k.quantize_q8_k(x, a)
                }
            };
            x.quantize(t..t + 1, p.cols, a, nb, &q);
        };
        if nb > 0 && n_tokens >= 4 && use_pool(shape) {
            act.par_chunks_mut(nb)
                .enumerate()
                .for_each(|(t, a)| quantize(t, a));
        } else if nb > 0 {
            act.chunks_mut(nb)
                .enumerate()
                .for_each(|(t, a)| quantize(t, a));
        }
        let act = &*act;
        if n_tokens == 1 {
            let body = |(c, o): (usize, &mut [f32])| {
                let g0 = c * per_task;
                k.gemv_q4_kx8(&blocks[g0 * nb..(g0 + o.len() / G) * nb], act, o);
            };
            if use_pool(shape) {
                out.par_chunks_mut(per_task * G).enumerate().for_each(body);
            } else {
                body((0, out));
            }
            return;
        }
        // Several tokens: scratch laid out (group, token, row in group), then transposed. A
        // group's weights (a few KiB) stay in L1 while every token meets them.
        with_buffer(&SCRATCH, p.rows * n_tokens, |scratch| {
            let body = |(c, s): (usize, &mut [f32])| {
                for (i, s) in s.chunks_exact_mut(n_tokens * G).enumerate() {
                    let g = c * per_task + i;
                    let w = &blocks[g * nb..(g + 1) * nb];
                    for t0 in (0..n_gemm).step_by(GEMM_TOKENS) {
                        let t1 = t0 + GEMM_TOKENS;
                        k.gemm_q4_kx8(w, &act[t0 * nb..t1 * nb], &mut s[t0 * G..t1 * G]);
                    }
                    for t in n_gemm..n_tokens {
                        let a = &act[t * nb..(t + 1) * nb];
                        k.gemv_q4_kx8(w, a, &mut s[t * G..(t + 1) * G]);
                    }
                }
            };
            if use_pool(shape) {
                scratch
                    .par_chunks_mut(per_task * n_tokens * G)
                    .enumerate()
                    .for_each(body);
            } else {
                body((0, &mut *scratch));
            }
            let transpose = |(t, row): (usize, &mut [f32])| {
                for (g, o) in row.chunks_exact_mut(G).enumerate() {
                    let at = (g * n_tokens + t) * G;
                    o.copy_from_slice(&scratch[at..at + G]);
                }
            };
            if use_pool(shape) {
                out.par_chunks_mut(p.rows).enumerate().for_each(transpose);
            } else {
                out.chunks_mut(p.rows).enumerate().for_each(transpose);
            }
        });
    });
    Ok(())
}
