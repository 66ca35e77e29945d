//! How many 512-bit and 256-bit `vpdpbusd`, and 512-bit `vdpbf16ps`, this core runs a second:
//! twelve independent accumulators each, so the rate is the instruction's throughput, not its
//! latency. The figures docs/benchmarks-log.md quotes for the paired prompt kernels.
//!
//!   cargo run --release -p kostant-kernels --example instruction_rates

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::arch::x86_64::*;
    use std::hint::black_box;
    use std::time::Instant;

    const ROUNDS: usize = 50_000_000;

    #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
    fn dpbusd_zmm() -> __m512i {
        let (a, b) = (
            black_box(_mm512_set1_epi8(3)),
            black_box(_mm512_set1_epi8(1)),
        );
        let mut c: [__m512i; 12] = std::array::from_fn(|i| black_box(_mm512_set1_epi32(i as i32)));
        for _ in 0..ROUNDS {
            for c in c.iter_mut() {
                *c = _mm512_dpbusd_epi32(*c, a, b);
            }
        }
        c.iter()
            .fold(_mm512_setzero_si512(), |s, &c| _mm512_xor_si512(s, c))
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
    fn dpbusd_ymm() -> __m256i {
        let (a, b) = (
            black_box(_mm256_set1_epi8(3)),
            black_box(_mm256_set1_epi8(1)),
        );
        let mut c: [__m256i; 12] = std::array::from_fn(|i| black_box(_mm256_set1_epi32(i as i32)));
        for _ in 0..ROUNDS {
            for c in c.iter_mut() {
                *c = _mm256_dpbusd_epi32(*c, a, b);
            }
        }
        c.iter()
            .fold(_mm256_setzero_si256(), |s, &c| _mm256_xor_si256(s, c))
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    fn dpbf16_zmm() -> __m512 {
        // SAFETY: both types are 512 plain bits.
        let (a, b): (__m512bh, __m512bh) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(black_box(_mm512_set1_epi16(0x3f80))),
                std::mem::transmute::<__m512i, __m512bh>(black_box(_mm512_set1_epi16(0x3f00))),
            )
        };
        let mut c: [__m512; 12] = std::array::from_fn(|i| black_box(_mm512_set1_ps(i as f32)));
        for _ in 0..ROUNDS {
            for c in c.iter_mut() {
                *c = _mm512_dpbf16_ps(*c, a, b);
            }
        }
        c.iter()
            .fold(_mm512_setzero_ps(), |s, &c| _mm512_add_ps(s, c))
    }

    let rate = |name: &str, macs: f64, run: &dyn Fn()| {
        let t = Instant::now();
        run();
        let per_s = (12 * ROUNDS) as f64 / t.elapsed().as_secs_f64();
        println!(
            "{name}: {:.2} G instructions/s, {:.0} G multiply-adds/s",
            per_s / 1e9,
            per_s * macs / 1e9
        );
    };
    if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
        // SAFETY: the features were detected just above.
        rate("vpdpbusd zmm", 64.0, &|| {
            black_box(unsafe { dpbusd_zmm() });
        });
        // SAFETY: as above.
        rate("vpdpbusd ymm", 32.0, &|| {
            black_box(unsafe { dpbusd_ymm() });
        });
    } else {
        println!("vpdpbusd: this CPU lacks AVX-512 VNNI");
    }
    if is_x86_feature_detected!("avx512bf16") {
        // SAFETY: detected just above.
        rate("vdpbf16ps zmm", 32.0, &|| {
            black_box(unsafe { dpbf16_zmm() });
        });
    } else {
        println!("vdpbf16ps: this CPU lacks AVX512_BF16");
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 instructions only");
}
