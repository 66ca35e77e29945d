//! Forcing the scalar kernels: its own test binary, since the switch is process-wide and would
//! race with other tests; its own hold `kernel_table`, for the same reason. SIMD matmul
//! must equal the scalar one within the reordering tolerance.

mod common;

use common::*;
#[cfg(target_arch = "x86_64")]
use kostant_kernels::test_needs;
use kostant_kernels::{
    cpu_features, cpu_has, kernel_table, matmul, required_cpu_features, GgmlType, KernelPath,
    Weights, FEATURE_NAMES,
};

/// Prints the dispatch table this run uses (`.ci/run` shows it) and fails when
/// `KOSTANT_REQUIRE_FEATURES` names a feature this CPU lacks, or a name it does not know.
#[test]
fn the_required_cpu_features_are_present() {
    let _table = kernel_table();
    let features = cpu_features();
    let present: Vec<&str> = FEATURE_NAMES
        .into_iter()
        .filter(|name| cpu_has(name) == Some(true))
        .collect();
    let required = required_cpu_features();
    eprintln!(
        "dispatch: kernels {} (best {}), cpu features {present:?}, required {required:?}",
        features.path, features.best
    );
    for name in &required {
        assert_eq!(
            cpu_has(name),
            Some(true),
            "KOSTANT_REQUIRE_FEATURES names {name:?}: not a feature of this CPU (known: {FEATURE_NAMES:?})"
        );
    }
}

#[test]
fn simd_matmul_matches_scalar_matmul() {
    let table = kernel_table();
    let features = cpu_features();
    assert_eq!(features.to_string(), features.path.name());
    assert!(!features.forced_scalar);
    #[cfg(target_arch = "x86_64")]
    if test_needs("avx2") {
        let want = if test_needs("avx512bf16") {
            KernelPath::Avx512Bf16
        } else if test_needs("avx512vnni") {
            KernelPath::Avx512Vnni
        } else {
            KernelPath::Avx2Fma
        };
        eprintln!("kernel path on this CPU: {want}");
        assert_eq!(features.path, want);
        assert!(features.to_string().starts_with("avx2+fma"));
    }

    let mut r = rng(200);
    for ty in GgmlType::ALL {
        let cols = match ty.block_len() {
            1 => 97,
            32 => 96,
            _ => 768,
        };
        for (rows, n_tokens) in [(1, 1), (33, 3), (577, 1), (129, 7)] {
            let m = random_matrix(&mut r, ty, rows, cols);
            let w = Weights::new(ty, &m.data, rows, cols).unwrap();
            let x = random_f32(&mut r, n_tokens * cols, 1.0);
            let mut simd = vec![0.0; n_tokens * rows];
            let mut scalar = vec![0.0; n_tokens * rows];
            table.set_scalar(false);
            matmul(&w, &x, n_tokens, &mut simd).unwrap();
            table.set_scalar(true);
            assert_eq!(cpu_features().path, KernelPath::Scalar);
            assert_eq!(cpu_features().to_string(), "scalar");
            matmul(&w, &x, n_tokens, &mut scalar).unwrap();
            table.set_scalar(false);
            // Both paths compute the same exact integers from bit-identical activation blocks
            // and differ only in the order of the f32 accumulation (8-lane accumulators, in
            // ggml's order, against the reference's sequential sums). Reordering n terms moves
            // a sum by at most 2·n·ε·Σ|terms|, with n the lanes or blocks added (at most
            // 2 per 32 elements, or 1 per element for F32/F16). A term's magnitude is bounded
            // by Σ(|w| + 2·max|w| of its block)·|x|: the codes times scales are w plus the
            // block's offset (Q4_1's minimum, Q4_K's minimums, Q6_K's -32), each within about
            // max|w|; a factor 2 covers activation quantization and scale rounding.
            let qk = ty.block_len();
            for t in 0..n_tokens {
                let xt = &x[t * cols..(t + 1) * cols];
                for row in 0..rows {
                    let (a, b) = (simd[t * rows + row], scalar[t * rows + row]);
                    let wr = &m.dequant[row * cols..(row + 1) * cols];
                    let mut mag = 0.0f32;
                    for (wb, xb) in wr.chunks(qk).zip(xt.chunks(qk)) {
                        let wmax = wb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                        mag += wb
                            .iter()
                            .zip(xb)
                            .map(|(w, x)| (w.abs() + 2.0 * wmax) * x.abs())
                            .sum::<f32>();
                    }
                    let n = if qk == 1 { cols } else { 2 * cols / 32 };
                    let tol = 2.0 * n as f32 * f32::EPSILON * 2.0 * mag + f32::MIN_POSITIVE;
                    assert!(
                        (a - b).abs() <= tol,
                        "{ty} row {row} token {t}: {a} vs {b}, tol {tol}"
                    );
                }
            }
        }
    }
}

/// A holder that panics with the scalar table on hands the next holder this CPU's best.
#[test]
fn a_holder_that_panics_hands_back_the_best_table() {
    let held = std::thread::spawn(|| {
        let table = kernel_table();
        table.set_scalar(true);
        assert!(cpu_features().forced_scalar);
        panic!("a test failing with the scalar table on");
    })
    .join();
    assert!(held.is_err(), "the holder panicked");
    let _table = kernel_table();
    assert!(!cpu_features().forced_scalar);
}
