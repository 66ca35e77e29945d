//! The repetition penalty reads the reply so far, never the prompt: the prompt holds the
//! user's words, which proofread and rewrite must keep (scripts/adapters/README.md,
//! "Repetition penalty").

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{
    generate, CancelHandle, GenerateRequest, Model, SamplingParams, Session, Speculation,
};

fn tiny() -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&TinySpec::default()).unwrap()).unwrap())
        .unwrap()
}

fn reply(model: &Arc<Model>, prompt: &[u32], max: usize, penalty: f32) -> Vec<u32> {
    let req = GenerateRequest {
        prompt: prompt.to_vec(),
        max_tokens: max,
        sampling: SamplingParams {
            repeat_penalty: penalty,
            repeat_last_n: 64,
            ..SamplingParams::greedy()
        },
        speculation: Speculation::Off,
    };
    let mut s = Session::new(model.clone(), 256).unwrap();
    generate(&mut s, &req, &CancelHandle::new(), |_, _| {})
        .unwrap()
        .tokens
}

#[test]
fn a_token_of_the_prompt_is_not_penalised_as_a_repeat() {
    let model = tiny();
    // A prompt that holds the token greedy decoding picks first: the model's own greedy
    // continuation of a seed, cut before its last token (a random tiny model repeats itself).
    let seed: Vec<u32> = (0..8).map(|i| 3 + (i * 37) % 200).collect();
    let run_on = reply(&model, &seed, 24, 1.0);
    let (prompt, first) = (1..run_on.len())
        .map(|k| {
            let mut p = seed.clone();
            p.extend_from_slice(&run_on[..k]);
            (p, run_on[k])
        })
        .find(|(p, next)| p.contains(next))
        .expect("a greedy run of a random model repeats a token");
    assert_eq!(reply(&model, &prompt, 1, 1.0), [first]);
    // A penalty of 100 would push `first` far down if the prompt counted: it does not.
    assert_eq!(reply(&model, &prompt, 1, 100.0), [first]);
    // It does count within the reply: greedy with no penalty repeats itself somewhere in a
    // long reply, and with a huge one no reply token repeats an earlier one.
    let plain = reply(&model, &prompt, 24, 1.0);
    assert!(
        (1..plain.len()).any(|i| plain[..i].contains(&plain[i])),
        "the plain reply never repeats: nothing to penalise {plain:?}"
    );
    let long = reply(&model, &prompt, 24, 100.0);
    for (i, t) in long.iter().enumerate() {
        assert!(
            !long[..i].contains(t),
            "token {t} repeated at {i}: {long:?}"
        );
    }
}
