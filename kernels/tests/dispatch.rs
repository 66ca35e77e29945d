//! Forcing the scalar kernels: its own test binary, since the switch is process-wide and would
//! race with other tests. SIMD matmul must equal the scalar one within the reordering tolerance.

mod common;

use common::*;
use kostant_kernels::{cpu_features, matmul, set_force_scalar, GgmlType, KernelPath, Weights};

#[test]
fn simd_matmul_matches_scalar_matmul() {
    set_force_scalar(false);
    let features = cpu_features();
    assert_eq!(features.to_string(), features.path.name());
    assert!(!features.forced_scalar);
    #[cfg(target_arch = "x86_64")]
    if features.avx2 && features.fma && features.f16c {
        assert_eq!(features.path, KernelPath::Avx2Fma);
        assert_eq!(features.to_string(), "avx2+fma");
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
            set_force_scalar(false);
            matmul(&w, &x, n_tokens, &mut simd).unwrap();
            set_force_scalar(true);
            assert_eq!(cpu_features().path, KernelPath::Scalar);
            assert_eq!(cpu_features().to_string(), "scalar");
            matmul(&w, &x, n_tokens, &mut scalar).unwrap();
            set_force_scalar(false);
            // Both paths compute the same integer block sums from bit-identical activation
            // blocks; only the order of the f32 accumulation differs. K-quants combine exact
            // integers per super-block in the same order, so they match bit for bit. The rest
            // add n terms (2 per block for the 32-element formats, 1 per element for F32/F16)
            // in different orders, which moves a sum by at most 2·n·ε·Σ|terms|. Σ|terms| is
            // bounded by Σ|w·x| plus, for Q4_0/Q4_1's separate offset terms, about
            // Σ|w|·amax_x; 2·Σ|w·x| + Σ|w| covers both here (|x| stays below 4).
            for t in 0..n_tokens {
                let xt = &x[t * cols..(t + 1) * cols];
                for row in 0..rows {
                    let (a, b) = (simd[t * rows + row], scalar[t * rows + row]);
                    if matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K) {
                        assert_eq!(a.to_bits(), b.to_bits(), "{ty} row {row} token {t}");
                        continue;
                    }
                    let wr = &m.dequant[row * cols..(row + 1) * cols];
                    let mag = 2.0 * wr.iter().zip(xt).map(|(w, x)| (w * x).abs()).sum::<f32>()
                        + 4.0 * wr.iter().map(|w| w.abs()).sum::<f32>();
                    let n = if ty.block_len() == 1 {
                        cols
                    } else {
                        2 * cols / 32
                    };
                    let tol = 2.0 * n as f32 * f32::EPSILON * mag + f32::MIN_POSITIVE;
                    assert!(
                        (a - b).abs() <= tol,
                        "{ty} row {row} token {t}: {a} vs {b}, tol {tol}"
                    );
                }
            }
        }
    }
}
