//! Shared helpers for the in-crate unit tests: seeded data and the named tolerances.

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng};

use crate::formats::q8_1::{self, BlockQ8_1};
use crate::formats::q8_k::{self, BlockQ8K};

pub(crate) type Rng = SmallRng;

pub(crate) fn rng(seed: u64) -> Rng {
    SmallRng::seed_from_u64(seed)
}

/// Roughly Gaussian values with standard deviation `scale` (sum of four uniforms), plus an
/// occasional 4σ outlier, like real weights and activations.
pub(crate) fn random_f32(r: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let g: f32 = (0..4).map(|_| r.gen_range(-1.0f32..1.0)).sum::<f32>() * 0.866;
            if r.gen_range(0..64) == 0 {
                4.0 * scale * g.signum()
            } else {
                scale * g
            }
        })
        .collect()
}

/// [`random_f32`] values (scale 2) rounded to f16: cached keys and values.
pub(crate) fn random_f16(r: &mut Rng, n: usize) -> Vec<half::f16> {
    random_f32(r, n, 2.0)
        .into_iter()
        .map(half::f16::from_f32)
        .collect()
}

pub(crate) fn random_bytes<const N: usize>(r: &mut Rng) -> [u8; N] {
    std::array::from_fn(|_| r.gen())
}

pub(crate) fn random_q8_1(r: &mut Rng, nb: usize) -> Vec<BlockQ8_1> {
    let mut a = vec![BlockQ8_1::default(); nb];
    q8_1::quantize_scalar(&random_f32(r, 32 * nb, 1.0), &mut a);
    a
}

pub(crate) fn random_q8_k(r: &mut Rng, nb: usize) -> Vec<BlockQ8K> {
    let mut a = vec![BlockQ8K::default(); nb];
    q8_k::quantize_scalar(&random_f32(r, 256 * nb, 1.0), &mut a);
    a
}

/// Q8_K blocks at the ends of the code range, as far as a kernel's integers can be pushed:
/// each block all +127, all -127, or ±127 at random.
pub(crate) fn extreme_q8_k(r: &mut Rng, nb: usize) -> Vec<BlockQ8K> {
    (0..nb)
        .map(|i| {
            let qs: [[i8; 32]; 8] = std::array::from_fn(|_| {
                std::array::from_fn(|_| match i % 3 {
                    0 => 127,
                    1 => -127,
                    _ => 127 * if r.gen::<bool>() { 1 } else { -1 },
                })
            });
            BlockQ8K {
                d: random_f32(r, 1, 0.01)[0],
                bsums: q8_k::block_sums(&qs),
                qs,
            }
        })
        .collect()
}

/// `Σ q·a` over a legacy 4-bit block's unsigned codes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn sumi_u4(qs: &[u8; 16], a: &[i8; 32]) -> i32 {
    (0..16)
        .map(|j| {
            i32::from(qs[j] & 0xF) * i32::from(a[j]) + i32::from(qs[j] >> 4) * i32::from(a[j + 16])
        })
        .sum()
}

/// Tolerance for two f32 sums of the same `n_terms` terms added in different orders (the
/// SIMD paths accumulate in 8 lanes, the references sequentially). Each ordering is within
/// `(n-1)·ε·Σ|terms|` of the exact sum, so they differ by at most twice that.
pub(crate) fn assert_reordered_sum_close(simd: f32, scalar: f32, abs_terms: f32, n_terms: usize) {
    let tol = 2.0 * (n_terms.max(1) as f32) * f32::EPSILON * abs_terms + f32::MIN_POSITIVE;
    assert!(
        (simd - scalar).abs() <= tol,
        "simd {simd} vs scalar {scalar}: differ by {} > {tol}",
        (simd - scalar).abs()
    );
}

pub(crate) fn rms(x: &[f32]) -> f32 {
    (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt()
}

pub(crate) fn rms_diff(x: &[f32], y: &[f32]) -> f32 {
    (x.iter().zip(y).map(|(a, b)| (a - b).powi(2)).sum::<f32>() / x.len() as f32).sqrt()
}

/// The quantized dot's error budget against the f32 dot of the dequantized weights with the
/// original activations. Quantizing an activation moves it by at most half a step,
/// `amax_block / 254`, plus, where the block scale is stored as f16 (`f16_scales`), up to
/// 127 codes times its relative rounding 2^-11; so the dot moves by at most
/// `Σ |w_j| · amax(block of j) · (1/254 + f16 part)`. An f16-rounded `s = d·Σq` (relative 2^-11,
/// applied to an offset of at most `1.2·max|w|` per block) adds `Σ_blocks 1.2·max|w|·|Σx|·2^-10`.
/// 1% is added for float rounding in both sums.
fn check_dot_budget<W, A: Clone + Default>(
    seed: u64,
    qk: usize,
    f16_scales: bool,
    quantize_w: impl Fn(&[f32], usize) -> Vec<W>,
    dequantize_w: fn(&[W], &mut [f32]),
    quantize_a: fn(&[f32], &mut [A]),
    dot: fn(&[W], &[A]) -> f32,
) {
    let mut r = rng(seed);
    for nb in [1, 2, 5, 18] {
        let n = qk * nb;
        let w = quantize_w(&random_f32(&mut r, n, 0.05), nb);
        let mut wd = vec![0.0f32; n];
        dequantize_w(&w, &mut wd);
        let x = random_f32(&mut r, n, 1.0);
        let mut a = vec![A::default(); nb];
        quantize_a(&x, &mut a);
        let got = f64::from(dot(&w, &a));
        let exact: f64 = wd
            .iter()
            .zip(&x)
            .map(|(&w, &x)| f64::from(w) * f64::from(x))
            .sum();
        let step = if f16_scales {
            1.0 / 254.0 + 2f64.powi(-11)
        } else {
            1.0 / 254.0
        };
        let mut budget = 0.0f64;
        for (wb, xb) in wd.chunks_exact(qk).zip(x.chunks_exact(qk)) {
            let amax = f64::from(xb.iter().fold(0.0f32, |m, v| m.max(v.abs())));
            budget += wb.iter().map(|v| f64::from(v.abs())).sum::<f64>() * amax * step;
            if f16_scales {
                let wmax = wb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let xsum: f32 = xb.iter().sum();
                budget += 1.2 * f64::from(wmax) * f64::from(xsum.abs()) * 2f64.powi(-10);
            }
        }
        let budget = budget * 1.01 + 1e-6;
        assert!(
            (got - exact).abs() <= budget,
            "{nb} blocks: quantized dot {got} vs exact {exact}, budget {budget}"
        );
    }
}

/// [`check_dot_budget`] for a 32-element format against Q8_1-style activations.
pub(crate) fn check_dot_budget_32<W>(
    seed: u64,
    quantize_w: impl Fn(&[f32], usize) -> Vec<W>,
    dequantize_w: fn(&[W], &mut [f32]),
    dot: fn(&[W], &[BlockQ8_1]) -> f32,
) {
    check_dot_budget(
        seed,
        32,
        true,
        quantize_w,
        dequantize_w,
        q8_1::quantize_scalar,
        dot,
    );
}

/// [`check_dot_budget`] for a K-quant against Q8_K activations.
pub(crate) fn check_dot_budget_k<W>(
    seed: u64,
    quantize_w: impl Fn(&[f32], usize) -> Vec<W>,
    dequantize_w: fn(&[W], &mut [f32]),
    dot: fn(&[W], &[BlockQ8K]) -> f32,
) {
    check_dot_budget(
        seed,
        256,
        false,
        quantize_w,
        dequantize_w,
        q8_k::quantize_scalar,
        dot,
    );
}

/// ggml's AVX2 accumulation, in scalar code, to check the AVX2 kernels bit for bit: each
/// block's 8 exact i32 lanes fused-multiply-added with the block's scale into 8 f32
/// accumulators in block order, then the 8 lanes added as `hsum_ps` adds them.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_lanes_order(blocks: impl IntoIterator<Item = (f32, [i32; 8])>) -> f32 {
    let mut acc = [0.0f32; 8];
    for (d, lanes) in blocks {
        for (a, &lane) in acc.iter_mut().zip(&lanes) {
            *a = d.mul_add(lane as f32, *a);
        }
    }
    let s: [f32; 4] = std::array::from_fn(|i| acc[i] + acc[i + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// The 8 lanes of a 32-element block's products (`prods[j]` for element `j`): lane `k` sums
/// elements `4k..4k+4`, as `maddubs` then `madd` group them.
#[cfg(target_arch = "x86_64")]
fn lanes_of(prods: [i32; 32]) -> [i32; 8] {
    std::array::from_fn(|k| prods[4 * k..4 * k + 4].iter().sum())
}

/// [`avx2_lanes_order`] for the 32-element formats, from each block's 32 exact products.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_lane_order(blocks: impl IntoIterator<Item = (f32, [i32; 32])>) -> f32 {
    avx2_lanes_order(blocks.into_iter().map(|(d, p)| (d, lanes_of(p))))
}

/// `Σ |d · lane|` over the blocks of [`avx2_lanes_order`]: the magnitude that bounds how far
/// its 8-lane sum can drift from a sequential one (lanes can cancel inside a block).
#[cfg(target_arch = "x86_64")]
pub(crate) fn lanes_terms(blocks: impl IntoIterator<Item = (f32, [i32; 8])>) -> f32 {
    blocks
        .into_iter()
        .map(|(d, lanes)| lanes.iter().map(|&l| (d * l as f32).abs()).sum::<f32>())
        .sum()
}

/// [`lanes_terms`] from each block's 32 exact products.
#[cfg(target_arch = "x86_64")]
pub(crate) fn lane_terms(blocks: impl IntoIterator<Item = (f32, [i32; 32])>) -> f32 {
    lanes_terms(blocks.into_iter().map(|(d, p)| (d, lanes_of(p))))
}

/// What [`check_tiled_order`] needs of a K-quant format with a tiled batch kernel.
pub(crate) struct TiledOrder<B: 'static> {
    pub seed: u64,
    pub random: fn(&mut Rng, usize) -> Vec<B>,
    /// Rewrites a block to the largest integers the format makes.
    pub extreme: fn(&mut B),
    /// Σ of the magnitudes of one block's scaled terms against one activation block.
    pub terms: fn(&B, &BlockQ8K) -> f32,
    /// Additions the reordering bound allows for `nb` blocks.
    pub steps: fn(usize) -> usize,
    /// The format's scalar row dot.
    pub dot: fn(&[B], &[BlockQ8K]) -> f32,
    /// The scalar model of the tiled order, for several tokens.
    pub tiled: fn(&[B], &[BlockQ8K], &mut [f32]),
    #[cfg(target_arch = "x86_64")]
    pub avx2: BatchKernel<B>,
    /// The AVX-512 VNNI flavour, where the format has one.
    #[cfg(target_arch = "x86_64")]
    pub vnni: Option<BatchKernel<B>>,
    /// The kernel with tokens in the lanes (`formats::k_lanes`), where the format has one.
    #[cfg(target_arch = "x86_64")]
    pub lanes: Option<BatchKernel<B>>,
}

/// A 512-bit decode kernel (`rows`) against the AVX2 row dot (`dot`, llama.cpp's order), bit
/// for bit on every row: three rows of random blocks (from `random`), the last rewritten by
/// `extreme` to the largest integers the format makes, against random and extreme
/// activations, at lengths up to and past the 64 super-blocks the prepared path takes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn check_rows_equal_the_avx2_dot<B>(
    seed: u64,
    random: fn(&mut Rng, usize) -> Vec<B>,
    extreme: fn(&mut B),
    rows: unsafe fn(&[B], &[BlockQ8K], &mut [f32]),
    dot: unsafe fn(&[B], &[BlockQ8K]) -> f32,
) {
    if !crate::required::test_needs("avx512vnni") {
        return;
    }
    let mut r = rng(seed);
    for nb in [1, 2, 6, 64, 65] {
        let n_rows = 3;
        let mut w = random(&mut r, n_rows * nb);
        w[(n_rows - 1) * nb..].iter_mut().for_each(extreme);
        for a in [random_q8_k(&mut r, nb), extreme_q8_k(&mut r, nb)] {
            let mut got = vec![0.0; n_rows];
            // SAFETY: AVX-512 VNNI (with F, VL and BW, so AVX2, FMA and F16C too) was just
            // detected.
            unsafe { rows(&w, &a, &mut got) };
            for (row, &g) in w.chunks_exact(nb).zip(&got) {
                // SAFETY: as above.
                let want = unsafe { dot(row, &a) };
                assert_eq!(g.to_bits(), want.to_bits(), "{nb} blocks");
            }
        }
    }
}

/// A SIMD batch kernel: one row against several tokens.
#[cfg(target_arch = "x86_64")]
pub(crate) type BatchKernel<B> = unsafe fn(&[B], &[BlockQ8K], &mut [f32]);

/// The tiled matmul's order of a format: with random and extreme weights against random and
/// extreme activations, the scalar model is the row dot within the reordering bound, and the
/// AVX2 kernel equals the model bit for bit.
pub(crate) fn check_tiled_order<B: Clone>(c: TiledOrder<B>) {
    let mut r = rng(c.seed);
    for (nb, t) in [(1, 1), (3, 2), (6, 9), (7, 16), (2, 37)] {
        let random = (c.random)(&mut r, nb);
        let mut extreme = random.clone();
        extreme.iter_mut().for_each(c.extreme);
        for w in [random, extreme] {
            for a in [random_q8_k(&mut r, nb * t), extreme_q8_k(&mut r, nb * t)] {
                let mut want = vec![0.0; t];
                (c.tiled)(&w, &a, &mut want);
                for (tok, &v) in want.iter().enumerate() {
                    let a = &a[tok * nb..(tok + 1) * nb];
                    let terms = w.iter().zip(a).map(|(wb, ab)| (c.terms)(wb, ab)).sum();
                    assert_reordered_sum_close(v, (c.dot)(&w, a), terms, (c.steps)(nb));
                }
                #[cfg(target_arch = "x86_64")]
                if crate::required::test_needs("avx2") {
                    let mut got = vec![0.0; t];
                    // SAFETY: AVX2, FMA and F16C were just detected.
                    unsafe { (c.avx2)(&w, &a, &mut got) };
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "nb {nb}, {t} tokens");
                    if let Some(vnni) = c.vnni.filter(|_| crate::required::test_needs("avx512vnni"))
                    {
                        // SAFETY: AVX-512 VNNI (with F and VL) was just detected.
                        unsafe { vnni(&w, &a, &mut got) };
                        assert_eq!(bits(&got), bits(&want), "vnni, nb {nb}, {t} tokens");
                    }
                    if let Some(lanes) = c
                        .lanes
                        .filter(|_| crate::required::test_needs("avx512vnni"))
                    {
                        // SAFETY: AVX-512 VNNI (with F, VL and BW) was just detected.
                        unsafe { lanes(&w, &a, &mut got) };
                        assert_eq!(bits(&got), bits(&want), "lanes, nb {nb}, {t} tokens");
                    }
                }
            }
        }
    }
}
