//! Matmul throughput per format at the default model's shapes, for 1 token (decode) and 64
//! tokens (prefill), on the SIMD and the forced-scalar kernels, with 1 and 2 threads.
//! Throughput is reported as weight bytes streamed per second (per call, whatever the tokens).
//!
//! `cargo bench -p kostant-kernels -- q4_1` runs a subset (criterion's name filter).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kostant_kernels::{
    matmul, quantize_row, set_force_scalar, GgmlType, KernelPath, PackedWeights, Weights,
};
use std::hint::black_box;
use std::time::Duration;

/// (type, rows, cols): the default model's weight shapes and the output projection.
const SHAPES: &[(GgmlType, usize, usize)] = &[
    (GgmlType::Q4_1, 576, 576),
    (GgmlType::Q4_1, 192, 576),
    (GgmlType::Q4_1, 1536, 576),
    (GgmlType::Q4_1, 576, 1536),
    (GgmlType::Q8_0, 49152, 576),
    (GgmlType::Q4_0, 576, 1536),
    (GgmlType::Q8_0, 576, 1536),
    (GgmlType::Q4_K, 576, 1536),
    (GgmlType::Q6_K, 576, 1536),
    (GgmlType::F16, 576, 1536),
    (GgmlType::F32, 576, 1536),
];

/// Deterministic pseudo-random values in [-1, 1) (an LCG: the bench needs data, not statistics).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A `rows` x `cols` matrix of `ty` quantized from [`data`].
fn matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    data(rows * cols, seed)
        .chunks_exact(cols)
        .flat_map(|row| quantize_row(ty, row).unwrap())
        .collect()
}

fn bench(c: &mut Criterion) {
    let pools: Vec<(usize, rayon::ThreadPool)> = [1, 2]
        .into_iter()
        .map(|n| {
            (
                n,
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let best = kostant_kernels::cpu_features().best;
    let both = [best, KernelPath::Scalar];
    let paths = if best == KernelPath::Scalar {
        &both[..1]
    } else {
        &both[..]
    };
    for &(ty, rows, cols) in SHAPES {
        let bytes = matrix(ty, rows, cols, 1);
        let w = Weights::new(ty, &bytes, rows, cols).unwrap();
        let mut group = c.benchmark_group(format!("{}_{rows}x{cols}", ty.name().to_lowercase()));
        group
            .throughput(Throughput::Bytes(bytes.len() as u64))
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        // Prefill only on one representative shape: scalar prefill is slow to measure.
        let token_counts: &[usize] = if (ty, rows, cols) == (GgmlType::Q4_1, 576, 1536) {
            &[1, 64]
        } else {
            &[1]
        };
        for &n_tokens in token_counts {
            let x = data(n_tokens * cols, 2);
            let mut out = vec![0.0f32; n_tokens * rows];
            for &path in paths {
                for (threads, pool) in &pools {
                    set_force_scalar(path == KernelPath::Scalar);
                    let id = BenchmarkId::new(format!("{path}/t{threads}"), format!("n{n_tokens}"));
                    group.bench_function(id, |b| {
                        pool.install(|| {
                            b.iter(|| matmul(&w, black_box(&x), n_tokens, &mut out).unwrap())
                        })
                    });
                }
            }
            set_force_scalar(false);
        }
        group.finish();
    }
}

/// One decode step's matmuls for the default model (30 layers of q, k, v, o, gate, up, down in
/// Q4_1, then the 49152-row Q8_0 output projection): about 91 MiB of distinct weights, more than
/// the L3 cache, so this measures weights streamed from memory, as real decoding does. In the
/// GGUF layout (`gguf/`) and repacked as the engine runs them on AVX2 (`packed/`, also with
/// Q4_0 layers): `cargo bench -p kostant-kernels -- decode_token`.
fn decode_token(c: &mut Criterion) {
    let layer: [(usize, usize); 7] = [
        (576, 576),
        (192, 576),
        (192, 576),
        (576, 576),
        (1536, 576),
        (1536, 576),
        (576, 1536),
    ];
    let mut mats: Vec<(GgmlType, Vec<u8>, usize, usize)> = Vec::new();
    for l in 0..30 {
        for (i, &(rows, cols)) in layer.iter().enumerate() {
            let bytes = matrix(GgmlType::Q4_1, rows, cols, (10 * l + i) as u64);
            mats.push((GgmlType::Q4_1, bytes, rows, cols));
        }
    }
    let bytes = matrix(GgmlType::Q8_0, 49152, 576, 7);
    mats.push((GgmlType::Q8_0, bytes, 49152, 576));
    let total: usize = mats.iter().map(|m| m.1.len()).sum();
    let x = data(1536, 3);
    let mut out = vec![0.0f32; 49152];

    let mut mats_q4_0: Vec<(GgmlType, Vec<u8>, usize, usize)> = Vec::new();
    for (l, chunk) in mats[..mats.len() - 1].chunks(layer.len()).enumerate() {
        for (i, m) in chunk.iter().enumerate() {
            let bytes = matrix(GgmlType::Q4_0, m.2, m.3, (10 * l + i) as u64);
            mats_q4_0.push((GgmlType::Q4_0, bytes, m.2, m.3));
        }
    }
    let head = mats[mats.len() - 1].clone();
    mats_q4_0.push(head);
    let packed = |mats: &[(GgmlType, Vec<u8>, usize, usize)]| -> Vec<PackedWeights> {
        mats.iter()
            .map(|(ty, bytes, rows, cols)| {
                let w = Weights::new(*ty, bytes, *rows, *cols).unwrap();
                PackedWeights::pack_any_cpu(&w).unwrap().unwrap()
            })
            .collect()
    };
    let packed_q4_1 = packed(&mats);
    let packed_q4_0 = packed(&mats_q4_0);

    let mut group = c.benchmark_group("decode_token_q4_1_model");
    group
        .throughput(Throughput::Bytes(total as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    set_force_scalar(false);
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        // Inside the pool, as an engine using `in_pool` runs it.
        group.throughput(Throughput::Bytes(total as u64));
        group.bench_function(format!("gguf/t{threads}"), |b| {
            pool.install(|| {
                b.iter(|| {
                    for (ty, bytes, rows, cols) in &mats {
                        let w = Weights::new(*ty, bytes, *rows, *cols).unwrap();
                        matmul(&w, &x[..*cols], 1, &mut out[..*rows]).unwrap();
                    }
                })
            })
        });
        for (name, ps) in [("packed_q4_1", &packed_q4_1), ("packed_q4_0", &packed_q4_0)] {
            let bytes: usize = ps.iter().map(|p| p.bytes()).sum();
            group.throughput(Throughput::Bytes(bytes as u64));
            group.bench_function(format!("{name}/t{threads}"), |b| {
                pool.install(|| {
                    b.iter(|| {
                        for p in ps.iter() {
                            p.matmul(&x[..p.cols()], 1, &mut out[..p.rows()]).unwrap();
                        }
                    })
                })
            });
        }
    }
    group.finish();
}

/// Q4_0, Q4_1, Q8_0 and Q4_K in the GGUF layout against the same matrix repacked 8 rows to a
/// block (what the engine runs on AVX2), for decode and a 64-token prefill:
/// `cargo bench -p kostant-kernels --bench matvec -- q4x8`. Q4_K at Gemma 3 270M's ffn_down
/// shape (its rows are 256-element super-blocks).
fn packed(c: &mut Criterion) {
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
    ] {
        let (rows, cols) = if ty == GgmlType::Q4_K {
            (640, 2048)
        } else {
            (1536, 576)
        };
        let bytes = matrix(ty, rows, cols, 1);
        let w = Weights::new(ty, &bytes, rows, cols).unwrap();
        let p = PackedWeights::pack_any_cpu(&w).unwrap().unwrap();
        let mut group =
            c.benchmark_group(format!("q4x8_{}_{rows}x{cols}", ty.name().to_lowercase()));
        group
            .throughput(Throughput::Bytes(bytes.len() as u64))
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for n_tokens in [1, 64] {
                let x = data(n_tokens * cols, 2);
                let mut out = vec![0.0f32; n_tokens * rows];
                let id = |layout: &str| {
                    BenchmarkId::new(format!("{layout}/t{threads}"), format!("n{n_tokens}"))
                };
                group.bench_function(id("gguf"), |b| {
                    pool.install(|| {
                        b.iter(|| matmul(&w, black_box(&x), n_tokens, &mut out).unwrap())
                    })
                });
                group.bench_function(id("packed"), |b| {
                    pool.install(|| b.iter(|| p.matmul(black_box(&x), n_tokens, &mut out).unwrap()))
                });
            }
        }
        group.finish();
    }
}

/// Decode at the target size: the layers of the Llama-3.2-3B shape (Q4_0, repacked as the
/// engine runs them), a slice of its Q6_K output matrix and the same rows as Q4_K, hundreds of megabytes so every
/// byte comes from memory. Throughput against `cargo bench -p kostant-kernels --bench stream`
/// is the kernels' share of the machine's read bandwidth:
/// `cargo bench -p kostant-kernels --bench matvec -- decode_3b`.
fn decode_3b(c: &mut Criterion) {
    let (embd, kv, ff) = (3072, 1024, 8192);
    let layer = [
        (embd, embd),
        (kv, embd),
        (kv, embd),
        (embd, embd),
        (ff, embd),
        (ff, embd),
        (embd, ff),
    ];
    let mats: Vec<PackedWeights> = (0..4)
        .flat_map(|l| layer.iter().enumerate().map(move |(i, &s)| (l, i, s)))
        .map(|(l, i, (rows, cols))| {
            let bytes = matrix(GgmlType::Q4_0, rows, cols, (10 * l + i) as u64);
            let w = Weights::new(GgmlType::Q4_0, &bytes, rows, cols).unwrap();
            PackedWeights::pack_any_cpu(&w).unwrap().unwrap()
        })
        .collect();
    let layers: usize = mats.iter().map(|p| p.bytes()).sum();
    let head_rows = 16384;
    let head = matrix(GgmlType::Q6_K, head_rows, embd, 99);
    // The same rows as Q4_K (read in the GGUF layout: `kostant synth --quant Q4_K` models).
    let head_q4_k = matrix(GgmlType::Q4_K, head_rows, embd, 98);
    let x = data(ff, 3);
    let mut out = vec![0.0f32; head_rows.max(ff)];

    let mut group = c.benchmark_group("decode_3b");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    set_force_scalar(false);
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        group.throughput(Throughput::Bytes(layers as u64));
        group.bench_function(format!("q4_0_layers/t{threads}"), |b| {
            pool.install(|| {
                b.iter(|| {
                    for p in &mats {
                        p.matmul(&x[..p.cols()], 1, &mut out[..p.rows()]).unwrap();
                    }
                })
            })
        });
        for (name, ty, bytes) in [
            ("q6_k_output", GgmlType::Q6_K, &head),
            ("q4_k_rows", GgmlType::Q4_K, &head_q4_k),
        ] {
            group.throughput(Throughput::Bytes(bytes.len() as u64));
            group.bench_function(format!("{name}/t{threads}"), |b| {
                pool.install(|| {
                    b.iter(|| {
                        let w = Weights::new(ty, bytes, head_rows, embd).unwrap();
                        matmul(&w, &x[..embd], 1, &mut out[..head_rows]).unwrap();
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, decode_token, packed, decode_3b);
criterion_main!(benches);
