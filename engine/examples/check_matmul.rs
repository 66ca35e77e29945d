//! Debug aid: one weight matrix of a GGUF times activations read from a raw f32 file, through
//! the engine's path (repacked where the engine repacks it), written as raw f32: to hold one
//! matmul against llama.cpp's, fed llama.cpp's own input.
//!
//! `cargo run -p kostant-engine --release --example check_matmul -- MODEL TENSOR IN.f32 OUT.f32`

use kostant_engine::gguf::Gguf;
use kostant_kernels::{matmul, PackedWeights, Weights};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, name, input, output] = &args[..] else {
        panic!("usage: check_matmul MODEL TENSOR IN.f32 OUT.f32");
    };
    let g = Gguf::open(model.as_ref()).expect("gguf");
    let t = g.tensor(name).expect("tensor").clone();
    let w = Weights::new(t.ty, g.tensor_data(&t), t.rows(), t.cols()).expect("weights");
    let x: Vec<f32> = std::fs::read(input)
        .expect("input")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let n = x.len() / t.cols();
    let mut out = vec![0.0; n * t.rows()];
    match PackedWeights::pack(&w).expect("pack") {
        Some(p) => p.matmul(&x, n, &mut out).expect("matmul"),
        None => matmul(&w, &x, n, &mut out).expect("matmul"),
    }
    eprintln!("{name}: {:?}, {n} tokens", t.ty);
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(output, bytes).expect("output");
}
