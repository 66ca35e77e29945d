//! `matmul` across formats, shapes, token counts and thread counts, against an f64 reference
//! of the dequantized weights; and every length error the public functions can return.

mod common;

use common::*;
use kostant_kernels::{dequantize_row, matmul, quantize_row, GgmlType, KernelError, Weights};
use rayon::prelude::*;

fn cols_for(ty: GgmlType) -> [usize; 2] {
    match ty.block_len() {
        1 => [5, 67],
        32 => [32, 96],
        _ => [256, 512],
    }
}

#[test]
fn every_format_matches_the_f64_reference() {
    let mut r = rng(100);
    for ty in GgmlType::ALL {
        for cols in cols_for(ty) {
            // 9 tokens: the K-quants' batch kernels (`TILED_MIN_TOKENS`).
            for (rows, n_tokens) in [(1, 1), (3, 2), (17, 5), (200, 1), (131, 3), (19, 9)] {
                let m = random_matrix(&mut r, ty, rows, cols);
                let w = Weights::new(ty, &m.data, rows, cols).unwrap();
                let x = random_f32(&mut r, n_tokens * cols, 1.0);
                let mut out = vec![f32::NAN; n_tokens * rows];
                matmul(&w, &x, n_tokens, &mut out).unwrap();
                assert_matches_reference(&m, &x, n_tokens, &out);
            }
        }
    }
}

/// The multi-token path tiles rows and tokens differently but calls the same per-(row, token)
/// dot on the same activation blocks, so it must agree bit for bit with one call per token.
#[test]
fn multi_token_equals_one_token_at_a_time() {
    let mut r = rng(101);
    for ty in GgmlType::ALL {
        let cols = cols_for(ty)[1];
        let rows = 301;
        let n_tokens = 7;
        let m = random_matrix(&mut r, ty, rows, cols);
        let w = Weights::new(ty, &m.data, rows, cols).unwrap();
        let x = random_f32(&mut r, n_tokens * cols, 1.0);
        let mut batched = vec![0.0; n_tokens * rows];
        matmul(&w, &x, n_tokens, &mut batched).unwrap();
        for t in 0..n_tokens {
            let mut single = vec![0.0; rows];
            matmul(&w, &x[t * cols..(t + 1) * cols], 1, &mut single).unwrap();
            assert_eq!(
                &batched[t * rows..(t + 1) * rows],
                &single[..],
                "{ty} token {t}"
            );
        }
    }
}

/// Splitting rows over threads changes which thread computes a row, never how.
#[test]
fn results_do_not_depend_on_thread_count() {
    let mut r = rng(102);
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let three = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for ty in GgmlType::ALL {
        let cols = cols_for(ty)[1];
        let (rows, n_tokens) = (1025, 3);
        let m = random_matrix(&mut r, ty, rows, cols);
        let w = Weights::new(ty, &m.data, rows, cols).unwrap();
        let x = random_f32(&mut r, n_tokens * cols, 1.0);
        for n in [1, n_tokens] {
            let mut a = vec![0.0; n * rows];
            let mut b = vec![0.0; n * rows];
            one.install(|| matmul(&w, &x[..n * cols], n, &mut a))
                .unwrap();
            three
                .install(|| matmul(&w, &x[..n * cols], n, &mut b))
                .unwrap();
            assert_eq!(a, b, "{ty} with {n} tokens");
        }
    }
}

/// Matmuls issued from inside parallel work (a rayon worker may run another matmul while it
/// waits) each get their own activation buffers.
#[test]
fn nested_parallel_matmuls_are_independent() {
    let mut r = rng(103);
    let (rows, cols) = (400, 256);
    let m = random_matrix(&mut r, GgmlType::Q4_1, rows, cols);
    let w = Weights::new(GgmlType::Q4_1, &m.data, rows, cols).unwrap();
    let xs: Vec<Vec<f32>> = (0..16).map(|_| random_f32(&mut r, cols, 1.0)).collect();
    let serial: Vec<Vec<f32>> = xs
        .iter()
        .map(|x| {
            let mut o = vec![0.0; rows];
            matmul(&w, x, 1, &mut o).unwrap();
            o
        })
        .collect();
    let parallel: Vec<Vec<f32>> = xs
        .par_iter()
        .map(|x| {
            let mut o = vec![0.0; rows];
            matmul(&w, x, 1, &mut o).unwrap();
            o
        })
        .collect();
    assert_eq!(serial, parallel);
}

#[test]
fn empty_shapes_are_fine() {
    let w = Weights::new(GgmlType::Q8_0, &[], 0, 64).unwrap();
    matmul(&w, &[0.0; 128], 2, &mut []).unwrap();
    let w = Weights::new(GgmlType::Q8_0, &[], 3, 0).unwrap();
    let mut out = [f32::NAN; 6];
    matmul(&w, &[], 2, &mut out).unwrap();
    assert_eq!(out, [0.0; 6]);
    let data = quantize_row(GgmlType::Q8_0, &[1.0; 32]).unwrap();
    let w = Weights::new(GgmlType::Q8_0, &data, 1, 32).unwrap();
    matmul(&w, &[], 0, &mut []).unwrap();
}

#[test]
fn bad_lengths_are_errors_not_panics() {
    let data = quantize_row(GgmlType::Q4_1, &[0.5; 64]).unwrap();
    let w = Weights::new(GgmlType::Q4_1, &data, 2, 32).unwrap();
    let mut out = [0.0; 2];
    assert!(matches!(
        matmul(&w, &[0.0; 31], 1, &mut out),
        Err(KernelError::Length { what: "x", .. })
    ));
    assert!(matches!(
        matmul(&w, &[0.0; 32], 1, &mut [0.0; 3]),
        Err(KernelError::Length { what: "out", .. })
    ));
    assert!(matches!(
        matmul(&w, &[0.0; 32], 2, &mut out),
        Err(KernelError::Length { what: "x", .. })
    ));
    assert!(matches!(
        matmul(&w, &[0.0; 32], usize::MAX, &mut out),
        Err(KernelError::Overflow { .. })
    ));
    // A hand-built Weights that lies about its shape.
    for (rows, cols) in [(3, 32), (2, 33), (1, 32), (usize::MAX, 32)] {
        let bad = Weights {
            ty: GgmlType::Q4_1,
            data: &data,
            rows,
            cols,
        };
        let x = vec![0.0; cols];
        assert!(matmul(&bad, &x, 1, &mut out).is_err(), "{rows}x{cols}");
    }
    let msg = matmul(&w, &[0.0; 31], 1, &mut out).unwrap_err().to_string();
    assert_eq!(msg, "x: expected 32 floats, got 31");

    // dequantize_row: partial blocks of bytes, wrong output length.
    let mut dst = [0.0; 64];
    assert!(matches!(
        dequantize_row(GgmlType::Q4_1, &data[..39], &mut dst),
        Err(KernelError::PartialBlockBytes { .. })
    ));
    assert!(matches!(
        dequantize_row(GgmlType::Q4_1, &data, &mut dst[..63]),
        Err(KernelError::Length { what: "dst", .. })
    ));
    assert!(matches!(
        dequantize_row(GgmlType::F32, &[0; 7], &mut dst[..1]),
        Err(KernelError::PartialBlockBytes { .. })
    ));
    assert_eq!(
        dequantize_row(GgmlType::Q4_K, &[0; 10], &mut [])
            .unwrap_err()
            .to_string(),
        "src: 10 bytes is not a whole number of Q4_K blocks of 144 bytes"
    );

    // quantize_row: partial blocks.
    for ty in GgmlType::ALL {
        if ty.block_len() > 1 {
            assert!(matches!(
                quantize_row(ty, &vec![0.0; ty.block_len() + 1]),
                Err(KernelError::PartialBlock { .. })
            ));
        }
    }
}

#[test]
fn quantize_dequantize_round_trip_every_format() {
    let mut r = rng(104);
    for ty in GgmlType::ALL {
        let n = 512;
        let x = random_f32(&mut r, n, 1.0);
        let q = quantize_row(ty, &x).unwrap();
        assert_eq!(q.len(), ty.row_bytes(n).unwrap());
        let mut y = vec![0.0; n];
        dequantize_row(ty, &q, &mut y).unwrap();
        let rms_x = (x.iter().map(|v| v * v).sum::<f32>() / n as f32).sqrt();
        let rms_e = (x.iter().zip(&y).map(|(a, b)| (a - b).powi(2)).sum::<f32>() / n as f32).sqrt();
        // Per-format relative RMS budgets (the unit tests bound each format more tightly).
        let budget = match ty {
            GgmlType::F32 => 0.0,
            GgmlType::F16 => 1e-3,
            GgmlType::BF16 => 4e-3,
            GgmlType::Q8_0 => 0.01,
            GgmlType::Q6_K => 0.03,
            GgmlType::IQ4_NL | GgmlType::IQ4_XS => 0.1,
            GgmlType::Q3_K => 0.25,
            GgmlType::Q2_K => 0.4,
            GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => 0.07,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => 0.13,
        };
        assert!(
            rms_e <= budget * rms_x,
            "{ty}: rms error {rms_e} vs rms {rms_x}"
        );
    }
}

#[test]
fn dot_and_axpy() {
    let mut r = rng(105);
    for n in [0, 1, 9, 100, 577] {
        let a = random_f32(&mut r, n, 1.0);
        let b = random_f32(&mut r, n, 1.0);
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum();
        let abs: f64 = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| f64::from((x * y).abs()))
            .sum();
        let got = f64::from(kostant_kernels::dot_f32(&a, &b));
        assert!((got - exact).abs() <= 2.0 * n as f64 * f64::from(f32::EPSILON) * abs + 1e-12);

        let mut y = b.clone();
        kostant_kernels::axpy_f32(-0.5, &a, &mut y);
        for ((y, a), b) in y.iter().zip(&a).zip(&b) {
            assert!((y - (b - 0.5 * a)).abs() <= 2.0 * f32::EPSILON * (b.abs() + a.abs()));
        }
    }
}

#[test]
#[should_panic(expected = "length mismatch")]
fn dot_f32_rejects_mismatched_lengths_loudly() {
    kostant_kernels::dot_f32(&[1.0; 3], &[1.0; 4]);
}

#[test]
fn in_pool_runs_on_a_worker_and_returns_the_result() {
    let mut r = rng(106);
    let (rows, cols) = (300, 256);
    let m = random_matrix(&mut r, GgmlType::Q8_0, rows, cols);
    let w = Weights::new(GgmlType::Q8_0, &m.data, rows, cols).unwrap();
    let x = random_f32(&mut r, cols, 1.0);
    let mut outside = vec![0.0; rows];
    matmul(&w, &x, 1, &mut outside).unwrap();
    let (inside, on_worker) = kostant_kernels::in_pool(|| {
        let mut o = vec![0.0; rows];
        matmul(&w, &x, 1, &mut o).unwrap();
        (o, rayon::current_thread_index().is_some())
    });
    assert!(on_worker);
    assert_eq!(inside, outside);
    // Nested use runs in place.
    assert_eq!(
        kostant_kernels::in_pool(|| kostant_kernels::in_pool(|| 7)),
        7
    );
}

/// Weights are file bytes and activations come from a model: arbitrary bit patterns (NaN and
/// infinite f16 scales, NaN or huge activations) must give values, never a panic.
#[test]
fn arbitrary_bytes_and_non_finite_activations_do_not_panic() {
    use rand::Rng;
    let mut r = rng(107);
    for ty in GgmlType::ALL {
        let cols = cols_for(ty)[1];
        let rows = 37;
        let data: Vec<u8> = (0..rows * ty.row_bytes(cols).unwrap())
            .map(|_| r.gen())
            .collect();
        let w = Weights::new(ty, &data, rows, cols).unwrap();
        let mut x = random_f32(&mut r, 3 * cols, 1.0);
        x[1] = f32::NAN;
        x[cols + 2] = f32::INFINITY;
        x[2 * cols + 3] = 1e38;
        let mut out = vec![0.0; 3 * rows];
        matmul(&w, &x, 3, &mut out).unwrap();
        let mut deq = vec![0.0; rows * cols];
        dequantize_row(ty, &data, &mut deq).unwrap();
        let q = quantize_row(ty, &x).unwrap();
        assert_eq!(q.len(), ty.row_bytes(x.len()).unwrap());
    }
}

/// Decode splits rows over tasks, but every row keeps its own dot's arithmetic, so a matrix's
/// rows equal the same rows multiplied one at a time, bit for bit, whatever the row count.
#[test]
fn row_groups_equal_one_row_at_a_time() {
    let mut r = rng(102);
    for ty in GgmlType::ALL {
        for cols in cols_for(ty) {
            for rows in [1, 2, 3, 4, 5, 7, 8, 9, 33] {
                let m = random_matrix(&mut r, ty, rows, cols);
                let w = Weights::new(ty, &m.data, rows, cols).unwrap();
                let x = random_f32(&mut r, cols, 1.0);
                let mut all = vec![f32::NAN; rows];
                matmul(&w, &x, 1, &mut all).unwrap();
                let row_bytes = m.data.len() / rows;
                for (i, &got) in all.iter().enumerate() {
                    let one = &m.data[i * row_bytes..(i + 1) * row_bytes];
                    let w1 = Weights::new(ty, one, 1, cols).unwrap();
                    let mut want = [f32::NAN];
                    matmul(&w1, &x, 1, &mut want).unwrap();
                    assert_eq!(
                        got.to_bits(),
                        want[0].to_bits(),
                        "{ty:?} {rows}x{cols} row {i}"
                    );
                }
            }
        }
    }
}
