//! Q4_0 and Q4_1 repacked for the x86 kernels (AVX2, AVX-512 VNNI), and Q4_0 for NEON: eight
//! rows interleaved block by block, so one kernel call multiplies 8 rows by up to 4 tokens with
//! every 32-bit lane holding one row.
//!
//! Why: in GGUF order each row is dotted on its own, and every block pays for a horizontal sum
//! and a scale conversion (and, for Q4_0, the sign trick `maddubs` needs). Interleaved, the 8
//! rows' scales convert in one instruction, the integer sums land lane per row (no horizontal
//! sum), the codes stay unsigned (Q4_0's `-8` is folded in through each activation block's
//! integer sum, Q4_1's minimum through the activation block's `s`), and the unpacked weights are
//! reused by up to 4 tokens. Weights are repacked once at load; the bytes per block are GGUF's.
//!
//! Layout of one interleaved block (block index b of rows 8g..8g+8): the 8 rows' f16 scales
//! (and for Q4_1 their f16 minimums), then 128 bytes where byte `32k + 4r + i` is byte `4k + i`
//! of row r's GGUF codes (k < 4, i < 4). Its low nibble is row r's element `4k + i` and its high
//! nibble element `16 + 4k + i`, so one 32-byte load split into nibbles gives two vectors whose
//! lane r holds four consecutive codes of row r, to be met by the same four activations
//! broadcast to every lane.
//!
//! Numerics: per row and block the exact integer dot, scaled as `d·d_a·sumi` and added in block
//! order (Q4_1's `m·s` terms summed apart and added last): the arithmetic of the formats' scalar
//! references ([`super::q4_0::dot_scalar`], [`super::q4_1::dot_scalar`]), so every path here
//! equals them bit for bit.

use super::q4_0::BlockQ4_0;
use super::q4_1::BlockQ4_1;
use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, ByteBlock};

/// Rows per interleaved group.
pub(crate) const ROWS: usize = 8;
/// Most tokens one kernel call takes (its accumulators stay in registers).
pub(crate) const MAX_TOKENS: usize = 4;
/// Most tokens any interleaved format's call takes ([`crate::dispatch::GemmEntry::TOKENS`]).
pub(crate) const MAX_CALL_TOKENS: usize = 8;

/// Q4_0, 8 rows interleaved: `x = (q - 8)·d`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ4_0x8 {
    pub d: [[u8; 2]; ROWS],
    pub qs: [u8; 16 * ROWS],
}
const _: () = assert!(size_of::<BlockQ4_0x8>() == ROWS * size_of::<BlockQ4_0>());
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ4_0x8 {}

/// Q4_1, 8 rows interleaved: `x = q·d + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ4_1x8 {
    pub d: [[u8; 2]; ROWS],
    pub m: [[u8; 2]; ROWS],
    pub qs: [u8; 16 * ROWS],
}
const _: () = assert!(size_of::<BlockQ4_1x8>() == ROWS * size_of::<BlockQ4_1>());
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ4_1x8 {}

/// What the kernels need from an interleaved 4-bit block.
pub(crate) trait Q4x8: ByteBlock + Copy + Send + Sync + 'static {
    /// The GGUF block it is made of.
    type Source: ByteBlock;
    /// Sum as ggml's AVX2 row dot does (eight lane accumulators, one per four elements,
    /// then its horizontal sum) instead of one exact integer per block: for Q4_1, whose GGUF
    /// kernel is bit-exact with llama.cpp, so repacking keeps greedy decoding on the
    /// reference's path.
    const GGML_LANES: bool;
    fn d(&self) -> &[[u8; 2]; ROWS];
    /// Q4_1's minimums; `None` for Q4_0, whose codes are centred on 8 instead.
    fn m(&self) -> Option<&[[u8; 2]; ROWS]>;
    /// Whether [`Q4x8::m`] is `Some`: the minimum terms are summed apart and added last.
    const HAS_MIN: bool;
    fn qs(&self) -> &[u8; 16 * ROWS];
    /// One interleaved block from block b of each of 8 rows.
    fn interleave(rows: [&Self::Source; ROWS]) -> Self;
}

/// The codes of 8 rows' blocks, interleaved 4 bytes at a time (see the module header).
pub(crate) fn interleave_qs(qs: [&[u8; 16]; ROWS]) -> [u8; 16 * ROWS] {
    let mut out = [0u8; 16 * ROWS];
    for (r, q) in qs.iter().enumerate() {
        for k in 0..4 {
            let at = 32 * k + 4 * r;
            out[at..at + 4].copy_from_slice(&q[4 * k..4 * k + 4]);
        }
    }
    out
}

impl Q4x8 for BlockQ4_0x8 {
    type Source = BlockQ4_0;
    const GGML_LANES: bool = false;
    const HAS_MIN: bool = false;
    fn d(&self) -> &[[u8; 2]; ROWS] {
        &self.d
    }
    fn m(&self) -> Option<&[[u8; 2]; ROWS]> {
        None
    }
    fn qs(&self) -> &[u8; 16 * ROWS] {
        &self.qs
    }
    fn interleave(rows: [&BlockQ4_0; ROWS]) -> Self {
        BlockQ4_0x8 {
            d: rows.map(|b| b.d),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
}

impl Q4x8 for BlockQ4_1x8 {
    type Source = BlockQ4_1;
    const GGML_LANES: bool = true;
    const HAS_MIN: bool = true;
    fn d(&self) -> &[[u8; 2]; ROWS] {
        &self.d
    }
    fn m(&self) -> Option<&[[u8; 2]; ROWS]> {
        Some(&self.m)
    }
    fn qs(&self) -> &[u8; 16 * ROWS] {
        &self.qs
    }
    fn interleave(rows: [&BlockQ4_1; ROWS]) -> Self {
        BlockQ4_1x8 {
            d: rows.map(|b| b.d),
            m: rows.map(|b| b.m),
            qs: interleave_qs(rows.map(|b| &b.qs)),
        }
    }
}

/// Interleaves a whole matrix (`rows.len() == 8g * nb`: 8g rows of `nb` GGUF blocks, row after
/// row) into `g * nb` blocks, group after group. Runs on the rayon pool and writes each block
/// once in place: it is model start-up work, gigabytes for a 3B model.
pub(crate) fn pack<B: Q4x8>(rows: &[B::Source], nb: usize) -> Vec<B>
where
    B::Source: Sync,
{
    interleave_all(rows.len(), nb, |g, b| {
        B::interleave(std::array::from_fn(|r| &rows[(g * ROWS + r) * nb + b]))
    })
}

/// `make(g, b)` for every block b of every 8-row group g of a matrix of `n_blocks` GGUF blocks,
/// `nb` to a row, collected in parallel straight into place.
pub(crate) fn interleave_all<B: Send>(
    n_blocks: usize,
    nb: usize,
    make: impl Fn(usize, usize) -> B + Sync + Send,
) -> Vec<B> {
    use rayon::prelude::*;
    assert!(
        nb > 0 || n_blocks == 0,
        "interleave: rows of no blocks hold nothing"
    );
    assert_eq!(
        n_blocks % (ROWS * nb.max(1)),
        0,
        "interleave: partial row group"
    );
    (0..n_blocks / ROWS)
        .into_par_iter()
        .map(|i| make(i / nb, i % nb))
        .collect()
}

/// The code of row `r`, element `j` of an interleaved block (0..16, no offset removed).
fn code(qs: &[u8; 16 * ROWS], r: usize, j: usize) -> i32 {
    let e = j % 16;
    let byte = qs[32 * (e / 4) + 4 * r + e % 4];
    i32::from(if j < 16 { byte & 0xF } else { byte >> 4 })
}

/// Integer sum of each activation block's codes, which folds Q4_0's offset in:
/// `Σ (q - 8)·a = Σ q·a - 8·Σ a`. `out.len() == a.len()`.
pub(crate) fn activation_sums(a: &[BlockQ8_1], out: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::kernels().path.is_x86_simd() {
        // SAFETY: every x86 SIMD table implies AVX2.
        unsafe { activation_sums_avx2(a, out) };
        return;
    }
    for (o, b) in out.iter_mut().zip(a) {
        *o = b.qs.iter().map(|&q| i32::from(q)).sum();
    }
}

/// [`activation_sums`] on AVX2 (exact integers, so the same values).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn activation_sums_avx2(a: &[BlockQ8_1], out: &mut [i32]) {
    for (o, b) in out.iter_mut().zip(a) {
        *o = crate::x86::hsum_epi32(crate::x86::quad_sums(&b.qs));
    }
}

/// Scalar reference: one group of 8 rows (`w`, `nb` blocks) against `t = out.len() / 8` tokens
/// (`a`: `t * nb` blocks, token after token; `sums`, Q4_0's only, the same count).
/// `out[8t + r]` = row r dot token t.
pub(crate) fn gemm_scalar<B: Q4x8>(w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
    let nb = w.len();
    for (t, o) in out.chunks_exact_mut(ROWS).enumerate() {
        let a = &a[t * nb..(t + 1) * nb];
        for (r, o) in o.iter_mut().enumerate() {
            // `lanes[k]`: the block sums of elements 4k..4k+4 (ggml order), or everything in
            // lane 0 (one exact integer per block).
            let mut lanes = [0.0f32; 8];
            let mut off = 0.0f32;
            for (b, (wb, ab)) in w.iter().zip(a).enumerate() {
                let dd = f16_to_f32(wb.d()[r]) * ab.d;
                let quad = |k: usize| -> i32 {
                    (4 * k..4 * k + 4)
                        .map(|j| code(wb.qs(), r, j) * i32::from(ab.qs[j]))
                        .sum()
                };
                if B::GGML_LANES {
                    for (k, lane) in lanes.iter_mut().enumerate() {
                        *lane = dd.mul_add(quad(k) as f32, *lane);
                    }
                } else {
                    let offset = if B::HAS_MIN { 0 } else { 8 * sums[t * nb + b] };
                    let sumi = (0..8).map(quad).sum::<i32>() - offset;
                    lanes[0] += dd * sumi as f32;
                }
                if let Some(m) = wb.m() {
                    off += f16_to_f32(m[r]) * ab.s;
                }
            }
            let acc = if B::GGML_LANES {
                crate::attention::hsum8(&lanes)
            } else {
                lanes[0]
            };
            *o = if B::HAS_MIN { acc + off } else { acc };
        }
    }
}

/// Scalar reference for decode: every group of 8 rows in `w` (`out.len() / 8` groups of
/// `a.len()` blocks, group after group) against the one token `a`.
pub(crate) fn gemv_scalar<B: Q4x8>(w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
    for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
        gemm_scalar(wg, a, sums, o);
    }
}

/// Runs `$kernel::<[$B,] N>(w, a, sums, out)` over the first `$t` tokens of `out`, at most
/// `$pass` (up to [`MAX_CALL_TOKENS`]) a pass: the interleaved kernels' token loop, whose
/// accumulators for N tokens stay in registers.
#[cfg(target_arch = "x86_64")]
macro_rules! gemm_in_passes {
    ($kernel:ident $(<$b:ty>)?, $pass:expr, $t:expr, $w:expr, $a:expr, $sums:expr, $out:expr) => {{
        let (w, a, sums, out, t) = ($w, $a, $sums, $out, $t);
        let nb = w.len();
        let mut t0 = 0;
        while t0 < t {
            let n = (t - t0).min($pass);
            let (a, s) = (&a[t0 * nb..], &sums[t0 * nb..]);
            let o = &mut out[t0 * ROWS..(t0 + n) * ROWS];
            match n {
                1 => $kernel::<$($b,)? 1>(w, a, s, o),
                2 => $kernel::<$($b,)? 2>(w, a, s, o),
                3 => $kernel::<$($b,)? 3>(w, a, s, o),
                4 => $kernel::<$($b,)? 4>(w, a, s, o),
                5 => $kernel::<$($b,)? 5>(w, a, s, o),
                6 => $kernel::<$($b,)? 6>(w, a, s, o),
                7 => $kernel::<$($b,)? 7>(w, a, s, o),
                _ => $kernel::<$($b,)? 8>(w, a, s, o),
            }
            t0 += n;
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use gemm_in_passes;

/// The x86 kernels, written once for each way of multiplying four unsigned codes by four
/// signed activations and summing them into a lane: AVX2's `maddubs` + `madd`, or AVX-512
/// VNNI's `vpdpbusd`. Both give the same exact integers, so the same bits. A flavour module
/// supplies `block_dot` (a whole block: the eight code vectors against the 32 activations)
/// and `quad_dot` (one vector of four-code quads against four broadcast activations).
#[cfg(target_arch = "x86_64")]
macro_rules! x86_kernels {
    ($features:literal, $pass:literal) => {
        /// Tokens one pass over Q4_0's blocks keeps in registers.
        const PASS: usize = $pass;

        /// [`super::gemv_scalar`] with this flavour. One call walks a whole slice of groups: decode's
        /// groups are only a few kilobytes each, and a call per group through the kernel table
        /// cost as much as a tenth of the time.
        #[target_feature(enable = $features)]
        pub(crate) fn gemv<B: Q4x8>(w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
                if B::GGML_LANES {
                    gemm_lanes_n::<B, 1>(wg, a, o);
                } else {
                    gemm_n::<B, 1>(wg, a, sums, o);
                }
            }
        }

        /// [`super::gemm_scalar`] with this flavour: any number of tokens per call; Q4_0's
        /// [`PASS`] at a time, Q4_1's two.
        #[target_feature(enable = $features)]
        pub(crate) fn gemm<B: Q4x8>(w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            match (B::GGML_LANES, out.len() / ROWS) {
                (_, 0) => {}
                (false, t) => super::gemm_in_passes!(gemm_n<B>, PASS, t, w, a, sums, out),
                (true, 1) => gemm_lanes_n::<B, 1>(w, a, out),
                (true, 2) => gemm_lanes_n::<B, 2>(w, a, out),
                (true, _) => {
                    // Eight accumulators per token: two tokens at a time keep them in registers.
                    let (a0, a1) = a.split_at(2 * w.len());
                    let (o0, o1) = out.split_at_mut(2 * ROWS);
                    gemm_lanes_n::<B, 2>(w, a0, o0);
                    // ggml's lanes read no sums (the format has no offset).
                    gemm(w, a1, &[], o1);
                }
            }
        }

        /// 8 f16 values widened.
        #[inline]
        #[target_feature(enable = $features)]
        fn load_halves(h: &[[u8; 2]; ROWS]) -> __m256 {
            // SAFETY: 8 halves are 16 readable bytes, the width of the load.
            _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) })
        }

        #[inline]
        #[target_feature(enable = $features)]
        fn gemm_n<B: Q4x8, const T: usize>(
            w: &[B],
            a: &[BlockQ8_1],
            sums: &[i32],
            out: &mut [f32],
        ) {
            const { assert!(T <= MAX_CALL_TOKENS) };
            let nb = w.len();
            assert!(a.len() >= T * nb && sums.len() >= T * nb && out.len() >= T * ROWS);
            let low4 = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); T];
            let mut off = [_mm256_setzero_ps(); T];
            for (b, wb) in w.iter().enumerate() {
                if T == 1 {
                    crate::x86::prefetch_ahead(wb);
                }
                let d = load_halves(wb.d());
                let m = wb.m().map(|m| load_halves(m));
                let mut v = [_mm256_setzero_si256(); 8];
                for k in 0..4 {
                    // SAFETY: 32k + 32 <= 128, the length of `qs`.
                    let l = unsafe { _mm256_loadu_si256(wb.qs().as_ptr().add(32 * k).cast()) };
                    v[k] = _mm256_and_si256(l, low4);
                    v[k + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(l), low4);
                }
                for t in 0..T {
                    // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len(), sums.len() (asserted).
                    let (ab, s) =
                        unsafe { (a.get_unchecked(t * nb + b), *sums.get_unchecked(t * nb + b)) };
                    let mut sumi = block_dot(&v, &ab.qs);
                    if !B::HAS_MIN {
                        sumi = _mm256_sub_epi32(sumi, _mm256_set1_epi32(8 * s));
                    }
                    // (d·d_a)·sumi, then added: the scalar reference's rounding, lane per row.
                    let dd = _mm256_mul_ps(d, _mm256_set1_ps(ab.d));
                    acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)));
                    if let Some(m) = m {
                        off[t] = _mm256_add_ps(off[t], _mm256_mul_ps(m, _mm256_set1_ps(ab.s)));
                    }
                }
            }
            for t in 0..T {
                let r = if B::HAS_MIN {
                    _mm256_add_ps(acc[t], off[t])
                } else {
                    acc[t]
                };
                // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(ROWS * t), r) };
            }
        }

        /// [`gemm_n`] in ggml's order (`B::GGML_LANES`): the i32 sum of each four elements is
        /// scaled into its own accumulator, `acc[k]` lane r holding row r's ggml lane k, and the
        /// eight are added at the end as ggml's `hsum` adds a register's lanes. Every row's bits are
        /// those of the GGUF layout's AVX2 dot.
        #[inline]
        #[target_feature(enable = $features)]
        fn gemm_lanes_n<B: Q4x8, const T: usize>(w: &[B], a: &[BlockQ8_1], out: &mut [f32]) {
            let nb = w.len();
            assert!(a.len() >= T * nb && out.len() >= T * ROWS);
            let low4 = _mm256_set1_epi8(0x0F);
            let mut acc = [[_mm256_setzero_ps(); 8]; T];
            let mut off = [_mm256_setzero_ps(); T];
            for (b, wb) in w.iter().enumerate() {
                if T == 1 {
                    crate::x86::prefetch_ahead(wb);
                }
                let d = load_halves(wb.d());
                let m = wb.m().map(|m| load_halves(m));
                for k in 0..4 {
                    // SAFETY: 32k + 32 <= 128, the length of `qs`.
                    let l = unsafe { _mm256_loadu_si256(wb.qs().as_ptr().add(32 * k).cast()) };
                    let halves = [
                        (k, _mm256_and_si256(l, low4)),
                        (k + 4, _mm256_and_si256(_mm256_srli_epi16::<4>(l), low4)),
                    ];
                    for (t, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len() (asserted).
                        let ab = unsafe { a.get_unchecked(t * nb + b) };
                        let dd = _mm256_mul_ps(d, _mm256_set1_ps(ab.d));
                        for &(lane, v) in &halves {
                            // Lane k holds elements 4k..4k+4 of the block, as in ggml's lanes.
                            // SAFETY: 4·lane + 4 <= 32, the activation block's length.
                            let four = unsafe {
                                ab.qs.as_ptr().add(4 * lane).cast::<i32>().read_unaligned()
                            };
                            let p = quad_dot(v, _mm256_set1_epi32(four));
                            acc[lane] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[lane]);
                        }
                    }
                }
                if let Some(m) = m {
                    for (t, off) in off.iter_mut().enumerate() {
                        // SAFETY: as above.
                        let ab = unsafe { a.get_unchecked(t * nb + b) };
                        *off = _mm256_add_ps(*off, _mm256_mul_ps(m, _mm256_set1_ps(ab.s)));
                    }
                }
            }
            for t in 0..T {
                let mut r = crate::x86::hsum_lanes(&acc[t]);
                if B::HAS_MIN {
                    r = _mm256_add_ps(r, off[t]);
                }
                // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(ROWS * t), r) };
            }
        }
    };
}

/// The four activations that meet code vector `k` of a block (see the module header: vector
/// k < 4 holds elements 4k..4k+4 of each row, vector k >= 4 elements 16 + 4(k-4)..), as the
/// one i32 the kernels broadcast.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn activation_quad(q: &[i8; 32], k: usize) -> i32 {
    let at = if k < 4 { 4 * k } else { 16 + 4 * (k - 4) };
    assert!(k < 8);
    // SAFETY: k < 8, so at + 4 <= 32, the activation block's length.
    unsafe { q.as_ptr().add(at).cast::<i32>().read_unaligned() }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ8_1, Q4x8, MAX_CALL_TOKENS, ROWS};

    /// Row r's exact integer dot of block `v` (lane r) with the activations `q`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn block_dot(v: &[__m256i; 8], q: &[i8; 32]) -> __m256i {
        // Unsigned codes times signed activations, pairs summed to i16: each pair is at most
        // 2·15·127 in magnitude, so eight of them (30480) still fit an i16.
        let mut s16 = _mm256_setzero_si256();
        for (k, v) in v.iter().enumerate() {
            let four = _mm256_set1_epi32(super::activation_quad(q, k));
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(*v, four));
        }
        _mm256_madd_epi16(s16, _mm256_set1_epi16(1))
    }

    /// Per lane, the sum of its four codes times the four activations in `four`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quad_dot(v: __m256i, four: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(v, four), _mm256_set1_epi16(1))
    }

    x86_kernels!("avx2,fma,f16c", 4);
}

/// The same kernels on AVX-512 VNNI (on 256-bit registers, through AVX-512VL): `vpdpbusd`
/// multiplies and sums four unsigned-by-signed byte pairs per lane in one instruction, where
/// AVX2 needs `maddubs`, an i16 add and a `madd`.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{BlockQ8_1, Q4x8, MAX_CALL_TOKENS, ROWS};

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    fn block_dot(v: &[__m256i; 8], q: &[i8; 32]) -> __m256i {
        let mut sum = _mm256_setzero_si256();
        for (k, v) in v.iter().enumerate() {
            sum = _mm256_dpbusd_epi32(sum, *v, _mm256_set1_epi32(super::activation_quad(q, k)));
        }
        sum
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    fn quad_dot(v: __m256i, four: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), v, four)
    }

    // Four tokens a pass as on AVX2: eight (registers enough with AVX-512) made a Q4_0 prompt
    // 8% slower (docs/benchmarks-log.md).
    x86_kernels!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni", 4);
}

/// The Q4_0 kernels on aarch64, in the same interleaved layout: one 16-byte load holds four
/// rows' four codes each, which is SDOT's shape (four adjacent byte products summed per lane),
/// so the unpacked codes meet the activations without a shuffle. Each block's integers are
/// exact, then scaled and added in block order as in [`super::gemm_scalar`]: bit for bit the
/// reference. (Q4_1 and Q8_0 stay in the GGUF layout here: their sums follow ggml's lanes.)
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    /// Written once for both flavours of the four-byte dot: `widen` (baseline NEON) and `sdot`.
    macro_rules! kernels {
        ($features:literal, $flavour:ident) => {
            use std::arch::aarch64::*;

            use crate::formats::q4x8::{BlockQ4_0x8, BlockQ8_1, MAX_TOKENS, ROWS};
            use crate::neon::$flavour::quads_i8x16;

            /// [`crate::formats::q4x8::gemv_scalar`] for Q4_0: every group of 8 rows against one token.
            #[target_feature(enable = $features)]
            pub(crate) fn gemv(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
                for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
                    gemm_n::<1>(wg, a, sums, o);
                }
            }

            /// [`crate::formats::q4x8::gemm_scalar`] for Q4_0: one group, up to [`MAX_TOKENS`] tokens.
            #[target_feature(enable = $features)]
            pub(crate) fn gemm(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
                match out.len() / ROWS {
                    0 => {}
                    1 => gemm_n::<1>(w, a, sums, out),
                    2 => gemm_n::<2>(w, a, sums, out),
                    3 => gemm_n::<3>(w, a, sums, out),
                    _ => gemm_n::<4>(w, a, sums, out),
                }
            }

            #[inline]
            #[target_feature(enable = $features)]
            pub(crate) fn gemm_n<const T: usize>(
                w: &[BlockQ4_0x8],
                a: &[BlockQ8_1],
                sums: &[i32],
                out: &mut [f32],
            ) {
                const { assert!(T <= MAX_TOKENS) };
                let nb = w.len();
                assert!(a.len() >= T * nb && sums.len() >= T * nb && out.len() >= T * ROWS);
                let low4 = vdupq_n_u8(0x0F);
                // acc[t]: rows 0..4 and 4..8 of token t.
                let mut acc = [[vdupq_n_f32(0.0); 2]; T];
                for (b, wb) in w.iter().enumerate() {
                    let d = crate::formats::q4x8::neon::scales(&wb.d);
                    // v[j]: codes of quad j (elements 4j.. for j < 4, 16 + 4(j-4).. after),
                    // rows 0..4 then rows 4..8, four codes to a lane.
                    let mut v = [[vdupq_n_s8(0); 2]; 8];
                    for k in 0..4 {
                        for h in 0..2 {
                            // SAFETY: 32k + 16h + 16 <= 128, the length of `qs`.
                            let l = unsafe { vld1q_u8(wb.qs.as_ptr().add(32 * k + 16 * h)) };
                            v[k][h] = vreinterpretq_s8_u8(vandq_u8(l, low4));
                            v[k + 4][h] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(l));
                        }
                    }
                    for (t, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len(), sums.len().
                        let (ab, s) = unsafe {
                            (a.get_unchecked(t * nb + b), *sums.get_unchecked(t * nb + b))
                        };
                        let mut sumi = [vdupq_n_s32(0); 2];
                        for (j, v) in v.iter().enumerate() {
                            let at = if j < 4 { 4 * j } else { 16 + 4 * (j - 4) };
                            // SAFETY: at + 4 <= 32, the activation block's length.
                            let four =
                                unsafe { ab.qs.as_ptr().add(at).cast::<i32>().read_unaligned() };
                            let four = vreinterpretq_s8_s32(vdupq_n_s32(four));
                            sumi[0] = quads_i8x16(sumi[0], v[0], four);
                            sumi[1] = quads_i8x16(sumi[1], v[1], four);
                        }
                        let dd = (vmulq_n_f32(d.0, ab.d), vmulq_n_f32(d.1, ab.d));
                        // Q4_0's offset: Σ (q - 8)·a = Σ q·a - 8·Σ a.
                        let off = vdupq_n_s32(8 * s);
                        let s0 = vcvtq_f32_s32(vsubq_s32(sumi[0], off));
                        let s1 = vcvtq_f32_s32(vsubq_s32(sumi[1], off));
                        acc[0] = vaddq_f32(acc[0], vmulq_f32(dd.0, s0));
                        acc[1] = vaddq_f32(acc[1], vmulq_f32(dd.1, s1));
                    }
                }
                for (t, acc) in acc.iter().enumerate() {
                    // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
                    unsafe {
                        vst1q_f32(out.as_mut_ptr().add(ROWS * t), acc[0]);
                        vst1q_f32(out.as_mut_ptr().add(ROWS * t + 4), acc[1]);
                    }
                }
            }
        };
    }

    kernels!("neon", widen);

    /// The same kernels on SDOT: the same exact integers, so the same bits.
    pub(crate) mod dotprod {
        kernels!("neon,dotprod", sdot);
    }

    /// The 8 rows' scales as f32, rows 0..4 and 4..8.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn scales(
        d: &[[u8; 2]; super::ROWS],
    ) -> (
        std::arch::aarch64::float32x4_t,
        std::arch::aarch64::float32x4_t,
    ) {
        use std::arch::aarch64::vld1q_f32;
        let d = d.map(crate::block::f16_to_f32);
        // SAFETY: d is 8 f32s; each load reads 4 of them.
        unsafe { (vld1q_f32(d.as_ptr()), vld1q_f32(d.as_ptr().add(4))) }
    }

    /// Prefill on SMMLA (i8mm): tokens two at a time, each instruction the 2×2 block of two
    /// rows by two tokens over 8 elements. The interleaved layout holds four codes per row
    /// together, so two zips make each row pair's 8 contiguous codes; the integers are exact
    /// and the scaling is the reference's, so the bits are the other kernels'.
    pub(crate) mod i8mm {
        use std::arch::aarch64::*;

        use crate::formats::q4x8::{BlockQ4_0x8, BlockQ8_1, ROWS};
        use crate::neon::i8mm::smmla;

        /// [`crate::formats::q4x8::gemm_scalar`] for Q4_0: one group of 8 rows, up to 4 tokens.
        #[target_feature(enable = "neon,dotprod,i8mm")]
        pub(crate) fn gemm(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            let nb = w.len();
            let t = out.len() / ROWS;
            let pairs = t / 2;
            for p in 0..pairs {
                let (a, sums) = (&a[2 * p * nb..], &sums[2 * p * nb..]);
                pair(w, a, sums, &mut out[2 * p * ROWS..(2 * p + 2) * ROWS]);
            }
            if t % 2 == 1 {
                let (a, sums) = (&a[2 * pairs * nb..], &sums[2 * pairs * nb..]);
                super::dotprod::gemm_n::<1>(w, a, sums, &mut out[2 * pairs * ROWS..t * ROWS]);
            }
        }

        /// Two tokens (`a`, `sums`: token 0's `nb` blocks, then token 1's) against 8 rows.
        #[inline]
        #[target_feature(enable = "neon,dotprod,i8mm")]
        fn pair(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            let nb = w.len();
            assert!(a.len() >= 2 * nb && sums.len() >= 2 * nb && out.len() >= 2 * ROWS);
            let low4 = vdupq_n_u8(0x0F);
            // acc[t]: rows 0..4 and 4..8 of token t.
            let mut acc = [[vdupq_n_f32(0.0); 2]; 2];
            for (b, wb) in w.iter().enumerate() {
                let d = crate::formats::q4x8::neon::scales(&wb.d);
                // x[k][h]: the 16 bytes of quad k for rows 4h..4h+4, unpacked to low and high
                // nibbles (elements 4k.. and 16 + 4k..).
                let mut lo = [[vdupq_n_s32(0); 2]; 4];
                let mut hi = [[vdupq_n_s32(0); 2]; 4];
                for k in 0..4 {
                    for h in 0..2 {
                        // SAFETY: 32k + 16h + 16 <= 128, the length of `qs`.
                        let l = unsafe { vld1q_u8(wb.qs.as_ptr().add(32 * k + 16 * h)) };
                        lo[k][h] = vreinterpretq_s32_u8(vandq_u8(l, low4));
                        hi[k][h] = vreinterpretq_s32_u8(vshrq_n_u8::<4>(l));
                    }
                }
                // The two tokens' activations, 8 elements of each per operand: octet o is
                // elements 8o..8o+8.
                let (a0, a1) = (&a[b], &a[nb + b]);
                let act = |o: usize| {
                    // SAFETY: 8o + 8 <= 32, the activation block's length.
                    unsafe {
                        vcombine_s8(
                            vld1_s8(a0.qs.as_ptr().add(8 * o)),
                            vld1_s8(a1.qs.as_ptr().add(8 * o)),
                        )
                    }
                };
                let acts = [act(0), act(1), act(2), act(3)];
                // m[q]: rows 2q, 2q+1 by tokens 0, 1.
                let mut m = [vdupq_n_s32(0); 4];
                for h in 0..2 {
                    // Octets 0 and 1 come from the low nibbles of quads (0, 1) and (2, 3),
                    // octets 2 and 3 from their high nibbles.
                    for (o, (x, k)) in [(&lo, 0), (&lo, 2), (&hi, 0), (&hi, 2)]
                        .into_iter()
                        .enumerate()
                    {
                        let (p, q) = (x[k][h], x[k + 1][h]);
                        // zip1: rows 4h, 4h+1, 8 codes each; zip2: rows 4h+2, 4h+3.
                        let r01 = vreinterpretq_s8_s32(vzip1q_s32(p, q));
                        let r23 = vreinterpretq_s8_s32(vzip2q_s32(p, q));
                        m[2 * h] = smmla(m[2 * h], r01, acts[o]);
                        m[2 * h + 1] = smmla(m[2 * h + 1], r23, acts[o]);
                    }
                }
                // m[q] lanes: (row 2q, t0), (row 2q, t1), (row 2q+1, t0), (row 2q+1, t1).
                let rows = |q0: usize| (vuzp1q_s32(m[q0], m[q0 + 1]), vuzp2q_s32(m[q0], m[q0 + 1]));
                let (t0_lo, t1_lo) = rows(0);
                let (t0_hi, t1_hi) = rows(2);
                for (t, sumi) in [(0, [t0_lo, t0_hi]), (1, [t1_lo, t1_hi])] {
                    let (ab, s) = (&a[t * nb + b], sums[t * nb + b]);
                    let dd = (vmulq_n_f32(d.0, ab.d), vmulq_n_f32(d.1, ab.d));
                    let off = vdupq_n_s32(8 * s);
                    let s0 = vcvtq_f32_s32(vsubq_s32(sumi[0], off));
                    let s1 = vcvtq_f32_s32(vsubq_s32(sumi[1], off));
                    acc[t][0] = vaddq_f32(acc[t][0], vmulq_f32(dd.0, s0));
                    acc[t][1] = vaddq_f32(acc[t][1], vmulq_f32(dd.1, s1));
                }
            }
            for (t, acc) in acc.iter().enumerate() {
                // SAFETY: 8t + 8 <= 16 <= out.len() (asserted above).
                unsafe {
                    vst1q_f32(out.as_mut_ptr().add(ROWS * t), acc[0]);
                    vst1q_f32(out.as_mut_ptr().add(ROWS * t + 4), acc[1]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{cast_blocks, cast_blocks_mut};
    use crate::formats::{q4_0, q4_1};
    use crate::testutil::{random_f32, random_q8_1, rng};

    #[cfg(target_arch = "x86_64")]
    type Gemm<B> = unsafe fn(&[B], &[BlockQ8_1], &[i32], &mut [f32]);

    /// The x86 flavours this CPU can run, as (name, gemm, gemv); AVX-512 VNNI is tested only
    /// where the CPU has it (CI's CPU may not: the AVX2 flavour is then the one checked).
    #[cfg(target_arch = "x86_64")]
    fn x86_flavours<B: Q4x8>() -> Vec<(&'static str, Gemm<B>, Gemm<B>)> {
        let mut out: Vec<(&str, Gemm<B>, Gemm<B>)> = Vec::new();
        if crate::required::test_needs("avx2") {
            out.push(("avx2", avx2::gemm::<B>, avx2::gemv::<B>));
        }
        if crate::required::test_needs("avx512vnni") {
            out.push(("avx512vnni", avx512vnni::gemm::<B>, avx512vnni::gemv::<B>));
        }
        eprintln!(
            "x86 flavours: {:?}",
            out.iter().map(|f| f.0).collect::<Vec<_>>()
        );
        out
    }

    /// 8 random rows of `nb` blocks of `B`'s source format, `t` random tokens quantized to
    /// Q8_1, and each row dotted with each token by the format's scalar reference.
    fn setup<B: Q4x8>(
        nb: usize,
        t: usize,
        seed: u64,
        quantize: fn(&[f32], &mut [B::Source]),
        dot: fn(&[B::Source], &[BlockQ8_1]) -> f32,
    ) -> (Vec<B>, Vec<BlockQ8_1>, Vec<f32>) {
        let mut r = rng(seed);
        let w = random_f32(&mut r, ROWS * 32 * nb, 0.05);
        let mut wq = vec![0u8; ROWS * nb * size_of::<B::Source>()];
        quantize(&w, cast_blocks_mut(&mut wq));
        let rows = cast_blocks::<B::Source>(&wq);
        let mut a = random_q8_1(&mut r, t * nb);
        // Extreme activations: the i16 partial sums' worst case.
        a[0].qs = [127; 32];
        if a.len() > 1 {
            a[1].qs = [-127; 32];
        }
        let mut want = vec![0.0; ROWS * t];
        for tok in 0..t {
            for row in 0..ROWS {
                want[ROWS * tok + row] = dot(
                    &rows[row * nb..(row + 1) * nb],
                    &a[tok * nb..(tok + 1) * nb],
                );
            }
        }
        (pack::<B>(rows, nb), a, want)
    }

    fn check<B: Q4x8>(
        quantize: fn(&[f32], &mut [B::Source]),
        dot: fn(&[B::Source], &[BlockQ8_1]) -> f32,
    ) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let shapes = [
            (1, 1),
            (2, 2),
            (3, 2),
            (18, 3),
            (18, 4),
            (48, 1),
            (7, 4),
            (18, 5),
            (20, 8),
            (7, 7),
        ];
        for (nb, t) in shapes {
            let (p, a, want) = setup::<B>(nb, t, 7 + nb as u64, quantize, dot);
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            let mut got = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &sums, &mut got);
            assert_eq!(bits(&got), bits(&want), "scalar, nb {nb}, {t} tokens");
            #[cfg(target_arch = "x86_64")]
            for (name, gemm, _) in x86_flavours::<B>() {
                let mut got = vec![0.0; ROWS * t];
                // SAFETY: each flavour is listed only where its features were detected.
                unsafe { gemm(&p, &a, &sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "{name}, nb {nb}, {t} tokens");
            }
        }
    }

    /// Decode's many-groups call equals one call per group, bit for bit.
    fn check_gemv<B: Q4x8>(
        quantize: fn(&[f32], &mut [B::Source]),
        dot: fn(&[B::Source], &[BlockQ8_1]) -> f32,
    ) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for nb in [1, 18, 48] {
            let (mut w, a, _) = setup::<B>(nb, 1, 90 + nb as u64, quantize, dot);
            for seed in [91, 92] {
                w.extend(setup::<B>(nb, 1, seed + nb as u64, quantize, dot).0);
            }
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            let mut want = vec![0.0; 3 * ROWS];
            for (wg, o) in w.chunks_exact(nb).zip(want.chunks_exact_mut(ROWS)) {
                gemm_scalar(wg, &a, &sums, o);
            }
            let mut got = vec![0.0; 3 * ROWS];
            gemv_scalar(&w, &a, &sums, &mut got);
            assert_eq!(bits(&got), bits(&want), "scalar, nb {nb}");
            #[cfg(target_arch = "x86_64")]
            for (name, gemm, gemv) in x86_flavours::<B>() {
                for (wg, o) in w.chunks_exact(nb).zip(want.chunks_exact_mut(ROWS)) {
                    // SAFETY: each flavour is listed only where its features were detected.
                    unsafe { gemm(wg, &a, &sums, o) };
                }
                // SAFETY: as above.
                unsafe { gemv(&w, &a, &sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "{name}, nb {nb}");
            }
        }
    }

    /// The activations' integer sums (each block's, and Q5_0's per-lane offsets), whatever
    /// kernel computes them, are the plain sums; extreme blocks included.
    #[test]
    fn activation_sums_are_the_plain_sums() {
        let mut a = random_q8_1(&mut rng(3), 40);
        a[0].qs = [-128; 32];
        a[1].qs = [127; 32];
        let mut sums = vec![0; a.len()];
        activation_sums(&a, &mut sums);
        let mut lanes = vec![0; 8 * a.len()];
        crate::formats::q5_0x8::lane_offsets(&a, &mut lanes);
        for (b, block) in a.iter().enumerate() {
            let q: Vec<i32> = block.qs.iter().map(|&v| i32::from(v)).collect();
            assert_eq!(sums[b], q.iter().sum::<i32>(), "block {b}");
            for j in 0..8 {
                let want = -16 * q[4 * j..4 * j + 4].iter().sum::<i32>();
                assert_eq!(lanes[8 * b + j], want, "block {b}, lane {j}");
            }
        }
    }

    #[test]
    fn gemv_equals_a_gemm_per_group_bit_for_bit() {
        check_gemv::<BlockQ4_0x8>(q4_0::quantize, q4_0::dot_scalar);
        check_gemv::<BlockQ4_1x8>(q4_1::quantize, q4_1::dot_scalar);
    }

    #[test]
    fn q4_0x8_equals_the_gguf_row_dot_bit_for_bit() {
        check::<BlockQ4_0x8>(q4_0::quantize, q4_0::dot_scalar);
    }

    /// Every aarch64 flavour (baseline NEON, SDOT, and SMMLA for prefill) against the GGUF
    /// row dot, for 1 to 4 tokens (SMMLA takes them in pairs, an odd one on SDOT), and decode's
    /// many-groups call against one call per group. Under qemu in CI: on the `max` CPU, which
    /// has dotprod and i8mm, and on cortex-a53, which has neither.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn q4_0x8_neon_flavours_equal_the_gguf_row_dot_bit_for_bit() {
        type Gemm = unsafe fn(&[BlockQ4_0x8], &[BlockQ8_1], &[i32], &mut [f32]);
        let mut gemms: Vec<(&str, Gemm, Gemm)> =
            vec![("neon", neon::gemm as Gemm, neon::gemv as Gemm)];
        if crate::required::test_needs("dotprod") {
            gemms.push(("sdot", neon::dotprod::gemm, neon::dotprod::gemv));
            if crate::required::test_needs("i8mm") {
                gemms.push(("i8mm", neon::i8mm::gemm, neon::dotprod::gemv));
            }
        }
        eprintln!(
            "flavours: {:?}",
            gemms.iter().map(|g| g.0).collect::<Vec<_>>()
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (nb, t) in [(1, 1), (2, 2), (3, 3), (18, 4), (48, 1), (7, 4), (5, 2)] {
            let (p, a, want) =
                setup::<BlockQ4_0x8>(nb, t, 30 + nb as u64, q4_0::quantize, q4_0::dot_scalar);
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            for &(name, gemm, _) in &gemms {
                let mut got = vec![0.0; ROWS * t];
                // SAFETY: each flavour is listed only where its features were detected.
                unsafe { gemm(&p, &a, &sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "{name}, nb {nb}, {t} tokens");
            }
        }
        for nb in [1, 18] {
            let (mut w, a, _) = setup::<BlockQ4_0x8>(nb, 1, 70, q4_0::quantize, q4_0::dot_scalar);
            w.extend(setup::<BlockQ4_0x8>(nb, 1, 71, q4_0::quantize, q4_0::dot_scalar).0);
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            let mut want = vec![0.0; 2 * ROWS];
            gemv_scalar(&w, &a, &sums, &mut want);
            for &(name, _, gemv) in &gemms {
                let mut got = vec![0.0; 2 * ROWS];
                // SAFETY: as above.
                unsafe { gemv(&w, &a, &sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "{name} gemv, nb {nb}");
            }
        }
    }

    /// Q4_1 keeps ggml's order: the GGUF layout's AVX2 dot, which equals llama.cpp's.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q4_1x8_equals_the_gguf_avx2_row_dot_bit_for_bit() {
        if crate::required::test_needs("avx2") {
            // SAFETY: AVX2, FMA and F16C were detected just above.
            check::<BlockQ4_1x8>(q4_1::quantize, |w, a| unsafe { q4_1::avx2::dot(w, a) });
        }
    }

    /// Elsewhere only the scalar kernel runs; it equals the reference up to summation order.
    #[test]
    fn q4_1x8_scalar_is_close_to_the_reference() {
        for (nb, t) in [(1, 1), (18, 3), (48, 2)] {
            let (p, a, want) =
                setup::<BlockQ4_1x8>(nb, t, 50 + nb as u64, q4_1::quantize, q4_1::dot_scalar);
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            let mut got = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &sums, &mut got);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
            }
        }
    }
}
