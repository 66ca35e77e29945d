//! The K-quant prompt kernels with tokens in the lanes (x86 with AVX-512 VNNI): Q2_K, Q3_K,
//! Q5_K, Q6_K and IQ4_XS weights against 16 tokens at once, each of a 512-bit register's 16
//! lanes one token.
//!
//! Why: the tiled kernels of those formats keep rows in lanes and add each
//! (row, token, super-block) across lanes, a dozen instructions per `vpdpbusd`'s worth of work.
//! Here the activations of 16 tokens are transposed once per matmul ([`Q8KLanes`]: element quad
//! `k` of every token in one register), and a row's codes are unpacked once per matmul
//! ([`Unpacked`]), so four codes broadcast to every lane meet one register of activations in
//! one `vpdpbusd`, with no sum across lanes anywhere. A row tile of `R` rows shares each
//! activation load.
//!
//! Numerics: per (row, token, super-block) the same exact integers as the scalar references
//! (`s1 = Σ scale·Σ q·a`, and for formats with minimums `s2 = Σ min·Σ a`), then per lane the very
//! float step of [`super::tiled_step`], so every result equals the format's
//! `dot_tiled_scalar` bit for bit (tested for each format, and through `matmul`).
//! - Codes are stored as unsigned bytes (`vpdpbusd` reads its first operand unsigned): a
//!   format whose values can be negative stores `value + 2^BIAS_SHIFT`, and each sub-block's
//!   integer starts at `-2^BIAS_SHIFT·Σa` (the activations' sums, which [`Q8KLanes`] carries
//!   negated).
//! - The minimum term is carried negated too: `fma(dmin, -s2, res)` rounds exactly as
//!   `fma(-dmin, s2, res)`.

use super::iq4_xs::BlockIq4Xs;
use super::q2_k::BlockQ2K;
use super::q3_k::BlockQ3K;
use super::q5_k::BlockQ5K;
use super::q6_k::BlockQ6K;
use super::q8_k::BlockQ8K;

/// Tokens per group: the lanes of a 512-bit register of i32.
pub(crate) const LANES: usize = 16;
/// Four-element quads per super-block: what one `vpdpbusd` lane takes.
const QUADS: usize = 64;

/// One super-block of 16 tokens' Q8_K activations, transposed: `quads[k][t]` holds token t's
/// elements `4k..4k+4` (four i8 in one i32), `neg_sums[i][t]` minus its sum over the 16-element
/// sub-block i, `d[t]` its scale. Lanes past the group's tokens are zero.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct Q8KLanes {
    pub quads: [[i32; LANES]; QUADS],
    pub neg_sums: [[i32; LANES]; 16],
    pub d: [f32; LANES],
}

impl Default for Q8KLanes {
    fn default() -> Self {
        Q8KLanes {
            quads: [[0; LANES]; QUADS],
            neg_sums: [[0; LANES]; 16],
            d: [0.0; LANES],
        }
    }
}

/// Transposes up to [`LANES`] tokens of Q8_K activations (`a`: token after token, `out.len()`
/// blocks each) into `out`, one [`Q8KLanes`] per super-block.
pub(crate) fn transpose(a: &[BlockQ8K], out: &mut [Q8KLanes]) {
    transpose_with(a, out, |ab, t, o| {
        for (k, q) in o.quads.iter_mut().enumerate() {
            let at = 4 * (k % 8);
            q[t] = quad(&ab.qs[k / 8][at..at + 4]);
        }
        for (s, &sum) in o.neg_sums.iter_mut().zip(&ab.bsums) {
            s[t] = -i32::from(sum);
        }
        o.d[t] = ab.d;
    });
}

/// The skeleton of a transposition into token lanes: `a` holds up to [`LANES`] tokens of
/// `out.len()` blocks each, token after token; each block of `out` starts from zeros when the
/// group has fewer tokens than lanes, then `put(block, t, out block)` writes token t's lane.
pub(crate) fn transpose_with<A, G: Default>(
    a: &[A],
    out: &mut [G],
    put: impl Fn(&A, usize, &mut G),
) {
    let nb = out.len();
    assert!(
        nb > 0 && a.len().is_multiple_of(nb),
        "lanes transpose: partial token"
    );
    let n = a.len() / nb;
    assert!(n <= LANES, "lanes transpose: more than {LANES} tokens");
    for (b, o) in out.iter_mut().enumerate() {
        if n < LANES {
            *o = G::default();
        }
        for t in 0..n {
            put(&a[t * nb + b], t, o);
        }
    }
}

/// Four activation bytes as one i32 lane (`vpdpbusd` reads a lane as four bytes).
#[inline]
pub(crate) fn quad(four: &[i8]) -> i32 {
    i32::from_le_bytes(std::array::from_fn(|i| four[i] as u8))
}

/// One weight super-block unpacked for the kernel: the 256 codes as unsigned bytes in element
/// order (value plus the format's bias), four to an i32; one scale (and minimum) per
/// [`LaneFormat::SUB`] elements; the block's f32 scales.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct Unpacked {
    pub quads: [i32; QUADS],
    pub scales: [i32; 16],
    pub mins: [i32; 16],
    pub d: f32,
    pub dmin: f32,
}

impl Default for Unpacked {
    fn default() -> Self {
        Unpacked {
            quads: [0; QUADS],
            scales: [0; 16],
            mins: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

impl Unpacked {
    /// The codes as bytes, to be written by an unpacker.
    fn bytes_mut(&mut self) -> &mut [u8; 256] {
        // SAFETY: 64 i32 are 256 bytes, and every byte pattern is a valid i32 and u8.
        unsafe { &mut *self.quads.as_mut_ptr().cast::<[u8; 256]>() }
    }
}

/// A weight format the kernel takes.
pub(crate) trait LaneFormat: Copy + Sync + 'static {
    /// Elements under one scale (and one minimum): 16 or 32.
    const SUB: usize;
    /// What the stored codes exceed the format's values by, as a power of two, or `None` for
    /// formats whose values are never negative.
    const BIAS_SHIFT: Option<u32>;
    /// Whether the format subtracts `dmin·Σ min·Σ a`.
    const MIN: bool;
    /// Unpacks one super-block.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    unsafe fn unpack(&self, u: &mut Unpacked);
}

#[cfg(target_arch = "x86_64")]
mod unpack {
    use std::arch::x86_64::*;

    use super::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ5K, BlockQ6K, Unpacked};
    use crate::x86::{f16_to_f32, load_u8x32, unpack_nibbles_32};

    /// Stores 32 bytes at `out[32c..]`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn store(out: &mut [u8; 256], c: usize, v: __m256i) {
        let dst = &mut out[32 * c..32 * c + 32];
        // SAFETY: `dst` is 32 writable bytes, the width of the store.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), v) }
    }

    /// Q3_K: codes plus 4 (0..7), the sixteen signed scales.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q3_k(b: &BlockQ3K, u: &mut Unpacked) {
        let hm = load_u8x32(&b.hmask);
        let q = [load_u8x32(&b.qs[0]), load_u8x32(&b.qs[1])];
        let bytes = u.bytes_mut();
        for c in 0..8 {
            store(bytes, c, crate::formats::q3_k::avx2::biased_codes(q, hm, c));
        }
        u.scales = crate::formats::q3_k::unpack_scales(&b.scales);
        u.d = f16_to_f32(b.d);
    }

    /// Q2_K: codes 0..3, the sixteen scales and minimums.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q2_k(b: &BlockQ2K, u: &mut Unpacked) {
        let q = [load_u8x32(&b.qs[0]), load_u8x32(&b.qs[1])];
        let bytes = u.bytes_mut();
        for c in 0..8 {
            store(bytes, c, crate::formats::q2_k::avx2::chunk_codes(q, c));
        }
        for (i, &s) in b.scales.iter().enumerate() {
            u.scales[i] = i32::from(s & 0xF);
            u.mins[i] = i32::from(s >> 4);
        }
        u.d = f16_to_f32(b.d);
        u.dmin = f16_to_f32(b.dmin);
    }

    /// Q6_K: codes 0..63 (the value plus 32), the sixteen signed scales.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q6_k(b: &BlockQ6K, u: &mut Unpacked) {
        let (codes, _) = crate::formats::q6_k::avx2::unpack(b);
        let bytes = u.bytes_mut();
        for (c, &v) in codes.iter().enumerate() {
            store(bytes, c, v);
        }
        for (s, &v) in u.scales.iter_mut().zip(&b.scales) {
            *s = i32::from(v);
        }
        u.d = f16_to_f32(b.d);
    }

    /// Q5_K: codes 0..31, the eight scales and minimums.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q5_k(b: &BlockQ5K, u: &mut Unpacked) {
        let qh = load_u8x32(&b.qh);
        let bytes = u.bytes_mut();
        for c in 0..4 {
            let (lo, hi) = crate::formats::q5_k::avx2::code_pair(b, qh, c);
            store(bytes, 2 * c, lo);
            store(bytes, 2 * c + 1, hi);
        }
        let (sc, mn) = crate::formats::q4_k::unpack_scales(&b.scales);
        for j in 0..8 {
            u.scales[j] = i32::from(sc[j]);
            u.mins[j] = i32::from(mn[j]);
        }
        u.d = f16_to_f32(b.d);
        u.dmin = f16_to_f32(b.dmin);
    }

    /// IQ4_XS: table values plus 128 (1..241), the eight signed scales.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn iq4_xs(b: &BlockIq4Xs, u: &mut Unpacked) {
        const VALUES: [u8; 16] = crate::formats::iq4_nlx8::shifted_table(128);
        // SAFETY: the table is 16 readable bytes, the width of the load.
        let t = unsafe { _mm_loadu_si128(VALUES.as_ptr().cast()) };
        let table = _mm256_set_m128i(t, t);
        let bytes = u.bytes_mut();
        for j in 0..8 {
            store(
                bytes,
                j,
                _mm256_shuffle_epi8(table, unpack_nibbles_32(&b.qs[j])),
            );
        }
        for (i, &s) in b.scales().iter().enumerate() {
            u.scales[i] = s;
        }
        u.d = f16_to_f32(b.d);
    }
}

#[cfg(target_arch = "x86_64")]
impl LaneFormat for BlockQ3K {
    const SUB: usize = 16;
    const BIAS_SHIFT: Option<u32> = Some(2);
    const MIN: bool = false;
    unsafe fn unpack(&self, u: &mut Unpacked) {
        // SAFETY: the caller guarantees the features.
        unsafe { unpack::q3_k(self, u) }
    }
}

#[cfg(target_arch = "x86_64")]
impl LaneFormat for BlockQ2K {
    const SUB: usize = 16;
    const BIAS_SHIFT: Option<u32> = None;
    const MIN: bool = true;
    unsafe fn unpack(&self, u: &mut Unpacked) {
        // SAFETY: the caller guarantees the features.
        unsafe { unpack::q2_k(self, u) }
    }
}

#[cfg(target_arch = "x86_64")]
impl LaneFormat for BlockQ6K {
    const SUB: usize = 16;
    const BIAS_SHIFT: Option<u32> = Some(5);
    const MIN: bool = false;
    unsafe fn unpack(&self, u: &mut Unpacked) {
        // SAFETY: the caller guarantees the features.
        unsafe { unpack::q6_k(self, u) }
    }
}

#[cfg(target_arch = "x86_64")]
impl LaneFormat for BlockQ5K {
    const SUB: usize = 32;
    const BIAS_SHIFT: Option<u32> = None;
    const MIN: bool = true;
    unsafe fn unpack(&self, u: &mut Unpacked) {
        // SAFETY: the caller guarantees the features.
        unsafe { unpack::q5_k(self, u) }
    }
}

#[cfg(target_arch = "x86_64")]
impl LaneFormat for BlockIq4Xs {
    const SUB: usize = 32;
    const BIAS_SHIFT: Option<u32> = Some(7);
    const MIN: bool = false;
    unsafe fn unpack(&self, u: &mut Unpacked) {
        // SAFETY: the caller guarantees the features.
        unsafe { unpack::iq4_xs(self, u) }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{LaneFormat, Q8KLanes, Unpacked, LANES};

    /// `R` rows against one group of 16 tokens: row r's super-blocks unpacked in
    /// `u[r·nb..(r + 1)·nb]`, the tokens' in `a` (`nb` of them); `out[r][t]` is row r dot token
    /// t in the tiled order (lanes past the group's tokens hold nothing of use).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn rows<F: LaneFormat, const R: usize>(
        u: &[Unpacked],
        a: &[Q8KLanes],
        out: &mut [[f32; LANES]],
    ) {
        let nb = a.len();
        assert!(
            u.len() >= R * nb && out.len() >= R,
            "k_lanes rows: short buffers"
        );
        let per_sub = F::SUB / 4;
        let shift = _mm_cvtsi32_si128(F::BIAS_SHIFT.unwrap_or(0) as i32);
        let load = |v: &[i32; LANES]| {
            // SAFETY: 16 i32 are 64 readable bytes, aligned by `Q8KLanes`' alignment.
            unsafe { _mm512_load_si512(v.as_ptr().cast()) }
        };
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, ab) in a.iter().enumerate() {
            let ub: [&Unpacked; R] = std::array::from_fn(|r| &u[r * nb + b]);
            let mut total = [_mm512_setzero_si512(); R];
            let mut neg_min = [_mm512_setzero_si512(); R];
            for i in 0..16 / (F::SUB / 16) {
                // Minus the activations' sum over sub-block i, per token.
                let neg_sum = if F::SUB == 16 {
                    load(&ab.neg_sums[i])
                } else {
                    _mm512_add_epi32(load(&ab.neg_sums[2 * i]), load(&ab.neg_sums[2 * i + 1]))
                };
                let start = match F::BIAS_SHIFT {
                    Some(_) => _mm512_sll_epi32(neg_sum, shift),
                    None => _mm512_setzero_si512(),
                };
                let mut sub = [start; R];
                for k in i * per_sub..(i + 1) * per_sub {
                    let x = load(&ab.quads[k]);
                    for r in 0..R {
                        let w = _mm512_set1_epi32(ub[r].quads[k]);
                        sub[r] = _mm512_dpbusd_epi32(sub[r], w, x);
                    }
                }
                for r in 0..R {
                    let scale = _mm512_set1_epi32(ub[r].scales[i]);
                    total[r] = _mm512_add_epi32(total[r], _mm512_mullo_epi32(sub[r], scale));
                    if F::MIN {
                        let m = _mm512_set1_epi32(ub[r].mins[i]);
                        neg_min[r] = _mm512_add_epi32(neg_min[r], _mm512_mullo_epi32(neg_sum, m));
                    }
                }
            }
            // SAFETY: 16 f32 are 64 readable bytes, aligned by `Q8KLanes`' alignment.
            let da = unsafe { _mm512_load_ps(ab.d.as_ptr()) };
            for r in 0..R {
                let mut res = _mm512_mul_ps(_mm512_set1_ps(ub[r].d), _mm512_cvtepi32_ps(total[r]));
                if F::MIN {
                    let m = _mm512_cvtepi32_ps(neg_min[r]);
                    res = _mm512_fmadd_ps(_mm512_set1_ps(ub[r].dmin), m, res);
                }
                acc[r] = _mm512_fmadd_ps(res, da, acc[r]);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            // SAFETY: `o` is 16 writable f32, the width of the store.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc) };
        }
    }

    /// One row against `out.len()` tokens (`a`: token after token), through the same unpacking,
    /// transposition and kernel as a matmul: the formats' tiled-order tests run it.
    #[cfg(test)]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_multi<F: LaneFormat>(
        w: &[F],
        a: &[crate::formats::q8_k::BlockQ8K],
        out: &mut [f32],
    ) {
        let nb = w.len();
        let mut u = vec![Unpacked::default(); nb];
        for (b, u) in w.iter().zip(&mut u) {
            // SAFETY: this function's features include the unpackers'.
            unsafe { b.unpack(u) };
        }
        let mut lanes = vec![Q8KLanes::default(); nb];
        for (t0, o) in (0..out.len()).step_by(LANES).zip(out.chunks_mut(LANES)) {
            super::transpose(&a[t0 * nb..(t0 + o.len()) * nb], &mut lanes);
            let mut tile = [[0.0; LANES]; 1];
            rows::<F, 1>(&u, &lanes, &mut tile);
            o.copy_from_slice(&tile[0][..o.len()]);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::block::{cast_blocks, ByteBlock};
    use crate::formats::q8_k;
    use crate::testutil::{random_f32, rng};
    use crate::{matmul, GgmlType, Weights};

    /// A whole matmul with 8 or more tokens (the driver's transposition, row tiles, tails of
    /// rows and tokens, and split over threads) equals the format's scalar tiled order on
    /// every (row, token), bit for bit.
    fn matmul_equals_tiled_scalar<F: LaneFormat + ByteBlock>(
        ty: GgmlType,
        tiled: fn(&[F], &[BlockQ8K]) -> f32,
        seed: u64,
    ) {
        let mut r = rng(seed);
        let pools: Vec<_> = [1, 3]
            .map(|n| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .unwrap()
            })
            .into();
        for (rows, cols, n_tok) in [(5, 256, 8), (64, 512, 16), (131, 768, 17), (20, 256, 40)] {
            let w = random_f32(&mut r, rows * cols, 0.05);
            let data = crate::quantize_row(ty, &w).unwrap();
            let x = random_f32(&mut r, n_tok * cols, 1.0);
            let nb = cols / 256;
            let mut act = vec![BlockQ8K::default(); n_tok * nb];
            q8_k::quantize_scalar(&x, &mut act);
            let blocks = cast_blocks::<F>(&data);
            let want: Vec<u32> = (0..n_tok * rows)
                .map(|i| {
                    let (t, row) = (i / rows, i % rows);
                    let a = &act[t * nb..(t + 1) * nb];
                    tiled(&blocks[row * nb..(row + 1) * nb], a).to_bits()
                })
                .collect();
            for pool in &pools {
                let mut out = vec![f32::NAN; n_tok * rows];
                let wt = Weights::new(ty, &data, rows, cols).unwrap();
                pool.install(|| matmul(&wt, &x, n_tok, &mut out)).unwrap();
                let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{ty}: {rows} rows, {n_tok} tokens");
            }
        }
    }

    #[test]
    fn a_batch_equals_the_scalar_tiled_order_bit_for_bit() {
        if !crate::required::test_needs("avx512vnni") {
            return;
        }
        use crate::formats::{iq4_xs, q2_k, q3_k, q5_k, q6_k};
        matmul_equals_tiled_scalar(GgmlType::Q6_K, q6_k::dot_tiled_scalar, 4);
        matmul_equals_tiled_scalar(GgmlType::Q5_K, q5_k::dot_tiled_scalar, 5);
        matmul_equals_tiled_scalar(GgmlType::Q3_K, q3_k::dot_tiled_scalar, 1);
        matmul_equals_tiled_scalar(GgmlType::Q2_K, q2_k::dot_tiled_scalar, 2);
        matmul_equals_tiled_scalar(GgmlType::IQ4_XS, iq4_xs::dot_tiled_scalar, 3);
    }
}
