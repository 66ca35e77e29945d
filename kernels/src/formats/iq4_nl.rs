//! IQ4_NL weights: 32 elements per block as 4-bit indices into a fixed non-linear table of 16
//! signed values, with one f16 scale, `x = d * KVALUES[q]`. Dotted against Q8_1-style
//! activations (ggml's Q8_0: only `d` and `qs` are read).

use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `kvalues_iq4nl`: the 16 levels, denser near zero where weights cluster.
pub(crate) const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's `block_iq4_nl`: element `j < 16` is `KVALUES[qs[j] & 0xF]`, element `j + 16` is
/// `KVALUES[qs[j] >> 4]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockIq4Nl {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockIq4Nl>() == 18);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockIq4Nl {}

pub(crate) const QK: usize = 32;

impl BlockIq4Nl {
    /// The 32 table values, in element order.
    #[inline]
    pub(crate) fn values(&self) -> [i32; 32] {
        std::array::from_fn(|j| {
            let nibble = if j < 16 {
                self.qs[j] & 0xF
            } else {
                self.qs[j - 16] >> 4
            };
            i32::from(KVALUES[usize::from(nibble)])
        })
    }
}

/// `out.len() == 32 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockIq4Nl], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "iq4_nl dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (o, v) in o.iter_mut().zip(b.values()) {
            *o = v as f32 * d;
        }
    }
}

/// The table index whose value is nearest `v` (in units of the scale).
fn nearest(v: f32) -> u8 {
    let mut best = 0;
    for (i, &k) in KVALUES.iter().enumerate() {
        if (f32::from(k) - v).abs() < (f32::from(KVALUES[best]) - v).abs() {
            best = i;
        }
    }
    best as u8
}

/// Reference quantizer (simpler than ggml's search over scales): the element of largest
/// magnitude maps to the table's end value -127, then one least-squares refit of the scale
/// over the chosen levels is kept if it lowers the error. Indices are chosen against the f16
/// scale the dequantizer reads.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockIq4Nl]) {
    assert_eq!(x.len(), QK * out.len(), "iq4_nl quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let extreme = xb
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let fit = |d: f32| -> ([u8; 32], f32) {
            let d = round_to_f16(d);
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let idx: [u8; 32] = std::array::from_fn(|j| nearest(xb[j] * id));
            let err = xb
                .iter()
                .zip(&idx)
                .map(|(&v, &i)| (v - d * f32::from(KVALUES[usize::from(i)])).powi(2))
                .sum();
            (idx, err)
        };
        let d0 = extreme / -127.0;
        let (idx0, err0) = fit(d0);
        let (sxv, svv) = xb
            .iter()
            .zip(&idx0)
            .fold((0.0f32, 0.0f32), |(a, b), (&v, &i)| {
                let k = f32::from(KVALUES[usize::from(i)]);
                (a + v * k, b + k * k)
            });
        let d1 = if svv > 0.0 { sxv / svv } else { 0.0 };
        let (idx1, err1) = fit(d1);
        let (d, idx) = if err1 < err0 { (d1, idx1) } else { (d0, idx0) };
        for j in 0..16 {
            b.qs[j] = idx[j] | (idx[j + 16] << 4);
        }
        b.d = f32_to_f16(d);
    }
}

/// The exact integer `Σ KVALUES[q]·a` of one block.
#[inline]
fn sumi(wb: &BlockIq4Nl, ab: &BlockQ8_1) -> i32 {
    wb.values()
        .iter()
        .zip(&ab.qs)
        .map(|(&q, &y)| q * i32::from(y))
        .sum()
}

/// Scalar reference dot: per block the exact integer `Σ KVALUES[q]·a`, scaled by `d·d_a`.
pub(crate) fn dot_scalar(w: &[BlockIq4Nl], a: &[BlockQ8_1]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        acc += f16_to_f32(wb.d) * ab.d * sumi(wb, ab) as f32;
    }
    acc
}

/// Many rows against one token (decode): `out[r] = dot(row r, a)`.
pub(crate) fn dot_rows_scalar(w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_row(dot_scalar, w, a, out)
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockIq4Nl, BlockQ8_1, KVALUES};
    use crate::x86::{f16_to_f32, hsum_ps, load_i8x32, mul_sum_i8_i8, unpack_nibbles_32};

    /// A block's 32 table values as signed bytes, in element order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn values(table: __m256i, wb: &BlockIq4Nl) -> __m256i {
        _mm256_shuffle_epi8(table, unpack_nibbles_32(&wb.qs))
    }

    /// One row against one token, in ggml's order for `vec_dot_iq4_nl_q8_0`: blocks two at a
    /// time, even blocks into one 8-lane FMA accumulator and odd ones into another, the two
    /// added lane by lane and then across lanes; a last odd block fused-multiply-added as a
    /// scalar. On x86 a row's result equals llama.cpp's (built with GCC) bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockIq4Nl], a: &[BlockQ8_1]) -> f32 {
        // SAFETY: KVALUES is 16 readable bytes, the width of the load.
        let t = unsafe { _mm_loadu_si128(KVALUES.as_ptr().cast()) };
        let table = _mm256_set_m128i(t, t);
        let mut acc = [_mm256_setzero_ps(); 2];
        let pairs = w.len() / 2;
        for (wp, ap) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
            for ((wb, ab), acc) in wp.iter().zip(ap).zip(acc.iter_mut()) {
                let p = mul_sum_i8_i8(values(table, wb), load_i8x32(&ab.qs));
                let d = ab.d * f16_to_f32(wb.d);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), *acc);
            }
        }
        let sum = hsum_ps(_mm256_add_ps(acc[0], acc[1]));
        match (w.get(2 * pairs), a.get(2 * pairs)) {
            // Fused, as GCC (llama.cpp's usual compiler) contracts ggml's `sumf += d * sumi`.
            (Some(wb), Some(ab)) => {
                (ab.d * f16_to_f32(wb.d)).mul_add(super::sumi(wb, ab) as f32, sum)
            }
            _ => sum,
        }
    }

    /// Many rows against one token (decode), one whole row after another: `out[r] = dot(row r, a)`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_rows(w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
        crate::formats::each_row(|w, a| dot(w, a), w, a, out)
    }

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
        crate::formats::each_token(|w, a| dot(w, a), w, a, out)
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    /// The NEON kernels, written once for both flavours of the exact integer dot:
    /// `widen` (baseline NEON) and `sdot` (the dotprod extension).
    macro_rules! kernels {
        ($features:literal, $flavour:ident) => {
            use std::arch::aarch64::*;

            use crate::block::f16_to_f32;
            use crate::formats::iq4_nl::{BlockIq4Nl, BlockQ8_1, KVALUES};
            use crate::neon::$flavour::sum_i8x32;
            use crate::neon::{load_i8x32, load_u8x16};

            /// Many rows against one token (decode): one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_rows(w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_row(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: as in `dot_rows`: the features are this function's.
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it: the same exact block
            /// integers (table lookups by `tbl`), combined in the same order.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockIq4Nl], a: &[BlockQ8_1]) -> f32 {
                // SAFETY: KVALUES is 16 readable bytes, the width of the load.
                let table = unsafe { vld1q_s8(KVALUES.as_ptr()) };
                let low4 = vdupq_n_u8(0x0F);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let q = load_u8x16(&wb.qs);
                    let values = (
                        vqtbl1q_s8(table, vandq_u8(q, low4)),
                        vqtbl1q_s8(table, vshrq_n_u8::<4>(q)),
                    );
                    let sumi = sum_i8x32(values, load_i8x32(&ab.qs));
                    acc += f16_to_f32(wb.d) * ab.d * sumi as f32;
                }
                acc
            }
        };
    }

    kernels!("neon", widen);

    /// The same kernels on SDOT (ARMv8.2 dotprod): the same exact integers, so the same bits.
    pub(crate) mod dotprod {
        kernels!("neon,dotprod", sdot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn zeroed(n: usize) -> Vec<BlockIq4Nl> {
        vec![
            BlockIq4Nl {
                d: [0; 2],
                qs: [0; 16]
            };
            n
        ]
    }

    #[test]
    fn dequantize_matches_the_layout() {
        let b = BlockIq4Nl {
            d: f32_to_f16(0.5),
            qs: std::array::from_fn(|j| (j as u8) | (((15 - j) as u8) << 4)),
        };
        let mut out = [0.0f32; 32];
        dequantize(&[b], &mut out);
        for j in 0..16 {
            assert_eq!(out[j], f32::from(KVALUES[j]) * 0.5);
            assert_eq!(out[j + 16], f32::from(KVALUES[15 - j]) * 0.5);
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 9% of the data's RMS on Gaussian-like weights (this seed
        // measures 8.4%, about Q4_0's: the same 16 levels, spaced for a bell curve). No element
        // is off by more than a fifth of its block's largest magnitude: the widest gap between
        // levels is 24 of the table's 240, and the refitted scale may leave the extremes a
        // little outside the table's ends.
        let mut r = rng(60);
        let x = random_f32(&mut r, 32 * 64, 1.0);
        let mut q = zeroed(64);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.09, "relative rms error {rel}");
        for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact(32)) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax * 0.2, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_32(
            61,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockIq4Nl> {
        (0..nb)
            .map(|_| BlockIq4Nl {
                d: f32_to_f16(random_f32(r, 1, 0.01)[0]),
                qs: random_bytes(r),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(63);
        for nb in [1, 2, 3, 18, 49] {
            let (w, a) = (random_blocks(&mut r, nb), random_q8_1(&mut r, nb));
            // SAFETY: NEON is part of the aarch64 baseline.
            let simd = unsafe { neon::dot(&w, &a) };
            if crate::required::test_needs("dotprod") {
                // SAFETY: dotprod was just detected.
                let sdot = unsafe { neon::dotprod::dot(&w, &a) };
                assert_eq!(sdot.to_bits(), simd.to_bits(), "sdot against NEON");
            }
            assert_eq!(simd.to_bits(), dot_scalar(&w, &a).to_bits());
        }
    }

    /// The AVX2 dot adds in ggml's order (even and odd blocks in two 8-lane accumulators, a
    /// last odd block fused in as a scalar): it equals a scalar model of that order bit for bit, and the
    /// reference within the reordering bound.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(62);
        for nb in [1, 2, 3, 18, 48, 49] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_1(&mut r, nb);
            let block = |i: usize| {
                let q = w[i].values();
                let prods: [i32; 32] = std::array::from_fn(|j| q[j] * i32::from(a[i].qs[j]));
                (a[i].d * f16_to_f32(w[i].d), prods)
            };
            let pairs = nb / 2;
            // Each accumulator's lanes over its blocks (even or odd), then added lane by lane.
            let lanes = |parity: usize| {
                let mut acc = [0.0f32; 8];
                for i in (0..pairs).map(|p| 2 * p + parity) {
                    let (d, prods) = block(i);
                    for (k, acc) in acc.iter_mut().enumerate() {
                        let lane: i32 = prods[4 * k..4 * k + 4].iter().sum();
                        *acc = d.mul_add(lane as f32, *acc);
                    }
                }
                acc
            };
            let (even, odd) = (lanes(0), lanes(1));
            let sum: [f32; 8] = std::array::from_fn(|k| even[k] + odd[k]);
            let s: [f32; 4] = std::array::from_fn(|i| sum[i] + sum[i + 4]);
            let mut model = (s[0] + s[2]) + (s[1] + s[3]);
            if nb % 2 == 1 {
                let (d, prods) = block(nb - 1);
                model = d.mul_add(prods.iter().sum::<i32>() as f32, model);
            }
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_eq!(simd.to_bits(), model.to_bits(), "{nb}");
            let terms = lane_terms((0..nb).map(block));
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), terms, nb + 8);
        }
    }
}
