//! Perplexity of the model over a fixed public-domain text (assets/evals/perplexity.txt), in
//! windows of a fixed length, each scored from a cleared cache, token by token.

use serde::{Deserialize, Serialize};

use kostant_engine::{Batch, CancelHandle, Outputs, Session};

use crate::error::{EvalError, Result};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Perplexity {
    /// Tokens scored (predicted from the ones before them in their window).
    pub tokens: usize,
    pub windows: usize,
    pub window: usize,
    pub mean_nll: f64,
    pub perplexity: f64,
}

/// -log softmax(logits)[target], in f64.
pub fn nll(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    -(logits[target] as f64 - max - sum.ln())
}

/// Scores up to `max_tokens` tokens of `text` in windows of `window` tokens.
pub fn perplexity(
    session: &mut Session,
    text: &str,
    window: usize,
    max_tokens: usize,
    cancel: &CancelHandle,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Perplexity> {
    let model = session.model().clone();
    let tok = &model.tokenizer;
    let ids = tok.encode(text, false)?;
    let window = window.clamp(2, session.n_ctx().saturating_sub(1).max(2));
    let bos = tok.bos_id().filter(|_| tok.add_bos());
    let budget = max_tokens.min(ids.len());
    let (mut total, mut scored, mut windows) = (0.0f64, 0usize, 0usize);
    let mut out = Outputs::new();
    for chunk in ids[..budget].chunks(window) {
        if chunk.len() < 2 && bos.is_none() {
            break;
        }
        session.reset();
        // With a BOS token every token of the window is predicted; without, the first is context.
        let (first, rest) = match bos {
            Some(b) => (b, chunk),
            None => (chunk[0], &chunk[1..]),
        };
        session.decode(&Batch::step(&first), &mut out)?;
        for (i, &t) in rest.iter().enumerate() {
            if cancel.is_cancelled() {
                return Err(EvalError::Cancelled);
            }
            total += nll(out.last_logits(), t as usize);
            scored += 1;
            if i + 1 < rest.len() {
                session.decode(&Batch::step(&t), &mut out)?;
            }
        }
        windows += 1;
        progress(scored, budget);
    }
    let mean = if scored == 0 {
        f64::NAN
    } else {
        total / scored as f64
    };
    Ok(Perplexity {
        tokens: scored,
        windows,
        window,
        mean_nll: mean,
        perplexity: mean.exp(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_of_uniform_and_peaked() {
        let uniform = vec![0.5f32; 8];
        assert!((nll(&uniform, 3) - 8f64.ln()).abs() < 1e-9);
        let peaked = [0.0f32, 100.0, 0.0];
        assert!(nll(&peaked, 1) < 1e-9);
        assert!(nll(&peaked, 0) > 99.0);
    }

    #[test]
    fn perplexity_on_a_tiny_model_is_finite_and_repeatable() {
        use kostant_engine::testing::{tiny_model_bytes, TinySpec};
        let bytes = tiny_model_bytes(&TinySpec::default()).unwrap();
        let model = kostant_engine::Model::from_gguf(
            kostant_engine::gguf::Gguf::from_bytes(bytes).unwrap(),
        )
        .unwrap();
        let mut s = Session::new(model, 64).unwrap();
        let cancel = CancelHandle::new();
        let text = "hello world this is a small test of the perplexity code path";
        let a = perplexity(&mut s, text, 8, 1000, &cancel, &mut |_, _| {}).unwrap();
        let b = perplexity(&mut s, text, 8, 1000, &cancel, &mut |_, _| {}).unwrap();
        assert!(
            a.tokens > 0 && a.perplexity.is_finite() && a.perplexity > 1.0,
            "{a:?}"
        );
        assert_eq!(a, b);
        cancel.cancel();
        assert!(matches!(
            perplexity(&mut s, text, 8, 1000, &cancel, &mut |_, _| {}),
            Err(EvalError::Cancelled)
        ));
    }
}
