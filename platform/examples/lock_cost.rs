//! What one passphrase guess costs at given Argon2id parameters: the time of one key derivation
//! (median of a few) and its memory. `cargo run -p kostant-platform --example lock_cost
//! [m_kib t p]...`; without arguments, the default lock's parameters and a few around them.

use std::time::Instant;

use kostant_platform::passphrase::{lock, LockParams, Passphrase};

fn median_secs(params: LockParams, runs: usize) -> f64 {
    let pass = Passphrase::new("a guess").expect("not empty");
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            lock(b"inner", &pass, params, b"ctx").expect("derives");
            t0.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: m_kib t p"))
        .collect();
    let sets: Vec<LockParams> = match args.len() {
        0 => vec![
            LockParams::DEFAULT,
            LockParams {
                m_kib: 128 * 1024,
                t: 3,
                p: 1,
            },
            LockParams {
                m_kib: 256 * 1024,
                t: 2,
                p: 1,
            },
            LockParams {
                m_kib: 512 * 1024,
                t: 2,
                p: 1,
            },
        ],
        _ => args
            .chunks(3)
            .map(|c| LockParams {
                m_kib: c[0],
                t: c[1],
                p: c[2],
            })
            .collect(),
    };
    for p in sets {
        let secs = median_secs(p, 5);
        println!(
            "m={} MiB t={} p={}: {:.0} ms per guess, {} MiB per guess",
            p.m_kib / 1024,
            p.t,
            p.p,
            secs * 1000.0,
            p.m_kib / 1024
        );
    }
}
