//! Attention for the query heads that share one kv head (grouped-query attention), all at
//! once: each cached key and value is loaded and widened from f16 once for the whole group
//! instead of once per query head. Every head's sums are formed exactly as
//! [`crate::attention`] forms them (same lanes, same order, same reduction), so the results
//! are the same bits as calling the per-head functions head by head; the tests check that.

use half::f16;

use crate::attention::{check_rows, dot_f16_rows, weighted_sum_f16_rows, F16SumOrder};
#[cfg(target_arch = "x86_64")]
use crate::dispatch::kernels;

/// Most query heads per kv head the SIMD paths take in one pass; larger groups go in parts.
#[cfg(target_arch = "x86_64")]
const MAX_GROUP: usize = 4;

/// `scores[j * rows + p] = dot(q_j, key p) * scale` for each query head j of `qs` (`g` heads of
/// `hd` values, back to back, already rounded to f16) and each of `rows = scores.len() / g`
/// cached keys, summed in `order` as [`dot_f16_rows`] sums them.
///
/// # Panics
/// If `qs.len()` is not a multiple of `hd` or `scores.len()` not one of the group size, or a
/// row's slice would run past `cache`.
#[allow(clippy::too_many_arguments)]
pub fn dot_f16_rows_group(
    qs: &[f32],
    hd: usize,
    cache: &[f16],
    stride: usize,
    offset: usize,
    scale: f32,
    order: F16SumOrder,
    scores: &mut [f32],
) {
    let (_, rows) = group_shape(qs.len(), hd, scores.len(), "queries", "scores");
    if rows == 0 {
        return;
    }
    check_rows(cache, stride, offset, hd, rows);
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() && hd.is_multiple_of(order.lanes()) {
        for (q, s) in qs
            .chunks(MAX_GROUP * hd)
            .zip(scores.chunks_mut(MAX_GROUP * rows))
        {
            // SAFETY: an x86 SIMD table is only selected after detecting avx2+fma+f16c; every
            // row's slice was checked to lie inside `cache`; hd is a multiple of the lanes.
            unsafe { avx2::dot_group(q, hd, cache, stride, offset, scale, order, s) };
        }
        return;
    }
    for (q, s) in qs.chunks_exact(hd).zip(scores.chunks_exact_mut(rows)) {
        dot_f16_rows(q, cache, stride, offset, scale, order, s);
    }
}

/// The group's head count and positions per head: `heads_len` floats of whole `hd`-wide heads
/// (at least one), and `rows_len` floats making a row per head.
fn group_shape(
    heads_len: usize,
    hd: usize,
    rows_len: usize,
    heads: &str,
    rows: &str,
) -> (usize, usize) {
    assert!(
        hd > 0 && heads_len.is_multiple_of(hd),
        "{heads} are whole heads"
    );
    let g = heads_len / hd;
    assert!(
        g > 0 && rows_len.is_multiple_of(g),
        "a row of {rows} per head"
    );
    (g, rows_len / g)
}

/// `out_j = Σ_p f16(probs_j[p]) · value p` for each query head j, as [`weighted_sum_f16_rows`]
/// computes it head by head. `probs`: `g` rows of `rows` probabilities, rounded to f16 in place
/// (that rounding is part of the sum's definition); `out`: `g` heads of `hd`; `scratch`: at
/// least `g · order.lanes() · hd` floats.
///
/// # Panics
/// If the shapes disagree, a row's slice would run past `cache`, or `scratch` is too short.
#[allow(clippy::too_many_arguments)]
pub fn weighted_sum_f16_rows_group(
    probs: &mut [f32],
    hd: usize,
    cache: &[f16],
    stride: usize,
    offset: usize,
    order: F16SumOrder,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (g, rows) = group_shape(out.len(), hd, probs.len(), "outputs", "probabilities");
    let lanes = order.lanes();
    assert!(
        scratch.len() >= g * lanes * hd,
        "scratch holds every head's lanes"
    );
    if rows == 0 {
        // A sum over no positions.
        out.fill(0.0);
        return;
    }
    check_rows(cache, stride, offset, hd, rows);
    round_to_f16(probs);
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() && hd.is_multiple_of(32) {
        for ((p, o), acc) in probs
            .chunks(MAX_GROUP * rows)
            .zip(out.chunks_mut(MAX_GROUP * hd))
            .zip(scratch.chunks_mut(MAX_GROUP * lanes * hd))
        {
            // SAFETY: as in `dot_f16_rows_group`; hd is a multiple of 32; `acc` holds
            // lanes · hd floats per head of this part (asserted above).
            unsafe { avx2::weighted_sum_group(p, hd, cache, stride, offset, order, acc, o) };
        }
        return;
    }
    for ((p, o), acc) in probs
        .chunks_exact(rows)
        .zip(out.chunks_exact_mut(hd))
        .zip(scratch.chunks_exact_mut(lanes * hd))
    {
        weighted_sum_f16_rows(p, cache, stride, offset, order, acc, o);
    }
}

/// Each value replaced by its nearest f16, as f32 (exact, so rounding twice changes nothing).
pub fn round_to_f16(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() {
        // SAFETY: every x86 SIMD table implies F16C.
        unsafe { avx2::round_to_f16(x) };
        return;
    }
    for v in x {
        *v = f16::from_f32(*v).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::MAX_GROUP;
    use crate::attention::avx2::{load8, reduce_lanes};
    use crate::attention::F16SumOrder;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn round_to_f16(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: 8 floats in `c`.
            unsafe {
                let v = _mm256_loadu_ps(c.as_ptr());
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for v in chunks.into_remainder() {
            *v = f16::from_f32(*v).to_f32();
        }
    }

    /// `F16SumOrder::VecDot`'s reduction of four 8-lane accumulators (lanes 0-7, 8-15, 16-23,
    /// 24-31): (a0 + a2) + (a1 + a3) lane-wise, then halves, then (t0 + t1) + (t2 + t3), which
    /// is what two horizontal adds compute.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn reduce_vec_dot(a: &[__m256; 4]) -> f32 {
        let s = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let u = _mm_hadd_ps(t, t);
        _mm_cvtss_f32(_mm_hadd_ps(u, u))
    }

    /// Up to [`MAX_GROUP`] heads: `q` (g·hd), `scores` (g·rows). hd is a multiple of
    /// `order.lanes()`; every row lies inside `cache` (checked by the caller).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_group(
        q: &[f32],
        hd: usize,
        cache: &[f16],
        stride: usize,
        offset: usize,
        scale: f32,
        order: F16SumOrder,
        scores: &mut [f32],
    ) {
        match (order, q.len() / hd) {
            (F16SumOrder::TinyBlas, 1) => {
                dot_tiny::<1, 4>(q, hd, cache, stride, offset, scale, scores)
            }
            (F16SumOrder::TinyBlas, 2) => {
                dot_tiny::<2, 4>(q, hd, cache, stride, offset, scale, scores)
            }
            (F16SumOrder::TinyBlas, 3) => {
                dot_tiny::<3, 3>(q, hd, cache, stride, offset, scale, scores)
            }
            (F16SumOrder::TinyBlas, _) => {
                dot_tiny::<MAX_GROUP, 2>(q, hd, cache, stride, offset, scale, scores)
            }
            (F16SumOrder::VecDot, 1) => dot_vec::<1>(q, hd, cache, stride, offset, scale, scores),
            (F16SumOrder::VecDot, 2) => dot_vec::<2>(q, hd, cache, stride, offset, scale, scores),
            (F16SumOrder::VecDot, 3) => dot_vec::<3>(q, hd, cache, stride, offset, scale, scores),
            (F16SumOrder::VecDot, _) => {
                dot_vec::<MAX_GROUP>(q, hd, cache, stride, offset, scale, scores)
            }
        }
    }

    /// TinyBlas order (one 8-lane accumulator per dot, reduced as `hsum8`): G heads times K
    /// keys per step, K keys' widened rows shared by the G heads.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_tiny<const G: usize, const K: usize>(
        q: &[f32],
        hd: usize,
        cache: &[f16],
        stride: usize,
        offset: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let rows = scores.len() / G;
        assert!(q.len() >= G * hd && hd.is_multiple_of(8));
        let key = |p: usize| -> *const f16 { cache[p * stride + offset..][..hd].as_ptr() };
        let mut p = 0;
        while p < rows {
            let k_here = (rows - p).min(K);
            let mut acc = [[_mm256_setzero_ps(); K]; G];
            let keys: [*const f16; K] = std::array::from_fn(|j| key(p + j.min(k_here - 1)));
            for i in (0..hd).step_by(8) {
                // SAFETY: i + 8 <= hd, the length of each key slice (bounds-checked in `key`).
                let k: [__m256; K] = std::array::from_fn(|j| unsafe { load8(keys[j].add(i)) });
                for (h, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: h·hd + i + 8 <= G·hd <= q.len() (asserted).
                    let x = unsafe { _mm256_loadu_ps(q.as_ptr().add(h * hd + i)) };
                    for (a, k) in acc.iter_mut().zip(k) {
                        *a = _mm256_fmadd_ps(x, k, *a);
                    }
                }
            }
            for (h, acc) in acc.iter().enumerate() {
                for (j, a) in acc[..k_here].iter().enumerate() {
                    scores[h * rows + p + j] = crate::x86::hsum_ps(*a) * scale;
                }
            }
            p += k_here;
        }
    }

    /// VecDot order (four 8-lane accumulators per dot, element i in lane i % 32): G heads
    /// against one key at a time.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_vec<const G: usize>(
        q: &[f32],
        hd: usize,
        cache: &[f16],
        stride: usize,
        offset: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let rows = scores.len() / G;
        assert!(q.len() >= G * hd && hd.is_multiple_of(32));
        for p in 0..rows {
            let k = cache[p * stride + offset..][..hd].as_ptr();
            let mut acc = [[_mm256_setzero_ps(); 4]; G];
            for i in (0..hd).step_by(32) {
                // SAFETY: i + 32 <= hd, the key slice's length.
                let kv: [__m256; 4] = std::array::from_fn(|j| unsafe { load8(k.add(i + 8 * j)) });
                for (h, acc) in acc.iter_mut().enumerate() {
                    for (j, a) in acc.iter_mut().enumerate() {
                        // SAFETY: h·hd + i + 8j + 8 <= G·hd <= q.len() (asserted).
                        let x = unsafe { _mm256_loadu_ps(q.as_ptr().add(h * hd + i + 8 * j)) };
                        *a = _mm256_fmadd_ps(x, kv[j], *a);
                    }
                }
            }
            for (h, acc) in acc.iter().enumerate() {
                scores[h * rows + p] = reduce_vec_dot(acc) * scale;
            }
        }
    }

    /// Up to [`MAX_GROUP`] heads: `probs` (g·rows, already f16-rounded), `out` (g·hd), `acc`
    /// (g·lanes·hd). hd is a multiple of 32.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn weighted_sum_group(
        probs: &[f32],
        hd: usize,
        cache: &[f16],
        stride: usize,
        offset: usize,
        order: F16SumOrder,
        acc: &mut [f32],
        out: &mut [f32],
    ) {
        match out.len() / hd {
            1 => weighted::<1>(probs, hd, cache, stride, offset, order, acc, out),
            2 => weighted::<2>(probs, hd, cache, stride, offset, order, acc, out),
            3 => weighted::<3>(probs, hd, cache, stride, offset, order, acc, out),
            _ => weighted::<MAX_GROUP>(probs, hd, cache, stride, offset, order, acc, out),
        }
    }

    /// Lane l of head h gathers positions l, l + lanes, ... in order, 16 columns at a time in
    /// registers, each value row widened once for the G heads; then each head's lanes are
    /// reduced by the per-head path's own `reduce_lanes`.
    ///
    /// Why 16 columns and lane by lane: G heads' accumulators for 16 columns, the two widened
    /// values and the G weights fit AVX2's 16 registers (32 columns spilled), and a lane's
    /// rows, read once from memory for the first 16 columns, are still in L1 for the rest.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn weighted<const G: usize>(
        probs: &[f32],
        hd: usize,
        cache: &[f16],
        stride: usize,
        offset: usize,
        order: F16SumOrder,
        acc: &mut [f32],
        out: &mut [f32],
    ) {
        let lanes = order.lanes();
        let rows = probs.len() / G;
        assert!(out.len() >= G * hd && acc.len() >= G * lanes * hd && hd.is_multiple_of(16));
        for l in 0..lanes {
            for d0 in (0..hd).step_by(16) {
                let mut a = [[_mm256_setzero_ps(); 2]; G];
                for p in (l..rows).step_by(lanes) {
                    let v = cache[p * stride + offset + d0..][..16].as_ptr();
                    // SAFETY: 16 values in the slice.
                    let x = unsafe { [load8(v), load8(v.add(8))] };
                    for (h, a) in a.iter_mut().enumerate() {
                        let w = _mm256_set1_ps(probs[h * rows + p]);
                        a[0] = _mm256_fmadd_ps(w, x[0], a[0]);
                        a[1] = _mm256_fmadd_ps(w, x[1], a[1]);
                    }
                }
                for (h, a) in a.iter().enumerate() {
                    for (j, a) in a.iter().enumerate() {
                        let at = h * lanes * hd + l * hd + d0 + 8 * j;
                        // SAFETY: at + 8 <= G·lanes·hd <= acc.len() (asserted).
                        unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(at), *a) };
                    }
                }
            }
        }
        for (acc, out) in acc
            .chunks_exact(lanes * hd)
            .zip(out.chunks_exact_mut(hd))
            .take(G)
        {
            reduce_lanes(order, acc, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    /// The grouped paths give, head by head, the bits of the per-head functions (whose SIMD
    /// paths equal the scalar reference): groups of 1 to 6 heads (6 goes in two parts), both
    /// orders, heads with and without SIMD-sized widths, fewer keys than lanes.
    #[test]
    fn grouped_heads_equal_head_by_head_bit_for_bit() {
        let mut r = rng(91);
        for order in [F16SumOrder::TinyBlas, F16SumOrder::VecDot] {
            for g in 1..=6 {
                for (hd, stride, offset, rows) in [
                    (64, 192, 64, 37),
                    (64, 64, 0, 3),
                    (128, 1024, 896, 38),
                    (40, 80, 40, 9),
                    (64, 128, 0, 1),
                ] {
                    let cache = random_f16(&mut r, rows * stride);
                    let qs: Vec<f32> = random_f16(&mut r, g * hd)
                        .iter()
                        .map(|h| h.to_f32())
                        .collect();
                    let mut want = vec![0.0; g * rows];
                    for (q, s) in qs.chunks(hd).zip(want.chunks_mut(rows)) {
                        dot_f16_rows(q, &cache, stride, offset, 0.125, order, s);
                    }
                    let mut got = vec![0.0; g * rows];
                    dot_f16_rows_group(&qs, hd, &cache, stride, offset, 0.125, order, &mut got);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "dot {order:?} g {g} hd {hd} rows {rows}"
                    );

                    let probs = random_f32(&mut r, g * rows, 1.0);
                    let mut scratch = vec![0.0; 32 * hd];
                    let mut want = vec![0.0; g * hd];
                    for (p, o) in probs.chunks(rows).zip(want.chunks_mut(hd)) {
                        weighted_sum_f16_rows(p, &cache, stride, offset, order, &mut scratch, o);
                    }
                    let mut got = vec![0.0; g * hd];
                    let mut group_scratch = vec![0.0; g * 32 * hd];
                    let mut rounded = probs.clone();
                    weighted_sum_f16_rows_group(
                        &mut rounded,
                        hd,
                        &cache,
                        stride,
                        offset,
                        order,
                        &mut group_scratch,
                        &mut got,
                    );
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "sum {order:?} g {g} hd {hd} rows {rows}"
                    );
                }
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
}
