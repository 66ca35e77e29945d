//! Debug aid: writes the residual stream after every layer (taps 0..n_layer) for a prompt and
//! then for single decode steps, as raw little-endian f32 files, to compare with llama.cpp's
//! `l_out-<l>` tensors.
//!
//! `cargo run -p kostant-engine --release --example dump_taps -- MODEL 2,107 OUT_DIR [STEP_IDS]`
//! writes `OUT_DIR/prefill-<l>.f32` (every prompt token's row), `OUT_DIR/logits.f32` (the last
//! token's, from a pass without taps: with them the last layer runs on every row, without them
//! on the last row only, as in llama.cpp) and, for each id of the optional comma-separated
//! `STEP_IDS` fed one at a time after the prompt, `OUT_DIR/step<s>-<l>.f32` and
//! `OUT_DIR/step<s>-logits.f32`.

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{prefill_tapped, step_tapped};
use kostant_engine::{Model, Session};

fn ids(s: &str) -> Vec<u32> {
    s.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().expect("a token id"))
        .collect()
}

fn write(dir: &str, name: &str, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(format!("{dir}/{name}.f32"), bytes).expect("writable output directory");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, prompt, dir, rest @ ..] = &args[..] else {
        panic!("usage: dump_taps MODEL IDS OUT_DIR [STEP_IDS]");
    };
    std::fs::create_dir_all(dir).expect("output directory");
    let model = Model::from_gguf(Gguf::open(model.as_ref()).expect("gguf")).expect("model");
    let n_layer = model.hparams.n_layer;
    let taps: Vec<usize> = (0..n_layer).collect();
    eprintln!("kernels: {}", kostant_kernels::cpu_features());
    let mut s = Session::new(model.clone(), 1024).expect("session");
    let (_, _, states) = prefill_tapped(&mut s, &ids(prompt), &taps).expect("prefill");
    for (l, v) in states.iter().enumerate() {
        write(dir, &format!("prefill-{l}"), v);
    }
    let mut s = Session::new(model.clone(), 1024).expect("session");
    let (logits, _, _) = prefill_tapped(&mut s, &ids(prompt), &[]).expect("prefill");
    write(dir, "logits", &logits);
    for (i, t) in rest
        .first()
        .map(|s| ids(s))
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let (logits, states) = step_tapped(&mut s, t, &taps).expect("step");
        for (l, v) in states.iter().enumerate() {
            write(dir, &format!("step{i}-{l}"), v);
        }
        write(dir, &format!("step{i}-logits"), &logits);
    }
}
