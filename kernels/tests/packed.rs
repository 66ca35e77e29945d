//! Q4_0, Q4_1, Q5_0, IQ4_NL and Q8_0 weights repacked 8 rows to a block (`PackedWeights`): the same products
//! as the GGUF layout, at every shape, token count and thread count the engine uses. One test
//! switches the process-wide kernel table, so each holds `kernel_table`.

mod common;

use common::*;
use kostant_kernels::{kernel_table, matmul, test_needs, GgmlType, PackedWeights, Weights};

#[test]
fn packed_matches_the_f64_reference() {
    let _table = kernel_table();
    let mut r = rng(300);
    for (ty, cols) in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::IQ4_NL,
        GgmlType::Q8_0,
    ]
    .into_iter()
    .flat_map(|ty| [32, 96, 576].map(|c| (ty, c)))
    {
        for (rows, n_tokens) in [(8, 1), (16, 2), (64, 5), (192, 1), (576, 9)] {
            let m = random_matrix(&mut r, ty, rows, cols);
            let w = Weights::new(ty, &m.data, rows, cols).unwrap();
            let p = PackedWeights::pack_any_cpu(&w)
                .unwrap()
                .expect("rows a multiple of 8");
            assert_eq!((p.rows(), p.cols(), p.bytes()), (rows, cols, m.data.len()));
            let x = random_f32(&mut r, n_tokens * cols, 1.0);
            let mut out = vec![f32::NAN; n_tokens * rows];
            p.matmul(&x, n_tokens, &mut out).unwrap();
            assert_matches_reference(&m, &x, n_tokens, &out);
        }
    }
}

/// The packed kernels keep a GGUF kernel's arithmetic bit for bit, whatever the token or
/// thread count: Q4_0 the scalar reference's (exact block integers, `d·d_a·sumi` added in block
/// order), Q4_1, Q5_0 and Q8_0 the AVX2 row dot's (ggml's lanes, which equal llama.cpp's).
/// Elsewhere than AVX2 only Q4_0 is checked here; the reference test above covers the others.
/// (IQ4_NL follows llama.cpp's repacked kernels instead: `packed_iq4_nl_is_its_own_order`.)
#[test]
fn packed_equals_the_gguf_matmul_bit_for_bit() {
    let table = kernel_table();
    let mut r = rng(301);
    let pools: Vec<_> = [1, 3]
        .iter()
        .map(|&n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .unwrap()
        })
        .collect();
    // The last: Gemma 3 270M's 640-wide rows (20 blocks) against a prompt of 33 tokens, every
    // token tile and a partial one.
    let shapes = [
        (8, 32, 1),
        (40, 64, 3),
        (1536, 576, 1),
        (576, 1536, 7),
        (1024, 640, 33),
    ];
    // Q4_1, Q5_0 and Q8_0 are repacked for the AVX2 kernels only.
    let avx2 = cfg!(target_arch = "x86_64") && test_needs("avx2");
    for (ty, (rows, cols, n_tokens)) in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
    ]
    .into_iter()
    .flat_map(|ty| shapes.map(|s| (ty, s)))
    {
        let m = random_matrix(&mut r, ty, rows, cols);
        let w = Weights::new(ty, &m.data, rows, cols).unwrap();
        let p = PackedWeights::pack_any_cpu(&w).unwrap().unwrap();
        let x = random_f32(&mut r, n_tokens * cols, 1.0);
        if ty != GgmlType::Q4_0 && !avx2 {
            continue;
        }
        let mut want = vec![0.0; n_tokens * rows];
        table.set_scalar(ty == GgmlType::Q4_0);
        matmul(&w, &x, n_tokens, &mut want).unwrap();
        table.set_scalar(false);
        for pool in &pools {
            let mut got = vec![0.0; n_tokens * rows];
            pool.install(|| p.matmul(&x, n_tokens, &mut got)).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "{ty:?} {rows}x{cols}, {n_tokens} tokens"
            );
        }
    }
}

/// Repacked IQ4_NL sums as llama.cpp's repacked kernels do (per block the exact integer, then
/// one fused multiply-add): the same bits at every token and thread count, so a prompt's
/// rows equal a decoded token's; and the GGUF layout's value to rounding.
#[test]
fn packed_iq4_nl_is_its_own_order() {
    let _table = kernel_table();
    let mut r = rng(304);
    let (rows, cols) = (1024, 640);
    let m = random_matrix(&mut r, GgmlType::IQ4_NL, rows, cols);
    let w = Weights::new(GgmlType::IQ4_NL, &m.data, rows, cols).unwrap();
    let p = PackedWeights::pack_any_cpu(&w).unwrap().unwrap();
    let n_tokens = 33;
    let x = random_f32(&mut r, n_tokens * cols, 1.0);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut batch = vec![0.0; n_tokens * rows];
    p.matmul(&x, n_tokens, &mut batch).unwrap();
    for pool_threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(pool_threads)
            .build()
            .unwrap();
        for t in [0, 5, 32] {
            let mut one = vec![0.0; rows];
            pool.install(|| p.matmul(&x[t * cols..(t + 1) * cols], 1, &mut one))
                .unwrap();
            assert_eq!(
                bits(&one),
                bits(&batch[t * rows..(t + 1) * rows]),
                "token {t}"
            );
        }
    }
    assert_matches_reference(&m, &x, n_tokens, &batch);
}

#[test]
fn only_packable_formats_with_whole_row_groups_are_packed() {
    let _table = kernel_table();
    let mut r = rng(302);
    for (ty, rows) in [
        (GgmlType::Q8_0, 12),
        (GgmlType::Q4_K, 12),
        (GgmlType::Q6_K, 8),
        (GgmlType::Q4_0, 12),
        (GgmlType::Q4_1, 20),
        (GgmlType::Q5_0, 4),
        (GgmlType::Q5_1, 8),
    ] {
        let cols = ty.block_len() * 2;
        let m = random_matrix(&mut r, ty, rows, cols);
        let w = Weights::new(ty, &m.data, rows, cols).unwrap();
        assert!(
            PackedWeights::pack_any_cpu(&w).unwrap().is_none(),
            "{ty:?} x{rows}"
        );
        assert!(PackedWeights::pack(&w).unwrap().is_none(), "{ty:?} x{rows}");
    }
}

#[test]
fn packed_shapes_are_checked() {
    let _table = kernel_table();
    let mut r = rng(303);
    let m = random_matrix(&mut r, GgmlType::Q4_0, 16, 64);
    let w = Weights::new(GgmlType::Q4_0, &m.data, 16, 64).unwrap();
    let p = PackedWeights::pack_any_cpu(&w).unwrap().unwrap();
    let mut out = vec![0.0; 16];
    assert!(p.matmul(&[0.0; 63], 1, &mut out).is_err());
    assert!(p.matmul(&[0.0; 64], 1, &mut out[..15]).is_err());
    assert!(p.matmul(&[0.0; 128], 2, &mut out).is_err());
    p.matmul(&[], 0, &mut []).unwrap();
}
