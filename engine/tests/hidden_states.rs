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
    let all = kostant_engine::testing::hidden(&mut whole, &tokens, &taps).unwrap();
    assert_eq!(all.len(), taps.len());
    let e = model.hparams.n_embd;
    for s in &all {
        assert_eq!(s.len(), tokens.len() * e);
        assert!(s.iter().all(|v| v.is_finite()));
    }
    // Different taps see different states.
    assert!(max_diff(&all[0], &all[2]) > 1e-3);

    let mut parts = Session::new(model.clone(), 64).unwrap();
    let a = kostant_engine::testing::hidden(&mut parts, &tokens[..5], &taps).unwrap();
    let b = kostant_engine::testing::hidden(&mut parts, &tokens[5..], &taps).unwrap();
    assert_eq!(parts.tokens(), &tokens[..]);
    for t in 0..taps.len() {
        let joined: Vec<f32> = a[t].iter().chain(&b[t]).copied().collect();
        assert!(max_diff(&joined, &all[t]) < 2e-2, "tap {}", taps[t]);
    }

    // Truncating back and re-feeding gives the same states again.
    parts.truncate(5);
    assert_eq!(parts.tokens().len(), 5);
    let again = kostant_engine::testing::hidden(&mut parts, &tokens[5..], &taps).unwrap();
    for t in 0..taps.len() {
        assert!(max_diff(&again[t], &b[t]) < 1e-6);
    }
}

#[test]
fn bad_requests_change_nothing() {
    let model = tiny();
    let n_layer = model.hparams.n_layer;
    let mut s = Session::new(model.clone(), 8).unwrap();
    kostant_engine::testing::hidden(&mut s, &[1, 2], &[n_layer]).unwrap();
    assert!(matches!(
        kostant_engine::testing::hidden(&mut s, &[3], &[n_layer + 1]),
        Err(EngineError::InvalidRequest(_))
    ));
    assert!(matches!(
        kostant_engine::testing::hidden(&mut s, &[3; 7], &[n_layer]),
        Err(EngineError::ContextOverflow { .. })
    ));
    assert!(kostant_engine::testing::hidden(&mut s, &[], &[n_layer]).is_err());
    let vocab = model.hparams.n_vocab as u32;
    assert!(kostant_engine::testing::hidden(&mut s, &[vocab], &[n_layer]).is_err());
    assert_eq!(s.tokens(), &[1, 2]);
}

#[test]
fn tapped_prefill_gives_the_same_logits_and_the_states_extend_hidden_gives() {
    let model = tiny();
    let n_layer = model.hparams.n_layer;
    let taps = [1, n_layer];
    let tokens: Vec<u32> = (3..14).collect();

    let mut plain = Session::new(model.clone(), 64).unwrap();
    let (want_logits, _) = kostant_engine::testing::prefill(&mut plain, &tokens).unwrap();
    let mut reader = Session::new(model.clone(), 64).unwrap();
    let want_states = kostant_engine::testing::hidden(&mut reader, &tokens, &taps).unwrap();

    let mut tapped = Session::new(model.clone(), 64).unwrap();
    let (logits, reused, states) =
        kostant_engine::testing::prefill_tapped(&mut tapped, &tokens, &taps).unwrap();
    assert_eq!(reused, 0);
    assert_eq!(logits, want_logits, "tapping must not change the logits");
    for t in 0..taps.len() {
        assert_eq!(states[t], want_states[t], "tap {}", taps[t]);
    }

    // A second prefill that shares a prefix returns states only for the tokens it ran.
    let mut longer = tokens.clone();
    longer.extend([20, 21]);
    let (_, reused, states) =
        kostant_engine::testing::prefill_tapped(&mut tapped, &longer, &taps).unwrap();
    assert_eq!(reused, tokens.len());
    let e = model.hparams.n_embd;
    assert_eq!(states[0].len(), 2 * e);

    // One step's states equal the reader's for the same token.
    let (_, step_states) = kostant_engine::testing::step_tapped(&mut tapped, 22, &taps).unwrap();
    let more = kostant_engine::testing::hidden(&mut reader, &[20, 21, 22], &taps).unwrap();
    for t in 0..taps.len() {
        assert!(max_diff(&step_states[t], &more[t][2 * e..]) < 1e-6);
    }
}
