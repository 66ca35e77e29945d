//! Helpers shared by the kernels integration tests: seeded data, synthetic weights and the
//! f64 reference matmul with its error budget.

#![allow(dead_code)] // Each test binary uses a different subset.

use kostant_kernels::{dequantize_row, quantize_row, GgmlType};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// Roughly Gaussian values with standard deviation `scale`.
pub fn random_f32(r: &mut SmallRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (0..4).map(|_| r.gen_range(-1.0f32..1.0)).sum::<f32>() * 0.866 * scale)
        .collect()
}

/// A (rows, cols) matrix quantized row by row with the crate's reference quantizer, with its
/// dequantized values (what the kernels actually multiply).
pub struct TestMatrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<u8>,
    pub dequant: Vec<f32>,
}

pub fn random_matrix(r: &mut SmallRng, ty: GgmlType, rows: usize, cols: usize) -> TestMatrix {
    let src = random_f32(r, rows * cols, 0.05);
    let mut data = Vec::new();
    for row in src.chunks_exact(cols.max(1)).take(rows) {
        data.extend(quantize_row(ty, row).expect("whole blocks"));
    }
    let mut dequant = vec![0.0f32; rows * cols];
    let rb = ty.row_bytes(cols).unwrap();
    for (d, q) in dequant
        .chunks_exact_mut(cols.max(1))
        .zip(data.chunks_exact(rb.max(1)))
    {
        dequantize_row(ty, q, d).unwrap();
    }
    TestMatrix {
        ty,
        rows,
        cols,
        data,
        dequant,
    }
}

/// Activations are quantized to blocks of this many elements for a weight type (1 = kept f32).
pub fn act_block(ty: GgmlType) -> usize {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
        GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q8_0
        | GgmlType::IQ4_NL => 32,
        GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::IQ4_XS => 256,
    }
}

/// Checks `out` (n_tokens, rows) against the f64 product of the dequantized weights with the
/// original activations. Budget per output: activation quantization moves each activation by
/// at most amax(its block)/254, so the dot moves by at most Σ|w|·amax/254 (1% slack); for the
/// 32-element formats the activation scale `d` and sum `s` are rounded to f16 as ggml stores
/// them (relative 2^-11), adding up to Σ|w|·amax·2^-11 and, through Q4_0/Q4_1's offsets (at most
/// 1.2·max|w| per block), 1.2·max|w|·|Σx|·2^-10 per block; BF16 rounds each activation to
/// bfloat16 first (relative 2^-8, as ggml does), adding up to Σ|w·x|·2^-8; f32 accumulation adds
/// at most 2·cols·ε·Σ|w·x|.
pub fn assert_matches_reference(m: &TestMatrix, x: &[f32], n_tokens: usize, out: &[f32]) {
    let qk = act_block(m.ty);
    for t in 0..n_tokens {
        let xt = &x[t * m.cols..(t + 1) * m.cols];
        for r in 0..m.rows {
            let wr = &m.dequant[r * m.cols..(r + 1) * m.cols];
            let exact: f64 = wr
                .iter()
                .zip(xt)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let abs: f64 = wr
                .iter()
                .zip(xt)
                .map(|(&a, &b)| f64::from((a * b).abs()))
                .sum();
            let mut budget = 2.0 * m.cols as f64 * f64::from(f32::EPSILON) * abs + 1e-7;
            if m.ty == GgmlType::BF16 {
                budget += abs * 2f64.powi(-8);
            }
            if qk > 1 {
                let f16_scales = qk == 32;
                for (wb, xb) in wr.chunks_exact(qk).zip(xt.chunks_exact(qk)) {
                    let amax = f64::from(xb.iter().fold(0.0f32, |a, v| a.max(v.abs())));
                    let wsum: f64 = wb.iter().map(|v| f64::from(v.abs())).sum();
                    budget += wsum * amax / 254.0 * 1.01;
                    if f16_scales {
                        let wmax = f64::from(wb.iter().fold(0.0f32, |a, v| a.max(v.abs())));
                        let xsum = f64::from(xb.iter().sum::<f32>().abs());
                        budget += wsum * amax * 2f64.powi(-11) + 1.2 * wmax * xsum * 2f64.powi(-10);
                    }
                }
            }
            let got = f64::from(out[t * m.rows + r]);
            assert!(
                (got - exact).abs() <= budget,
                "{} {}x{} token {t} row {r}: got {got}, exact {exact}, budget {budget}",
                m.ty,
                m.rows,
                m.cols
            );
        }
    }
}
