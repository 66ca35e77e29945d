//! Generation under a grammar on a tiny random model (whose tokens are single bytes, so UTF-8
//! characters split across tokens all the time): sampled replies are always sentences of the
//! grammar, JSON schema replies parse and validate, speculative decoding gives the plain reply
//! and never verifies a draft the grammar refuses, and a grammar that allows nothing more ends
//! the reply.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{sample_tokens, tiny_model_bytes, TinySpec};
use kostant_engine::{
    generate, generate_with, CancelHandle, Drafter, GenerateRequest, Generation, Grammar, Model,
    Riders, SamplingParams, Session, Speculation, StopReason,
};

fn tiny() -> Arc<Model> {
    let spec = TinySpec::default();
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&spec).unwrap()).unwrap()).unwrap()
}

fn request(grammar: &Grammar, sampling: SamplingParams, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        prompt: sample_tokens(6, 1),
        max_tokens,
        sampling: SamplingParams {
            grammar: Some(Arc::new(grammar.clone())),
            ..sampling
        },
        speculation: Speculation::Off,
    }
}

fn run(model: &Arc<Model>, req: &GenerateRequest) -> Generation {
    let mut s = Session::new(model.clone(), 2048).unwrap();
    generate(&mut s, req, &CancelHandle::new(), |_, _| {}).unwrap()
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingParams::default()
    }
}

/// Whether `text` is a whole sentence of `g`.
fn matches(g: &Grammar, text: &str) -> bool {
    let mut s = kostant_engine::grammar::GrammarState::new(Arc::new(g.clone()));
    s.advance(text.as_bytes()) && s.can_end()
}

#[test]
fn sampled_replies_are_sentences_of_the_grammar() {
    let model = tiny();
    let g = Grammar::parse(
        "root ::= word (\" \" word){2}\nword ::= [a-zé€]{1,5} | \"«\" [0-9]{2} \"»\"",
    )
    .unwrap();
    for seed in 0..6 {
        let r = run(&model, &request(&g, sampled(seed), 200));
        assert_eq!(r.stop, StopReason::EndOfTurn, "{:?}", r.reply);
        assert!(matches(&g, &r.reply), "seed {seed}: {:?}", r.reply);
    }
}

/// A reply to the person schema: the required keys, the right types, the counts.
fn check_person(v: &serde_json::Value) -> Result<(), String> {
    let o = v.as_object().ok_or("not an object")?;
    let name = o.get("name").and_then(|n| n.as_str()).ok_or("no name")?;
    if name.chars().count() > 24 {
        return Err(format!("name too long: {name}"));
    }
    o.get("age")
        .and_then(|a| a.as_i64())
        .ok_or("age not an integer")?;
    let langs = o
        .get("languages")
        .and_then(|l| l.as_array())
        .ok_or("no languages")?;
    if !(1..=3).contains(&langs.len()) || langs.iter().any(|l| !l.is_string()) {
        return Err(format!("bad languages {langs:?}"));
    }
    if o.get("employed").is_some_and(|e| !e.is_boolean()) {
        return Err("employed not a boolean".into());
    }
    if o.get("city").is_some_and(|c| !c.is_string()) {
        return Err("city not a string".into());
    }
    let known = ["name", "age", "city", "languages", "employed"];
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("unexpected key {k}")),
        None => Ok(()),
    }
}

#[test]
fn json_schema_replies_parse_and_validate() {
    let model = tiny();
    let schema = include_str!("fixtures/grammars/person.schema.json");
    let g = Grammar::from_json_schema(schema).unwrap();
    for seed in 0..5 {
        let r = run(&model, &request(&g, sampled(seed), 1500));
        assert_eq!(r.stop, StopReason::EndOfTurn, "{:?}", r.reply);
        let v: serde_json::Value = serde_json::from_str(&r.reply)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", r.reply));
        check_person(&v).unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", r.reply));
    }
}

/// Drafts the plain reply, with every third drafted token swapped for one the grammar
/// refuses (a digit where only letters may come).
struct Spoiler {
    prompt_len: usize,
    reply: Vec<u32>,
    refused: u32,
    drafted: usize,
}

impl Drafter for Spoiler {
    fn draft(
        &mut self,
        history: &[u32],
        max: usize,
        out: &mut Vec<u32>,
    ) -> kostant_engine::Result<()> {
        out.clear();
        let done = history.len() - self.prompt_len;
        for &t in self.reply.iter().skip(done).take(max) {
            self.drafted += 1;
            out.push(if self.drafted.is_multiple_of(3) {
                self.refused
            } else {
                t
            });
        }
        Ok(())
    }
}

#[test]
fn speculative_replies_equal_plain_ones_under_a_grammar() {
    let model = tiny();
    let g = Grammar::parse("root ::= [a-z ]{1,40} \".\"").unwrap();
    let req = request(&g, SamplingParams::greedy(), 60);
    let plain = run(&model, &req);
    assert!(matches(&g, &plain.reply), "{:?}", plain.reply);
    let refused = model.tokenizer.encode("7", false).unwrap()[0];
    let mut spoiler = Spoiler {
        prompt_len: req.prompt.len(),
        reply: plain.tokens.clone(),
        refused,
        drafted: 0,
    };
    let mut s = Session::new(model.clone(), 2048).unwrap();
    let riders = Riders {
        drafter: Some(&mut spoiler),
        fixed_draft: Some(4),
        ..Riders::default()
    };
    let spec = generate_with(&mut s, &req, &CancelHandle::new(), riders, |_, _| {}).unwrap();
    assert_eq!(spec.tokens, plain.tokens);
    assert_eq!(spec.reply, plain.reply);
    // Drafts are cut at the refused token before the pass: every verified draft is one the
    // grammar allows, and the plain reply's tokens all come through.
    assert!(spec.stats.accepted > 0, "{:?}", spec.stats);
    assert!(
        spec.stats.drafted < spoiler.drafted,
        "{} verified of {} drafted",
        spec.stats.drafted,
        spoiler.drafted
    );
}

#[test]
fn a_grammar_that_is_done_ends_the_reply() {
    let model = tiny();
    let g = Grammar::parse("root ::= \"ok\"").unwrap();
    let r = run(&model, &request(&g, sampled(3), 50));
    assert_eq!((r.reply.as_str(), r.stop), ("ok", StopReason::EndOfTurn));
    // Nothing but the empty text: the reply ends at once, empty.
    let g = Grammar::parse("root ::= \"\"").unwrap();
    let r = run(&model, &request(&g, SamplingParams::greedy(), 50));
    assert_eq!((r.reply.as_str(), r.stop), ("", StopReason::EndOfTurn));
}

#[test]
fn a_sampler_with_a_grammar_needs_the_vocabulary() {
    let g = Arc::new(Grammar::parse("root ::= \"a\"").unwrap());
    let p = SamplingParams {
        grammar: Some(g),
        ..SamplingParams::greedy()
    };
    let e = kostant_engine::sampling::Sampler::new(p).err().unwrap();
    assert!(e.to_string().contains("for_model"), "{e}");
}
