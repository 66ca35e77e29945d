//! Every weight format issue 22 added, on a real model, against llama.cpp: the default model
//! requantized into Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS and BF16 by
//! `kostant_engine::gguf::requantize` (what `kostant quantize` writes), and llama.cpp's greedy
//! replies to four chat prompts on those very files. The file's sha256 is in the fixture, so the
//! test checks it reads the bytes llama.cpp read. How the fixture was recorded:
//! fixtures/README.md.
//!
//! On a CPU with AVX512_BF16, BF16 matmuls sum as llama.cpp's AVX-512 builds do (`vdpbf16ps`,
//! kostant_kernels' `bf16_pairs`) while attention keeps the AVX2 build's orders, so there the
//! BF16 replies match neither build by construction; they are held to the AVX2 build's replies
//! all the same, token for token (fixtures/README.md).
//!
//! SmolLM2's rows are 576 wide, no multiple of 256: a file of a 256-element format holds it in
//! its 1536-wide `ffn_down` matrices and the fallback format elsewhere (as llama-quantize's do),
//! so each K-quant meets a real model in the 30 matrices that carry most of its error.

use std::path::PathBuf;

use kostant_engine::gguf::requantize::{parse_target, requantize};
use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{greedy_reply, real_model_path};
use kostant_engine::{Model, Session};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_new_format_gives_llama_cpps_greedy_replies() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/quant_golden.json")).unwrap();
    let max = fx["max_new_tokens"].as_u64().unwrap() as usize;
    let cases = fx["cases"].as_array().unwrap();
    let dir = std::env::temp_dir().join(format!("kostant-quant-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut types: Vec<&str> = cases.iter().map(|c| c["type"].as_str().unwrap()).collect();
    types.dedup();
    assert_eq!(types.len(), 8, "{types:?}");
    let mut differ = Vec::new();
    for name in types {
        let ty = parse_target(name).unwrap();
        let path: PathBuf = dir.join(format!("{name}.gguf"));
        requantize(&real_model_path(), &path, ty).unwrap();
        // The file holds the format where its rows allow it.
        let g = Gguf::open(&path).unwrap();
        assert!(
            g.tensors().iter().any(|t| t.ty == ty),
            "{name}: no {name} tensor"
        );
        drop(g);
        let sha256 = {
            use sha2::{Digest, Sha256};
            hex(&Sha256::digest(std::fs::read(&path).unwrap()))
        };
        let model = Model::load(&path).unwrap();
        for case in cases.iter().filter(|c| c["type"] == name) {
            assert_eq!(
                sha256,
                case["model_sha256"].as_str().unwrap(),
                "{name}: the requantized file is not the one llama.cpp read; record the fixture again"
            );
            let prompt = model
                .tokenizer
                .encode(case["prompt"].as_str().unwrap(), true)
                .unwrap();
            let mut s = Session::new(model.clone(), 512).unwrap();
            let got = greedy_reply(&mut s, &prompt, max).unwrap();
            if got != case["text"].as_str().unwrap() {
                differ.push(format!(
                    "{name}, {}: ours {got:?}, llama.cpp's {}",
                    case["question"], case["text"]
                ));
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
