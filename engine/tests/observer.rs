//! `generate_observed`: an observer reads every token's hidden states before its text is passed
//! on, text is passed on only once a judgement covers it, and stopping withholds everything
//! not yet judged.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{
    generate, generate_observed, CancelHandle, GenerateRequest, Judgement, Model, Observer,
    SamplingParams, Session, Speculation, StopReason,
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
    fn token(&mut self, id: u32, _text: &str, states: &[Vec<f32>]) -> Judgement {
        assert_eq!(states[0].len(), self.n_embd);
        self.tokens.push(id);
        match self.stop_after {
            Some(n) if self.tokens.len() >= n => Judgement::Stop,
            _ => Judgement::Show,
        }
    }
    fn finish(&mut self) -> Judgement {
        Judgement::Show
    }
}

fn request() -> GenerateRequest {
    GenerateRequest {
        prompt: vec![1, 5, 9, 13, 17],
        max_tokens: 8,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
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
        fn token(&mut self, _: u32, _: &str, _: &[Vec<f32>]) -> Judgement {
            unreachable!("no token is sampled after the prompt was stopped")
        }
        fn finish(&mut self) -> Judgement {
            unreachable!("a generation stopped at its prompt is not judged again")
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

/// What happened, in order: a token read, a judgement, a token's text shown.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Read(u32),
    Judged(Judgement),
    Shown(Option<u32>),
}

/// Judges only every `every` tokens (holding the text between), and at the end says `last`.
struct Batcher {
    every: usize,
    since: usize,
    last: Judgement,
    log: Rc<RefCell<Vec<Step>>>,
}

impl Observer for Batcher {
    fn taps(&self) -> Vec<usize> {
        Vec::new()
    }
    fn prompt(&mut self, _: &[u32], _: &[Vec<f32>]) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    fn token(&mut self, id: u32, _: &str, _: &[Vec<f32>]) -> Judgement {
        let mut log = self.log.borrow_mut();
        log.push(Step::Read(id));
        self.since += 1;
        if self.since < self.every {
            return Judgement::Hold;
        }
        self.since = 0;
        log.push(Step::Judged(Judgement::Show));
        Judgement::Show
    }
    fn finish(&mut self) -> Judgement {
        self.log.borrow_mut().push(Step::Judged(self.last));
        self.last
    }
}

fn run_batcher(every: usize, last: Judgement) -> (Vec<Step>, kostant_engine::Generation) {
    let model = tiny();
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut obs = Batcher {
        every,
        since: 0,
        last,
        log: log.clone(),
    };
    let mut session = Session::new(model, 64).unwrap();
    let shown_log = log.clone();
    let got = generate_observed(
        &mut session,
        &request(),
        &CancelHandle::new(),
        Some(&mut obs),
        |id, _| shown_log.borrow_mut().push(Step::Shown(id)),
    )
    .unwrap();
    let steps = log.borrow().clone();
    (steps, got)
}

/// Every `Shown(id)` must come after the token was read and after a `Show` judgement made
/// after that read: no text leaves before a judgement covering it.
fn assert_every_shown_token_was_judged(steps: &[Step]) {
    let mut read_unjudged: Vec<u32> = Vec::new();
    let mut judged: Vec<u32> = Vec::new();
    for step in steps {
        match step {
            Step::Read(id) => read_unjudged.push(*id),
            Step::Judged(Judgement::Show) => judged.append(&mut read_unjudged),
            Step::Judged(_) => {}
            Step::Shown(Some(id)) => {
                let at = judged.iter().position(|j| j == id);
                assert!(
                    at.is_some(),
                    "token {id} was shown before a judgement covered it: {steps:?}"
                );
                judged.remove(at.unwrap());
            }
            Step::Shown(None) => {}
        }
    }
}

#[test]
fn held_text_is_shown_only_after_a_judgement_covers_it() {
    let (steps, got) = run_batcher(3, Judgement::Show);
    assert_every_shown_token_was_judged(&steps);
    let shown: Vec<u32> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Shown(id) => *id,
            _ => None,
        })
        .collect();
    assert_eq!(
        shown, got.tokens,
        "the final judgement releases the rest, in order"
    );
    assert_ne!(got.stop, StopReason::Observer);
    // The checker itself must be able to fail: text shown ahead of its judgement.
    let early = [
        Step::Read(4),
        Step::Shown(Some(4)),
        Step::Judged(Judgement::Show),
    ];
    let caught = std::panic::catch_unwind(|| assert_every_shown_token_was_judged(&early));
    assert!(
        caught.is_err(),
        "the checker catches text shown before its judgement"
    );
}

#[test]
fn a_final_stop_withholds_everything_held() {
    let (steps, got) = run_batcher(3, Judgement::Stop);
    assert_every_shown_token_was_judged(&steps);
    let shown = steps.iter().filter(|s| matches!(s, Step::Shown(_))).count();
    // Judged after every third token: what came after the last of those was held and never shown.
    let n = got.tokens.len();
    assert!(
        n % 3 != 0,
        "{n} tokens: the test needs some held at the end"
    );
    assert_eq!(shown, n - n % 3);
    assert_eq!(got.stop, StopReason::Observer);
}
