//! `generate_observed`: an observer reads every token's hidden states before its text is passed
//! on, and stopping it withholds the token it stopped on.

use std::ops::ControlFlow;
use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{
    generate, generate_observed, CancelHandle, GenerateRequest, Model, Observer, SamplingParams,
    Session, StopReason,
};

fn tiny() -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&TinySpec::default()).unwrap()).unwrap())
        .unwrap()
}

/// Records what it was shown; stops after `stop_after` tokens when set.
struct Recorder {
    taps: Vec<usize>,
    n_embd: usize,
    prompt_rows: usize,
    tokens: Vec<u32>,
    stop_after: Option<usize>,
}

impl Observer for Recorder {
    fn taps(&self) -> Vec<usize> {
        self.taps.clone()
    }
    fn prompt(&mut self, tokens: &[u32], states: &[Vec<f32>]) -> ControlFlow<()> {
        assert_eq!(states.len(), self.taps.len());
        assert_eq!(states[0].len(), tokens.len() * self.n_embd);
        self.prompt_rows = tokens.len();
        ControlFlow::Continue(())
    }
    fn token(&mut self, id: u32, _text: &str, states: &[Vec<f32>]) -> ControlFlow<()> {
        assert_eq!(states[0].len(), self.n_embd);
        self.tokens.push(id);
        match self.stop_after {
            Some(n) if self.tokens.len() >= n => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }
}

fn request() -> GenerateRequest {
    GenerateRequest {
        prompt: vec![1, 5, 9, 13, 17],
        max_tokens: 8,
        sampling: SamplingParams::greedy(),
    }
}

fn recorder(model: &Model, stop_after: Option<usize>) -> Recorder {
    Recorder {
        taps: vec![1],
        n_embd: model.hparams.n_embd,
        prompt_rows: 0,
        tokens: Vec::new(),
        stop_after,
    }
}

#[test]
fn an_observer_sees_every_token_and_changes_nothing() {
    let model = tiny();
    let req = request();
    let mut plain = Session::new(model.clone(), 64).unwrap();
    let want = generate(&mut plain, &req, &CancelHandle::new(), |_, _| {}).unwrap();

    let mut obs = recorder(&model, None);
    let mut session = Session::new(model.clone(), 64).unwrap();
    let mut shown = Vec::new();
    let got = generate_observed(
        &mut session,
        &req,
        &CancelHandle::new(),
        Some(&mut obs),
        |id, _| shown.extend(id),
    )
    .unwrap();
    assert_eq!(got.tokens, want.tokens);
    assert_eq!(got.stop, want.stop);
    assert_eq!(obs.prompt_rows, req.prompt.len());
    assert_eq!(obs.tokens, got.tokens, "every generated token was read");
    assert_eq!(shown, got.tokens);
}

#[test]
fn stopping_withholds_the_token_it_stopped_on() {
    let model = tiny();
    let req = request();
    let mut obs = recorder(&model, Some(3));
    let mut session = Session::new(model.clone(), 64).unwrap();
    let mut shown = Vec::new();
    let got = generate_observed(
        &mut session,
        &req,
        &CancelHandle::new(),
        Some(&mut obs),
        |id, _| shown.extend(id),
    )
    .unwrap();
    assert_eq!(got.stop, StopReason::Observer);
    assert_eq!(
        got.tokens.len(),
        3,
        "generation stops on the token the observer stopped"
    );
    assert_eq!(
        shown[..],
        got.tokens[..2],
        "the stopped-on token is never shown"
    );
}

#[test]
fn stopping_at_the_prompt_generates_nothing() {
    struct No;
    impl Observer for No {
        fn taps(&self) -> Vec<usize> {
            vec![0]
        }
        fn prompt(&mut self, _: &[u32], _: &[Vec<f32>]) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
        fn token(&mut self, _: u32, _: &str, _: &[Vec<f32>]) -> ControlFlow<()> {
            unreachable!("no token is sampled after the prompt was stopped")
        }
    }
    let model = tiny();
    let mut session = Session::new(model, 64).unwrap();
    let mut shown = 0;
    let got = generate_observed(
        &mut session,
        &request(),
        &CancelHandle::new(),
        Some(&mut No),
        |_, _| shown += 1,
    )
    .unwrap();
    assert_eq!(got.stop, StopReason::Observer);
    assert!(got.tokens.is_empty());
    assert_eq!(shown, 0);
}
