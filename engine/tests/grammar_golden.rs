//! Greedy completion under a grammar equals llama.cpp's `llama-completion --grammar-file` on the
//! default model and on Gemma 3, for the grammars in fixtures/grammars (one of them written by
//! our JSON schema converter); how they were recorded: fixtures/README.md, grammar_golden.json.
//! With speculative decoding on, the replies are the same.

use std::sync::Arc;

use kostant_engine::grammar::json_schema::to_gbnf;
use kostant_engine::testing::{gemma3_model_path, real_model_path};
use kostant_engine::{
    generate_with, CancelHandle, GenerateRequest, Generation, Grammar, Model, Riders,
    SamplingParams, Session, Speculation, StopReason,
};

fn fixtures() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/grammar_golden.json")).expect("fixture is JSON")
}

fn grammar_text(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/grammars/{name}.gbnf",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The prompt as `kostant complete` (and `llama-completion`) tokenizes it: special tokens
/// parsed, BOS first when the model asks for it.
fn encode(model: &Model, text: &str) -> Vec<u32> {
    let tok = &model.tokenizer;
    let mut ids = tok.encode(text, true).unwrap();
    if let (true, Some(bos)) = (tok.add_bos(), tok.bos_id()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    ids
}

fn complete(
    model: &Arc<Model>,
    prompt: &str,
    grammar: Grammar,
    max_tokens: usize,
    speculate: bool,
) -> Generation {
    let req = GenerateRequest {
        prompt: encode(model, prompt),
        max_tokens,
        sampling: SamplingParams {
            grammar: Some(Arc::new(grammar)),
            ..SamplingParams::greedy()
        },
        speculation: if speculate {
            Speculation::Lookup
        } else {
            Speculation::Off
        },
    };
    let riders = Riders {
        fixed_draft: speculate.then_some(4),
        ..Riders::default()
    };
    let mut s = Session::new(model.clone(), 512).unwrap();
    generate_with(&mut s, &req, &CancelHandle::new(), riders, |_, _| {}).unwrap()
}

#[test]
fn the_json_fixture_grammar_is_what_our_converter_writes() {
    let schema = include_str!("fixtures/grammars/person.schema.json");
    assert_eq!(to_gbnf(schema).unwrap(), grammar_text("person"));
}

#[test]
fn greedy_text_under_a_grammar_equals_llama_cpp() {
    let fx = fixtures();
    let max = fx["max_tokens"].as_u64().unwrap() as usize;
    let smol = Model::load(&real_model_path()).unwrap();
    let gemma = Model::load(&gemma3_model_path()).unwrap();
    let mut report = Vec::new();
    for case in fx["cases"].as_array().unwrap() {
        let name = case["grammar"].as_str().unwrap();
        let model = match case["model"].as_str().unwrap() {
            m if m.starts_with("SmolLM2") => &smol,
            _ => &gemma,
        };
        let prompt = case["prompt"].as_str().unwrap();
        let want = case["text"].as_str().unwrap();
        let grammar = Grammar::parse(&grammar_text(name)).unwrap();
        // Drafts are checked on the default model only, to keep the test short.
        let runs: &[bool] = if Arc::ptr_eq(model, &smol) {
            &[false, true]
        } else {
            &[false]
        };
        for &speculate in runs {
            let g = complete(model, prompt, grammar.clone(), max, speculate);
            let ended = g.stop == StopReason::EndOfTurn;
            if g.reply != want || ended != case["ended"].as_bool().unwrap() {
                report.push(format!(
                    "{} {name} (speculative {speculate}): ours {:?} ({:?}), llama.cpp {want:?} (ended {})",
                    case["model"], g.reply, g.stop, case["ended"]
                ));
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
