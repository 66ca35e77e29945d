//! How long building a tokenizer from a GGUF's metadata takes (the app does it at start-up),
//! and encoding a chat-sized text, on the real vocabularies: Gemma 3 (SentencePiece, 262144
//! tokens) and SmolLM2 (byte-level BPE, 49152 tokens). Reading the file's metadata is timed
//! apart from building. Best and median of 15 runs each.
//!
//! `cargo bench -p kostant-engine --bench tokenizer_load`

use std::path::Path;
use std::time::{Duration, Instant};

use kostant_engine::gguf::{Gguf, GgufWriter};
use kostant_engine::tokenizer::Tokenizer;

const RUNS: usize = 15;

fn times(mut f: impl FnMut()) -> (Duration, Duration) {
    let mut t: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort();
    (t[0], t[RUNS / 2])
}

fn report(what: &str, (best, median): (Duration, Duration)) {
    println!(
        "{what:<52} best {:>8.2} ms  median {:>8.2} ms",
        best.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3
    );
}

fn bench(name: &str, path: &Path) {
    report(
        &format!("{name}: read metadata"),
        times(|| {
            std::hint::black_box(Gguf::read_metadata(path).expect("metadata"));
        }),
    );
    // The tokenizer keys alone, in memory, so that building is timed without file access.
    let mut w = GgufWriter::new();
    for (key, value) in Gguf::read_metadata(path).expect("metadata") {
        if key.starts_with("tokenizer.ggml.") {
            w.metadata(&key, value);
        }
    }
    let g = Gguf::from_bytes(w.to_bytes().expect("write")).expect("read");
    report(
        &format!("{name}: Tokenizer::from_gguf"),
        times(|| {
            std::hint::black_box(Tokenizer::from_gguf(&g).expect("tokenizer"));
        }),
    );
    let tok = Tokenizer::from_gguf(&g).expect("tokenizer");
    let text = "The quick brown fox jumps over the lazy dog. Ünïcödé, 日本語, 🦀 and code: \
                fn main() { println!(\"{}\", 42); }\n\n"
        .repeat(40);
    let n = tok.encode(&text, true).expect("encode").len();
    report(
        &format!("{name}: encode {} bytes ({n} ids)", text.len()),
        times(|| {
            std::hint::black_box(tok.encode(&text, true).expect("encode"));
        }),
    );
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    for (name, file) in [
        ("gemma3", "gemma-3-270m-Q4_K_M.gguf"),
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ] {
        let path = root.join(file);
        if path.is_file() {
            bench(name, &path);
        } else {
            println!("{name}: {} is missing, not measured", path.display());
        }
    }
}
