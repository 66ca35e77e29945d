//! `Session::extend_hidden`: the hidden states a classifier reads. Checked against itself
//! (fed in pieces vs all at once) and against the logits path (the final tap is what the lm
//! head multiplies).

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{EngineError, Model, Session};

fn tiny() -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&TinySpec::default()).unwrap()).unwrap())
        .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn pieces_equal_whole() {
    let model = tiny();
    let n_layer = model.hparams.n_layer;
    let taps = [0, n_layer / 2, n_layer];
    let tokens: Vec<u32> = (1..12).collect();

    let mut whole = Session::new(model.clone(), 64).unwrap();
    let all = whole.extend_hidden(&tokens, &taps).unwrap();
    assert_eq!(all.len(), taps.len());
    let e = model.hparams.n_embd;
    for s in &all {
        assert_eq!(s.len(), tokens.len() * e);
        assert!(s.iter().all(|v| v.is_finite()));
    }
    // Different taps see different states.
    assert!(max_diff(&all[0], &all[2]) > 1e-3);

    let mut parts = Session::new(model.clone(), 64).unwrap();
    let a = parts.extend_hidden(&tokens[..5], &taps).unwrap();
    let b = parts.extend_hidden(&tokens[5..], &taps).unwrap();
    assert_eq!(parts.tokens(), &tokens[..]);
    for t in 0..taps.len() {
        let joined: Vec<f32> = a[t].iter().chain(&b[t]).copied().collect();
        assert!(max_diff(&joined, &all[t]) < 2e-2, "tap {}", taps[t]);
    }

    // Truncating back and re-feeding gives the same states again.
    parts.truncate(5);
    assert_eq!(parts.tokens().len(), 5);
    let again = parts.extend_hidden(&tokens[5..], &taps).unwrap();
    for t in 0..taps.len() {
        assert!(max_diff(&again[t], &b[t]) < 1e-6);
    }
}

#[test]
fn bad_requests_change_nothing() {
    let model = tiny();
    let n_layer = model.hparams.n_layer;
    let mut s = Session::new(model.clone(), 8).unwrap();
    s.extend_hidden(&[1, 2], &[n_layer]).unwrap();
    assert!(matches!(
        s.extend_hidden(&[3], &[n_layer + 1]),
        Err(EngineError::InvalidRequest(_))
    ));
    assert!(matches!(
        s.extend_hidden(&[3; 7], &[n_layer]),
        Err(EngineError::ContextOverflow { .. })
    ));
    assert!(s.extend_hidden(&[], &[n_layer]).is_err());
    let vocab = model.hparams.n_vocab as u32;
    assert!(s.extend_hidden(&[vocab], &[n_layer]).is_err());
    assert_eq!(s.tokens(), &[1, 2]);
}
