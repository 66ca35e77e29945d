//! What the guard sees while a reply streams, for training: the chat model's own greedy reply
//! to a training prompt, read the way [`crate::ReplyScreen`] reads it when riding on the chat's
//! pass (features from the start of the user's message, or of its last window when it is
//! longer than one, through the reply so far), taken at every point where the screen would
//! judge it.
//!
//! Why: a head shown only users' messages has never seen a conversation in which the assistant
//! has begun to answer. On replies such a head is out of its depth and saturates (it scores
//! most replies to benign-but-edgy questions at 1.0 and stops them). Each checkpoint is
//! labelled with its prompt's label: the reply to a harmful request belongs to a harmful
//! conversation whatever it says so far, and the reply to a safe one is safe.

use std::ops::ControlFlow;
use std::sync::Arc;

use kostant_engine::{
    generate_observed, CancelHandle, GenerateRequest, Judgement, Model, Observer, SamplingParams,
    Session, Speculation,
};

use crate::guard::ends_sentence;
use crate::reader::{frame_message, window_ranges, FeatureSpec, Features};
use crate::{Result, SafetyError};

/// How replies are drawn and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReplyPlan {
    /// Most tokens generated per reply.
    pub max_tokens: usize,
    /// A checkpoint after this many tokens without one (a sentence end makes one too): the
    /// screen's own rhythm, `pipeline::OUTPUT_CHECK_EVERY`.
    pub every_tokens: usize,
}

/// Collects the features at each checkpoint of one reply.
struct Recorder {
    taps: Vec<usize>,
    /// Index, in the prompt, of the first token read: the user's message's first, or its last
    /// window's when it is longer than one.
    start: usize,
    features: Features,
    every: usize,
    since: usize,
    checkpoints: Vec<Vec<f32>>,
}

impl Observer for Recorder {
    fn taps(&self) -> Vec<usize> {
        self.taps.clone()
    }

    fn prompt(&mut self, _tokens: &[u32], states: &[Vec<f32>]) -> ControlFlow<()> {
        // The session was reset, so every prompt token ran and the states start at token 0.
        self.features.add(states, self.start);
        ControlFlow::Continue(())
    }

    fn token(&mut self, _id: u32, text: &str, states: &[Vec<f32>]) -> Judgement {
        self.features.add(states, 0);
        self.since += 1;
        if ends_sentence(text) || self.since >= self.every {
            self.take();
        }
        // Training only records: the text goes nowhere, so everything may pass.
        Judgement::Show
    }

    fn finish(&mut self) -> Judgement {
        Judgement::Show
    }
}

impl Recorder {
    fn take(&mut self) {
        if let Some(v) = self.features.vector() {
            self.checkpoints.push(v);
        }
        self.since = 0;
    }
}

/// Generates the chat model's greedy reply to `message` (the conversation framed by
/// `spec.system_prompt`) and returns the features at each of its checkpoints, the last one at
/// the reply's end. Empty when the model answers with nothing at all.
pub fn reply_checkpoints(
    session: &mut Session,
    spec: &FeatureSpec,
    message: &str,
    plan: ReplyPlan,
) -> Result<Vec<Vec<f32>>> {
    let model = session.model().clone();
    let (prompt, start) = frame_message(&model, &spec.system_prompt, message)?;
    if prompt.len() + plan.max_tokens > session.n_ctx() {
        return Err(SafetyError::Head(format!(
            "a message of {} tokens and its reply do not fit the {}-token context",
            prompt.len(),
            session.n_ctx()
        )));
    }
    // The screen reads the reply on from the message's last window (`ReplyScreen`).
    let from = window_ranges(start, prompt.len(), spec.window)
        .last()
        .map_or(start, |w| w.start);
    let mut recorder = Recorder {
        taps: spec.taps.clone(),
        start: from,
        features: Features::new(spec.taps.len(), model.hparams.n_embd),
        every: plan.every_tokens.max(1),
        since: 0,
        checkpoints: Vec::new(),
    };
    let req = GenerateRequest {
        prompt,
        max_tokens: plan.max_tokens,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
    };
    session.reset();
    let cancel = CancelHandle::new();
    generate_observed(session, &req, &cancel, Some(&mut recorder), |_, _| {})?;
    if recorder.since > 0 {
        recorder.take();
    }
    Ok(recorder.checkpoints)
}

/// A session long enough for any message window plus a reply under `plan`.
pub fn reply_session(model: &Arc<Model>, spec: &FeatureSpec, plan: ReplyPlan) -> Result<Session> {
    // The system prompt and the template's markers fit in 256 tokens with room to spare.
    Ok(Session::new(
        model.clone(),
        spec.window + 256 + plan.max_tokens + 1,
    )?)
}
