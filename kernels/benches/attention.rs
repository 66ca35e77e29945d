//! Decode attention at the default model's shape (9 query heads sharing 3 kv heads of 64
//! values, 30 layers): the grouped dot against the cached keys, then the weighted sum of the
//! cached values, for every kv head of every layer, as one decode step runs them.
//!
//! `hot/`: the step before read the same cache, so what of it fits the CPU's caches is there
//! (at 1024 positions the 30 layers' 23 MB only fit L3). `cold/`: a 64 MiB sweep
//! runs before each step (outside the timing), as a token's 90 MB of weights do between one
//! layer's attention and the next. Each is measured with the positions one after another in a
//! layer's rows (`rows/`: kv heads side by side, stride = kv width) and with each kv head's
//! positions contiguous (`heads/`: stride = head width).
//!
//! `cargo bench -p kostant-kernels --bench attention`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use half::f16;
use kostant_kernels::attention::F16SumOrder;
use kostant_kernels::attention_group::{dot_f16_rows_group, weighted_sum_f16_rows_group};
use std::hint::black_box;
use std::time::Duration;

const LAYERS: usize = 30;
const KV_HEADS: usize = 3;
const GROUP: usize = 3;
const HD: usize = 64;

fn values(n: usize, seed: u64) -> Vec<f16> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            f16::from_f32((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        })
        .collect()
}

/// One layer's cache: keys and values for `rows` positions (random values, so either layout
/// reads them; only the order of reading differs).
struct Layer {
    k: Vec<f16>,
    v: Vec<f16>,
}

#[derive(Clone, Copy)]
enum Layout {
    /// (position, kv head, value): a position's heads side by side.
    Rows,
    /// (kv head, position, value): a head's positions contiguous.
    Heads,
}

impl Layout {
    /// Slice start, stride and offset of kv head `g` over `rows` positions.
    fn head(self, g: usize, rows: usize) -> (usize, usize, usize) {
        match self {
            Layout::Rows => (0, KV_HEADS * HD, g * HD),
            Layout::Heads => (g * rows * HD, HD, 0),
        }
    }
}

fn step(layers: &[Layer], layout: Layout, rows: usize, scratch: &mut Scratch) {
    let order = F16SumOrder::VecDot;
    for layer in layers {
        for g in 0..KV_HEADS {
            let (start, stride, offset) = layout.head(g, rows);
            let (k, v) = (&layer.k[start..], &layer.v[start..]);
            dot_f16_rows_group(
                &scratch.q,
                HD,
                k,
                stride,
                offset,
                0.125,
                order,
                &mut scratch.probs,
            );
            // Stand-in for the softmax: probabilities of the size it leaves.
            for p in scratch.probs.iter_mut() {
                *p = p.abs() / rows as f32;
            }
            weighted_sum_f16_rows_group(
                &mut scratch.probs,
                HD,
                v,
                stride,
                offset,
                order,
                &mut scratch.lanes,
                &mut scratch.out,
            );
        }
    }
    black_box(&scratch.out);
}

struct Scratch {
    q: Vec<f32>,
    probs: Vec<f32>,
    lanes: Vec<f32>,
    out: Vec<f32>,
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("attention_decode");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let sweep = vec![1u64; 64 << 17]; // 64 MiB
    for rows in [128, 1024] {
        let layers: Vec<Layer> = (0..LAYERS)
            .map(|l| Layer {
                k: values(rows * KV_HEADS * HD, 2 * l as u64 + 1),
                v: values(rows * KV_HEADS * HD, 2 * l as u64 + 2),
            })
            .collect();
        let mut scratch = Scratch {
            q: values(GROUP * HD, 99).iter().map(|h| h.to_f32()).collect(),
            probs: vec![0.0; GROUP * rows],
            lanes: vec![0.0; GROUP * 32 * HD],
            out: vec![0.0; GROUP * HD],
        };
        for (name, layout) in [("rows", Layout::Rows), ("heads", Layout::Heads)] {
            group.bench_function(format!("hot/{name}/{rows}"), |b| {
                b.iter(|| step(&layers, layout, rows, &mut scratch))
            });
            group.bench_function(format!("cold/{name}/{rows}"), |b| {
                b.iter_batched(
                    || black_box(sweep.iter().sum::<u64>()),
                    |_| step(&layers, layout, rows, &mut scratch),
                    BatchSize::PerIteration,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
