//! How fast one token's LoRA side path streams its matrices on this CPU, stage by stage: the
//! A stage alone (B of one row) and the B stage alone (A of one short row), each over 24 MB of
//! F16, too large for the caches as a 3B model's 28 layers of side paths are, on one thread.
//! Then, as a sketch of a layout the kernels do not have yet, the same B stage over B stored
//! transposed in groups of eight rows (a column of a group one 16-byte load, no shuffles),
//! checked to give the same bits. docs/benchmarks-log.md, issue 21, "The B stages in the matmul's tasks".
//!
//!   cargo run --release -p kostant-kernels --example side_path_rates

use std::time::Instant;

use kostant_kernels::attention::F16SumOrder;
use kostant_kernels::{lora_add, GgmlType, Input, Weights};

/// F16 bytes of `len` small values.
fn halves(len: usize, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .flat_map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            half::f16::from_f32((s % 2001) as f32 / 1000.0 - 1.0).to_le_bytes()
        })
        .collect()
}

/// Seconds per call of `lora_add` for one token, best of five runs of `calls`.
fn per_call(a: &Weights, b: &Weights, calls: usize) -> f64 {
    let x = vec![0.5f32; a.cols];
    let mut out = vec![0f32; b.rows];
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..calls {
            lora_add(a, b, Input::Rows(&x), 1, F16SumOrder::VecDot, 1.0, &mut out).unwrap();
        }
        best = best.min(t.elapsed().as_secs_f64() / calls as f64);
    }
    best
}

fn main() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("the global pool");
    let rank = 16;
    let bytes = 24 << 20;
    // The A stage: `rank` rows as long as 24 MB allows; B one row.
    let a_cols = bytes / 2 / rank / 64 * 64;
    let (a_data, b_one) = (halves(rank * a_cols, 1), halves(rank, 2));
    let a = Weights::new(GgmlType::F16, &a_data, rank, a_cols).unwrap();
    let b = Weights::new(GgmlType::F16, &b_one, 1, rank).unwrap();
    let s = per_call(&a, &b, 20);
    println!(
        "A stage: {:.2} GB/s ({:.2} ms for 24 MB)",
        bytes as f64 / s / 1e9,
        s * 1e3
    );
    // The B stage: rows of `rank` values filling 24 MB; A one short row.
    let b_rows = bytes / 2 / rank / 8 * 8;
    let (a_short, b_data) = (halves(rank * 64, 3), halves(b_rows * rank, 4));
    let a = Weights::new(GgmlType::F16, &a_short, rank, 64).unwrap();
    let b = Weights::new(GgmlType::F16, &b_data, b_rows, rank).unwrap();
    let s = per_call(&a, &b, 20);
    println!(
        "B stage: {:.2} GB/s ({:.2} ms for 24 MB)",
        bytes as f64 / s / 1e9,
        s * 1e3
    );
    transposed_b(&a, &b, &b_data, bytes);
}

/// The B stage over B transposed in groups of eight rows, against `lora_add`'s bits and rate.
#[cfg(target_arch = "x86_64")]
fn transposed_b(a: &Weights, b: &Weights, b_data: &[u8], bytes: usize) {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
        println!("transposed B: needs AVX2 and F16C");
        return;
    }
    let (rows, rank) = (b.rows, b.cols);
    let halves: Vec<u16> = b_data
        .chunks_exact(2)
        .map(|h| u16::from_le_bytes([h[0], h[1]]))
        .collect();
    let mut t = vec![0u16; halves.len()];
    for g in 0..rows / 8 {
        for j in 0..rank {
            for i in 0..8 {
                t[g * 8 * rank + j * 8 + i] = halves[(g * 8 + i) * rank + j];
            }
        }
    }
    // x A^T as the B stage sees it: through an identity B, then rounded to f16 as the kernel
    // rounds it before B.
    let x = vec![0.5f32; a.cols];
    let eye: Vec<u8> = (0..rank * rank)
        .flat_map(|k| {
            let one = if k % (rank + 1) == 0 { 1.0 } else { 0.0 };
            half::f16::from_f32(one).to_le_bytes()
        })
        .collect();
    let eye = Weights::new(GgmlType::F16, &eye, rank, rank).unwrap();
    let mut xa = vec![0f32; rank];
    lora_add(
        a,
        &eye,
        Input::Rows(&x),
        1,
        F16SumOrder::VecDot,
        1.0,
        &mut xa,
    )
    .unwrap();
    for v in &mut xa {
        *v = half::f16::from_f32(*v).to_f32();
    }
    let mut want = vec![0f32; rows];
    lora_add(
        a,
        b,
        Input::Rows(&x),
        1,
        F16SumOrder::VecDot,
        1.0,
        &mut want,
    )
    .unwrap();
    let mut got = vec![0f32; rows];
    // SAFETY: AVX2 and F16C were detected above.
    unsafe { transposed_rows(&t, &xa, &mut got) };
    let same = got
        .iter()
        .zip(&want)
        .all(|(g, w)| g.to_bits() == w.to_bits());
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..20 {
            got.fill(0.0);
            // SAFETY: as above.
            unsafe { transposed_rows(&t, &xa, &mut got) };
        }
        best = best.min(start.elapsed().as_secs_f64() / 20.0);
    }
    println!(
        "B stage, B transposed: {:.2} GB/s ({:.2} ms for 24 MB), the same bits as lora_add: {same}",
        bytes as f64 / best / 1e9,
        best * 1e3
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn transposed_b(_: &Weights, _: &Weights, _: &[u8], _: usize) {
    println!("transposed B: x86 only");
}

/// `out[row] += Σ_j f64(f32(B[row][j] · x[j]))` in j order, eight rows at a time, `t` holding
/// each group of eight rows column after column.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn transposed_rows(t: &[u16], x: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let rank = x.len();
    for (g, o) in out.chunks_exact_mut(8).enumerate() {
        let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        for (j, &xj) in x.iter().enumerate() {
            // SAFETY: group g's column j is 8 halves inside t (rows / 8 groups of 8·rank).
            let h = unsafe { _mm_loadu_si128(t.as_ptr().add(g * 8 * rank + j * 8).cast()) };
            let p = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(xj));
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(p)));
        }
        let sums = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
        // SAFETY: `o` holds 8 floats.
        unsafe {
            let sum = _mm256_add_ps(_mm256_loadu_ps(o.as_ptr()), sums);
            _mm256_storeu_ps(o.as_mut_ptr(), sum);
        }
    }
}
