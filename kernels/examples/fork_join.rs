//! What one fork-join of a rayon pool costs when called from a thread outside the pool (the
//! work is handed over and waited for) and from one of the pool's own threads, as
//! `kostant_kernels::in_pool` runs a forward pass: 20,000 `par_chunks_mut` calls over trivial
//! work, twice each. docs/benchmarks-log.md, issue 21, "One side-path call per input".
//!
//!   cargo run --release -p kostant-kernels --example fork_join [THREADS]

use std::time::Instant;

use rayon::prelude::*;

fn per_call_us(v: &mut [f32]) -> f64 {
    let calls = 20_000;
    let t = Instant::now();
    for i in 0..calls {
        v.par_chunks_mut(1024).for_each(|c| c[0] += i as f32);
    }
    t.elapsed().as_secs_f64() * 1e6 / calls as f64
}

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("the global pool");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a second pool");
    let mut v = vec![0f32; 4096];
    for _ in 0..2 {
        // From main, which is not a worker: the global pool takes each call.
        let outside = per_call_us(&mut v);
        // From a worker of `pool`: each call splits in place.
        let inside = pool.install(|| per_call_us(&mut v));
        println!("{threads} threads: {outside:.2} us a call from outside the pool, {inside:.2} us from inside");
    }
}
