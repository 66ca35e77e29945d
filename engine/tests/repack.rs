//! Q4_0, Q4_1, Q8_0 and Q4_K matrices are repacked at load where the AVX2 kernels run, Q4_0 where
//! the NEON ones do (8 rows interleaved per block); the model must answer as it does from the GGUF
//! layout. Own test binary: it switches the process-wide kernel path, and its tests hold
//! `kernel_table` so that one's switch never lands inside another.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{Model, Session};
use kostant_kernels::{cpu_features, kernel_table, GgmlType, KernelTable};

fn load(spec: &TinySpec) -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(spec).unwrap()).unwrap()).unwrap()
}

fn logits(model: &Arc<Model>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model.clone(), 64).unwrap();
    kostant_engine::testing::prefill(&mut s, tokens).unwrap().0
}

#[test]
fn repacked_4_bit_models_answer_as_the_gguf_layout_does() {
    let table = kernel_table();
    for matrix_type in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        check_repacked(
            &table,
            TinySpec {
                matrix_type,
                embd_type: GgmlType::F16,
                ..Default::default()
            },
        );
    }
}

fn check_repacked(table: &KernelTable, spec: TinySpec) {
    table.set_scalar(true);
    let plain = load(&spec);
    assert_eq!(
        plain.repacked_matrices(),
        0,
        "nothing is repacked for the scalar kernels"
    );
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 200).collect();
    let want = logits(&plain, &prompt);
    table.set_scalar(false);

    let packed = load(&spec);
    // Every layer's seven matrices; the lm head is tied to the F16 embedding and stays put.
    let path = cpu_features().path;
    let repacked_here = match spec.matrix_type {
        GgmlType::Q4_0 => path.is_x86_simd() || path.is_neon(),
        _ => path.is_x86_simd(),
    };
    let expected = if repacked_here { 7 * spec.n_layer } else { 0 };
    eprintln!(
        "{:?} on {path}: {expected} matrices repacked",
        spec.matrix_type
    );
    assert_eq!(packed.repacked_matrices(), expected);
    // The repacked matmuls keep a GGUF kernel's bits (Q4_0 the scalar one's, Q4_1 and Q8_0
    // the AVX2 one's); against the forced-scalar run, results differ at most by summation order
    // (the activations' and attention's SIMD kernels still run).
    let got = logits(&packed, &prompt);
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-4 * scale, "logit {i}: {a} vs {b}");
    }
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j]));
    assert_eq!(argmax(&got), argmax(&want));
}

/// Q4_K is repacked where llama.cpp repacks it (AVX2), and then sums as llama.cpp's repacked
/// kernels do; against the forced-scalar GGUF layout it differs by summation order only.
#[test]
fn repacked_q4_k_answers_as_the_gguf_layout_does() {
    let table = kernel_table();
    check_repacked(
        &table,
        TinySpec {
            matrix_type: GgmlType::Q4_K,
            embd_type: GgmlType::F16,
            n_embd: 256,
            n_ff: 256,
            ..Default::default()
        },
    );
}

#[test]
fn other_formats_are_read_in_place() {
    let _table = kernel_table();
    for matrix_type in [GgmlType::Q6_K, GgmlType::F16] {
        let spec = TinySpec {
            matrix_type,
            n_embd: 256,
            n_ff: 256,
            ..Default::default()
        };
        assert_eq!(load(&spec).repacked_matrices(), 0, "{matrix_type:?}");
    }
}
