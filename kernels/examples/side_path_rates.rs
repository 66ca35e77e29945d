//! How fast one token's LoRA side path streams its matrices on this CPU, stage by stage: the
//! A stage alone (B of one row) and the B stage alone (A of one short row), each over 24 MB of
//! F16, too large for the caches as a 3B model's 28 layers of side paths are, on one thread.
//! BENCHMARKS.md, issue 21, "The B stages in the matmul's tasks".
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
}
