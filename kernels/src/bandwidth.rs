//! A STREAM-style read-bandwidth measurement: how fast this machine streams memory into the
//! cores, the ceiling for decode (which reads every weight byte once per token). Decode speed
//! is judged as weight bytes per token x tokens/s against this number.
//!
//! Like STREAM, the buffer is far larger than the last-level cache and is read whole once per
//! repetition; the best repetition counts. Reads are split over the rayon pool into one
//! contiguous part per thread, as the matmuls split their rows.

use rayon::prelude::*;
use std::time::Instant;

/// Sums `words` with four independent accumulators (so the loop is bound by loads, not by one
/// chain of adds; the compiler vectorizes it). The sum is returned so the reads cannot be
/// optimized away.
pub fn read_sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    let mut s = tail.iter().fold(0u64, |s, &w| s.wrapping_add(w));
    for a in acc {
        s = s.wrapping_add(a);
    }
    s
}

/// Result of [`read_bandwidth`].
#[derive(Clone, Copy, Debug)]
pub struct Bandwidth {
    /// Bytes read per repetition.
    pub bytes: usize,
    /// Threads the reads were split over.
    pub threads: usize,
    /// Best repetition, in GB/s (10^9 bytes per second).
    pub best_gb_s: f64,
    /// Mean over the repetitions, in GB/s.
    pub mean_gb_s: f64,
}

/// Reads a buffer of `bytes` (rounded down to whole 64-byte lines, at least one) `reps` times
/// on the current rayon pool and reports the rate. The buffer is written once first so every
/// page is resident and backed by its own memory (a zeroed allocation would read one shared
/// zero page).
pub fn read_bandwidth(bytes: usize, reps: usize) -> Bandwidth {
    let words = (bytes / 64).max(1) * 8;
    let buf: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let threads = rayon::current_num_threads();
    let part = words.div_ceil(threads).div_ceil(8) * 8;
    let run = || -> u64 {
        buf.par_chunks(part)
            .map(read_sum)
            .reduce(|| 0, u64::wrapping_add)
    };
    std::hint::black_box(crate::in_pool(run)); // warm-up: the pool spins up
    let mut rates = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        std::hint::black_box(crate::in_pool(run));
        rates.push((words * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    Bandwidth {
        bytes: words * 8,
        threads,
        best_gb_s: rates.iter().copied().fold(0.0, f64::max),
        mean_gb_s: rates.iter().sum::<f64>() / rates.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sum_adds_every_word_whatever_the_length() {
        for n in [0usize, 1, 7, 8, 9, 100] {
            let v: Vec<u64> = (1..=n as u64).collect();
            assert_eq!(read_sum(&v), (n * (n + 1) / 2) as u64);
        }
        assert_eq!(read_sum(&[u64::MAX, 2]), 1);
    }

    #[test]
    fn read_bandwidth_reads_the_asked_bytes() {
        let b = read_bandwidth(1000, 2);
        assert_eq!(b.bytes, 960);
        assert!(b.best_gb_s > 0.0 && b.best_gb_s >= b.mean_gb_s * 0.999);
    }
}
