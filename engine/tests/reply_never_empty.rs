//! A reply is never empty: where the model's likeliest first token ends the reply, generation
//! starts it with the likeliest other token instead, with and without drafting.

use kostant_engine::gguf::Gguf;
use kostant_engine::sampling::argmax;
use kostant_engine::testing::{prefill, sample_tokens, tiny_model_bytes, TinySpec};
use kostant_engine::{
    generate, CancelHandle, GenerateRequest, Model, SamplingParams, Session, Speculation,
};

#[test]
fn a_reply_whose_likeliest_first_token_ends_it_still_says_something() {
    let model = Model::from_gguf(
        Gguf::from_bytes(tiny_model_bytes(&TinySpec::default()).unwrap()).unwrap(),
    )
    .unwrap();
    let stops = model.tokenizer.end_of_generation_ids();
    assert!(!stops.is_empty());
    // A prompt after which the random model's likeliest token is an end token.
    let found = (0..4000u32).find_map(|salt| {
        let prompt = sample_tokens(6, salt);
        let mut session = Session::new(model.clone(), 64).unwrap();
        let (logits, _) = prefill(&mut session, &prompt).unwrap();
        stops.contains(&argmax(&logits)).then_some((prompt, logits))
    });
    let (prompt, mut logits) = found.expect("some prompt of the tiny model ends at once");
    for &s in &stops {
        logits[s as usize] = f32::NEG_INFINITY;
    }
    let want_first = argmax(&logits);
    for speculation in [Speculation::Off, Speculation::Lookup] {
        let req = GenerateRequest {
            prompt: prompt.clone(),
            max_tokens: 4,
            sampling: SamplingParams::greedy(),
            speculation,
        };
        let mut session = Session::new(model.clone(), 64).unwrap();
        let out = generate(&mut session, &req, &CancelHandle::new(), |_, _| {}).unwrap();
        assert_eq!(out.tokens.first(), Some(&want_first), "{speculation:?}");
    }
}
