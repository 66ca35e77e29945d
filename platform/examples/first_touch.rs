//! What writing to memory the process has never touched costs on this machine: a buffer of
//! `MIB` MiB (default 460, a 3B model's 4,000-token snapshot) allocated and filled, `REPS`
//! times (default 6), each freed before the next. The first write to a page faults it in; in a
//! VM that hands freed pages back to its host (Linux free page reporting), the host faults it
//! in again, so the rate varies from run to run. docs/benchmarks-log.md, issue 23, quotes it.
//!
//! `cargo run --release -p kostant-platform --example first_touch [MIB] [REPS]`

use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(460);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6);
    let bytes = mib << 20;
    for rep in 0..reps {
        let start = Instant::now();
        // Non-zero, so the allocator cannot hand back lazily zeroed pages.
        let buf = vec![1u8; bytes];
        black_box(&buf);
        let s = start.elapsed().as_secs_f64();
        println!(
            "{rep}: {:.1} ms, {:.2} GB/s",
            s * 1e3,
            bytes as f64 / 1e9 / s
        );
        drop(buf);
    }
}
