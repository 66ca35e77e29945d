//! Q4_0 layer matrices are repacked at load where the AVX2 kernels run (8 rows interleaved per
//! block); the model must answer as it does from the GGUF layout. Own test binary: it switches
//! the process-wide kernel path.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{Model, Session};
use kostant_kernels::{cpu_features, set_force_scalar, GgmlType, KernelPath};

fn load(spec: &TinySpec) -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(spec).unwrap()).unwrap()).unwrap()
}

fn logits(model: &Arc<Model>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model.clone(), 64).unwrap();
    s.prefill(tokens).unwrap().0
}

#[test]
fn repacked_q4_0_answers_as_the_gguf_layout_does() {
    let spec = TinySpec {
        matrix_type: GgmlType::Q4_0,
        embd_type: GgmlType::F16,
        ..Default::default()
    };
    set_force_scalar(true);
    let plain = load(&spec);
    assert_eq!(
        plain.repacked_matrices(),
        0,
        "nothing is repacked for the scalar kernels"
    );
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 200).collect();
    let want = logits(&plain, &prompt);
    set_force_scalar(false);

    let packed = load(&spec);
    let expected = if cpu_features().path == KernelPath::Avx2Fma {
        7 * spec.n_layer
    } else {
        0
    };
    assert_eq!(packed.repacked_matrices(), expected);
    // The repacked matmuls equal the scalar ones bit for bit; the other kernels (attention, the
    // f16 lm head) run their SIMD twins, which differ from scalar only in summation order.
    let got = logits(&packed, &prompt);
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-4 * scale, "logit {i}: {a} vs {b}");
    }
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j]));
    assert_eq!(argmax(&got), argmax(&want));
}

#[test]
fn other_formats_are_read_in_place() {
    let spec = TinySpec {
        matrix_type: GgmlType::Q4_1,
        ..Default::default()
    };
    assert_eq!(load(&spec).repacked_matrices(), 0);
}
