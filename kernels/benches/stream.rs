//! STREAM-style read bandwidth (GB/s) at 1 and 2 threads over a 1 GiB buffer: the ceiling that
//! decode speed is measured against (see BENCHMARKS.md). Prints one line per thread count.
//!
//! `cargo bench -p kostant-kernels --bench stream` (`STREAM_MB` sets the buffer size).

use kostant_kernels::bandwidth::read_bandwidth;

fn main() {
    let mb: usize = std::env::var("STREAM_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, 2].into_iter().filter(|&t| t <= cores.max(2)) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        let b = pool.install(|| read_bandwidth(mb << 20, 10));
        println!(
            "read bandwidth: {:.2} GB/s best, {:.2} GB/s mean ({} threads, {} MiB, 10 reps)",
            b.best_gb_s, b.mean_gb_s, b.threads, mb
        );
    }
}
