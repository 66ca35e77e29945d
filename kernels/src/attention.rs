//! Attention's f16 dot products, summed in ggml's order so the scores and the weighted values
//! round exactly as llama.cpp's do: the query (rounded to f16) against each cached key, and the
//! probabilities (rounded to f16) times the cached values. The keys and values are read in
//! place from the f16 cache, one kv head's slice of each row, and widened as they are used.
//!
//! Every product of two f16 values is exact in f32, so a fused multiply-add rounds the same as
//! a multiply then an add, and the order of the additions is all that can differ: the SIMD
//! paths add element i into lane i % lanes exactly as the scalar reference does, and reduce
//! the lanes in the same order, so all paths give the same bits.

use half::f16;

#[cfg(target_arch = "x86_64")]
use crate::dispatch::kernels;

/// The order in which ggml adds the products of an f16 x f16 dot product (KQ and KQV in
/// attention; a LoRA pair's side path, `crate::lora`). A batch of several query rows goes through llamafile's tinyBLAS (one 8-lane
/// accumulator); a single row through `ggml_vec_dot_f16` (four 8-lane accumulators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F16SumOrder {
    TinyBlas,
    VecDot,
}

impl F16SumOrder {
    /// The order ggml uses for a batch of `n_rows` query rows.
    pub fn for_batch(n_rows: usize) -> F16SumOrder {
        if n_rows >= 2 {
            F16SumOrder::TinyBlas
        } else {
            F16SumOrder::VecDot
        }
    }

    /// Element i of a dot product is added into lane i % lanes.
    pub fn lanes(self) -> usize {
        match self {
            F16SumOrder::TinyBlas => 8,
            F16SumOrder::VecDot => 32,
        }
    }

    /// The final sum of the lanes, in ggml's order.
    pub fn reduce(self, acc: &[f32]) -> f32 {
        match self {
            F16SumOrder::TinyBlas => hsum8(acc),
            F16SumOrder::VecDot => {
                // Accumulators 0+2 and 1+3, then 0+1 lane-wise; then halves; then pairs.
                let mut s = [0.0f32; 8];
                for (i, v) in s.iter_mut().enumerate() {
                    *v = (acc[i] + acc[16 + i]) + (acc[8 + i] + acc[24 + i]);
                }
                let t: [f32; 4] = std::array::from_fn(|i| s[i] + s[i + 4]);
                (t[0] + t[1]) + (t[2] + t[3])
            }
        }
    }
}

/// An 8-lane register summed as ggml's AVX `hsum`: halves, then (0+2) + (1+3).
pub fn hsum8(a: &[f32]) -> f32 {
    let t: [f32; 4] = std::array::from_fn(|i| a[i] + a[i + 4]);
    (t[0] + t[2]) + (t[1] + t[3])
}

/// `scores[p] = dot(q, cache[p * stride + offset ..][..q.len()]) * scale` for every p, each dot
/// summed in `order`. `q` holds f16 values (widened to f32).
///
/// # Panics
/// If a row's slice would run past `cache`.
pub fn dot_f16_rows(
    q: &[f32],
    cache: &[f16],
    stride: usize,
    offset: usize,
    scale: f32,
    order: F16SumOrder,
    scores: &mut [f32],
) {
    check_rows(cache, stride, offset, q.len(), scores.len());
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() {
        // SAFETY: an x86 SIMD table is only selected after detecting avx2+fma+f16c; every row's
        // slice was checked to lie inside `cache` above.
        unsafe { avx2::dot_rows(q, cache, stride, offset, scale, order, scores) };
        return;
    }
    dot_rows_scalar(q, cache, stride, offset, scale, order, scores);
}

/// `out = sum over p of f16(probs[p]) * cache[p * stride + offset ..][..out.len()]`, each output
/// element summed over positions in `order`. `scratch` needs `order.lanes() * out.len()` floats.
///
/// # Panics
/// If a row's slice would run past `cache`, or `scratch` is too short.
pub fn weighted_sum_f16_rows(
    probs: &[f32],
    cache: &[f16],
    stride: usize,
    offset: usize,
    order: F16SumOrder,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    check_rows(cache, stride, offset, out.len(), probs.len());
    let acc = &mut scratch[..order.lanes() * out.len()];
    acc.fill(0.0);
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() {
        // SAFETY: as in `dot_f16_rows`.
        unsafe { avx2::weighted_sum_rows(probs, cache, stride, offset, order, acc, out) };
        return;
    }
    weighted_sum_rows_scalar(probs, cache, stride, offset, order, acc, out);
}

pub(crate) fn check_rows(cache: &[f16], stride: usize, offset: usize, width: usize, rows: usize) {
    if rows > 0 {
        let end = (rows - 1) * stride + offset + width;
        assert!(
            end <= cache.len(),
            "attention rows: {rows} rows of {width} at offset {offset}, stride {stride}, run past a cache of {}",
            cache.len()
        );
    }
}

fn dot_rows_scalar(
    q: &[f32],
    cache: &[f16],
    stride: usize,
    offset: usize,
    scale: f32,
    order: F16SumOrder,
    scores: &mut [f32],
) {
    let hd = q.len();
    let lanes = order.lanes();
    for (p, s) in scores.iter_mut().enumerate() {
        let k = &cache[p * stride + offset..p * stride + offset + hd];
        let mut acc = [0.0f32; 32];
        for (i, (&x, &y)) in q.iter().zip(k).enumerate() {
            acc[i % lanes] += x * y.to_f32();
        }
        *s = order.reduce(&acc[..lanes]) * scale;
    }
}

fn weighted_sum_rows_scalar(
    probs: &[f32],
    cache: &[f16],
    stride: usize,
    offset: usize,
    order: F16SumOrder,
    acc: &mut [f32],
    out: &mut [f32],
) {
    let (hd, lanes) = (out.len(), order.lanes());
    for (p, &prob) in probs.iter().enumerate() {
        let prob = f16::from_f32(prob).to_f32();
        let v = &cache[p * stride + offset..p * stride + offset + hd];
        let lane = &mut acc[(p % lanes) * hd..(p % lanes + 1) * hd];
        for (a, &x) in lane.iter_mut().zip(v) {
            *a += prob * x.to_f32();
        }
    }
    reduce_columns(order, acc, out, 0);
}

/// `out[d] = order.reduce(column d of acc)` for d from `from` on; acc: (lanes, out.len()).
fn reduce_columns(order: F16SumOrder, acc: &[f32], out: &mut [f32], from: usize) {
    let (hd, lanes) = (out.len(), order.lanes());
    let mut column = [0.0f32; 32];
    for (d, o) in out.iter_mut().enumerate().skip(from) {
        for (l, c) in column[..lanes].iter_mut().enumerate() {
            *c = acc[l * hd + d];
        }
        *o = order.reduce(&column[..lanes]);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{reduce_columns, F16SumOrder};

    /// 8 halves from `p` widened to f32.
    ///
    /// # Safety
    /// `p` must point at 8 readable halves; the CPU must have F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes at `p`.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_rows(
        q: &[f32],
        cache: &[f16],
        stride: usize,
        offset: usize,
        scale: f32,
        order: F16SumOrder,
        scores: &mut [f32],
    ) {
        let hd = q.len();
        let lanes = order.lanes();
        let whole = hd / lanes * lanes;
        let mut done = 0;
        if order == F16SumOrder::TinyBlas && hd.is_multiple_of(8) {
            // Four keys at a time: one 8-lane accumulator each is a chain of hd/8 dependent
            // FMAs, so four side by side keep the FMA units busy instead of waiting on one.
            // Each key's sum is formed exactly as below (and as `hsum8` reduces it).
            done = scores.len() / 4 * 4;
            for (p4, s4) in scores[..done].chunks_exact_mut(4).enumerate() {
                let keys: [&[f16]; 4] = std::array::from_fn(|j| {
                    let p = 4 * p4 + j;
                    &cache[p * stride + offset..p * stride + offset + hd]
                });
                let mut acc = [_mm256_setzero_ps(); 4];
                for i in (0..hd).step_by(8) {
                    // SAFETY: i + 8 <= hd, the length of `q` and of each key.
                    let x = unsafe { _mm256_loadu_ps(q.as_ptr().add(i)) };
                    for (a, k) in acc.iter_mut().zip(keys) {
                        // SAFETY: as above.
                        *a = _mm256_fmadd_ps(x, unsafe { load8(k.as_ptr().add(i)) }, *a);
                    }
                }
                for (s, a) in s4.iter_mut().zip(acc) {
                    *s = crate::x86::hsum_ps(a) * scale;
                }
            }
        }
        for (p, s) in scores.iter_mut().enumerate().skip(done) {
            let k = &cache[p * stride + offset..p * stride + offset + hd];
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < whole {
                for (j, a) in acc[..lanes / 8].iter_mut().enumerate() {
                    // SAFETY: i + 8j + 8 <= whole <= hd, the length of `q` and of `k`.
                    let (x, y) = unsafe {
                        (
                            _mm256_loadu_ps(q.as_ptr().add(i + 8 * j)),
                            load8(k.as_ptr().add(i + 8 * j)),
                        )
                    };
                    // Exact products: the fused add rounds as a separate one would.
                    *a = _mm256_fmadd_ps(x, y, *a);
                }
                i += lanes;
            }
            let mut sums = [0.0f32; 32];
            for (j, a) in acc[..lanes / 8].iter().enumerate() {
                // SAFETY: 8 floats at 8j < 32.
                unsafe { _mm256_storeu_ps(sums.as_mut_ptr().add(8 * j), *a) };
            }
            for i in whole..hd {
                sums[i % lanes] += q[i] * k[i].to_f32();
            }
            *s = order.reduce(&sums[..lanes]) * scale;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn weighted_sum_rows(
        probs: &[f32],
        cache: &[f16],
        stride: usize,
        offset: usize,
        order: F16SumOrder,
        acc: &mut [f32],
        out: &mut [f32],
    ) {
        let (hd, lanes) = (out.len(), order.lanes());
        let whole = hd / 8 * 8;
        if hd.is_multiple_of(8) {
            // Lane by lane, up to 64 columns at a time held in registers: lane l gathers
            // positions l, l + lanes, ... in order, the same additions as the other branch
            // makes through memory, without a load and a store per term.
            for d0 in (0..hd).step_by(64) {
                let width = (hd - d0).min(64) / 8;
                for l in 0..lanes.min(probs.len()) {
                    let mut a = [_mm256_setzero_ps(); 8];
                    for p in (l..probs.len()).step_by(lanes) {
                        let vp = _mm256_set1_ps(f16::from_f32(probs[p]).to_f32());
                        let v = &cache[p * stride + offset + d0..p * stride + offset + hd];
                        for (j, a) in a[..width].iter_mut().enumerate() {
                            // SAFETY: 8j + 8 <= hd - d0, the length of `v`.
                            *a = _mm256_fmadd_ps(vp, unsafe { load8(v.as_ptr().add(8 * j)) }, *a);
                        }
                    }
                    for (j, a) in a[..width].iter().enumerate() {
                        // SAFETY: l < lanes and d0 + 8j + 8 <= hd: inside `acc`, (lanes, hd).
                        unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(l * hd + d0 + 8 * j), *a) };
                    }
                }
            }
        } else {
            for (p, &prob) in probs.iter().enumerate() {
                let prob = f16::from_f32(prob).to_f32();
                let vp = _mm256_set1_ps(prob);
                let v = &cache[p * stride + offset..p * stride + offset + hd];
                let lane = &mut acc[(p % lanes) * hd..(p % lanes + 1) * hd];
                let mut d = 0;
                while d < whole {
                    // SAFETY: d + 8 <= whole <= hd, the length of `v` and of `lane`.
                    unsafe {
                        let a = _mm256_loadu_ps(lane.as_ptr().add(d));
                        let a = _mm256_fmadd_ps(vp, load8(v.as_ptr().add(d)), a);
                        _mm256_storeu_ps(lane.as_mut_ptr().add(d), a);
                    }
                    d += 8;
                }
                for (a, &x) in lane[whole..].iter_mut().zip(&v[whole..]) {
                    *a += prob * x.to_f32();
                }
            }
        }
        reduce_lanes(order, acc, out);
    }

    /// `out[d] = order.reduce(column d of acc)`, acc being (order.lanes(), out.len()): the
    /// additions of `F16SumOrder::reduce` done lane-wise across 8 columns at a time, the
    /// columns past the last whole 8 by `reduce_columns`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn reduce_lanes(order: F16SumOrder, acc: &[f32], out: &mut [f32]) {
        let (hd, lanes) = (out.len(), order.lanes());
        assert!(
            acc.len() >= lanes * hd,
            "acc holds every lane of every column"
        );
        let whole = hd / 8 * 8;
        let row = |l: usize, d: usize| {
            // SAFETY: l < lanes and d + 8 <= whole <= hd: inside `acc`, (lanes, hd).
            unsafe { _mm256_loadu_ps(acc.as_ptr().add(l * hd + d)) }
        };
        let mut d = 0;
        while d < whole {
            let r = match order {
                F16SumOrder::TinyBlas => {
                    let t: [__m256; 4] =
                        std::array::from_fn(|i| _mm256_add_ps(row(i, d), row(i + 4, d)));
                    _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]))
                }
                F16SumOrder::VecDot => {
                    let s: [__m256; 8] = std::array::from_fn(|i| {
                        _mm256_add_ps(
                            _mm256_add_ps(row(i, d), row(16 + i, d)),
                            _mm256_add_ps(row(8 + i, d), row(24 + i, d)),
                        )
                    });
                    let t: [__m256; 4] = std::array::from_fn(|i| _mm256_add_ps(s[i], s[i + 4]));
                    _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]))
                }
            };
            // SAFETY: d + 8 <= hd, the length of `out`.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(d), r) };
            d += 8;
        }
        reduce_columns(order, acc, out, whole);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    /// Every path gives the scalar reference's bits, for both orders, head sizes with and
    /// without tails, a head at an offset inside wider rows, and fewer positions than lanes.
    #[test]
    fn simd_paths_equal_the_reference_bit_for_bit() {
        let mut r = rng(90);
        for order in [F16SumOrder::TinyBlas, F16SumOrder::VecDot] {
            for (hd, stride, offset, rows) in [
                (64, 192, 64, 37),
                (64, 64, 0, 3),
                (128, 1024, 896, 37),
                (40, 80, 40, 9),
                (7, 7, 0, 37),
            ] {
                let cache = random_f16(&mut r, rows * stride);
                let q: Vec<f32> = random_f16(&mut r, hd).iter().map(|h| h.to_f32()).collect();
                let probs = random_f32(&mut r, rows, 1.0);
                let mut want = vec![0.0; rows];
                dot_rows_scalar(&q, &cache, stride, offset, 0.125, order, &mut want);
                let mut got = vec![0.0; rows];
                dot_f16_rows(&q, &cache, stride, offset, 0.125, order, &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "dot {order:?} hd {hd}"
                );
                let mut acc = vec![0.0; 32 * hd];
                let mut want = vec![0.0; hd];
                weighted_sum_rows_scalar(
                    &probs,
                    &cache,
                    stride,
                    offset,
                    order,
                    &mut acc[..order.lanes() * hd],
                    &mut want,
                );
                let mut got = vec![0.0; hd];
                weighted_sum_f16_rows(&probs, &cache, stride, offset, order, &mut acc, &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "weighted sum {order:?} hd {hd}"
                );
            }
        }
    }

    #[test]
    fn the_dot_is_close_to_the_f64_dot() {
        let mut r = rng(91);
        let cache = random_f16(&mut r, 3 * 64);
        let q: Vec<f32> = random_f16(&mut r, 64).iter().map(|h| h.to_f32()).collect();
        let mut got = vec![0.0; 3];
        dot_f16_rows(&q, &cache, 64, 0, 1.0, F16SumOrder::VecDot, &mut got);
        for (p, g) in got.iter().enumerate() {
            let exact: f64 = q
                .iter()
                .zip(&cache[p * 64..(p + 1) * 64])
                .map(|(&a, b)| a as f64 * b.to_f64())
                .sum();
            assert!((*g as f64 - exact).abs() < 1e-4, "{g} vs {exact}");
        }
    }

    #[test]
    #[should_panic(expected = "run past a cache")]
    fn rows_past_the_cache_panic() {
        let cache = vec![f16::ZERO; 100];
        let mut s = vec![0.0; 2];
        dot_f16_rows(&[0.0; 64], &cache, 64, 0, 1.0, F16SumOrder::VecDot, &mut s);
    }
}
