//! The Q8_0 kv cache against the f16 one: the same model and tokens, run through both, must
//! give close logits (the codes round keys and values by at most half a step of their block's
//! `max|x| / 127`), on a tiny random model and on the real default model.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::sampling::argmax;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{EngineError, KvType, Message, Model, Role, Session};

fn tiny(spec: &TinySpec) -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(spec).unwrap()).unwrap()).unwrap()
}

/// Heads 32 wide: one Q8_0 block each.
fn spec_32() -> TinySpec {
    TinySpec {
        n_embd: 128,
        n_head: 4,
        n_head_kv: 2,
        ..Default::default()
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn spread(a: &[f32]) -> f32 {
    let (lo, hi) = a
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    hi - lo
}

/// Logits after a batched prefill and after each of a few single-token steps.
fn run(model: &Arc<Model>, kv: KvType, prompt: &[u32], steps: &[u32]) -> Vec<Vec<f32>> {
    let mut s = Session::with_kv_type(model.clone(), 256, kv).unwrap();
    assert_eq!(s.kv_type(), kv);
    let mut out = vec![kostant_engine::testing::prefill(&mut s, prompt).unwrap().0];
    for &t in steps {
        out.push(kostant_engine::testing::step(&mut s, t).unwrap());
    }
    out
}

#[test]
fn tiny_model_q8_0_logits_stay_close_to_f16() {
    let model = tiny(&spec_32());
    let prompt: Vec<u32> = (0..60).map(|i| 3 + (i * 37) % 250).collect();
    let steps = [10, 200, 77, 5];
    let f16 = run(&model, KvType::F16, &prompt, &steps);
    let q8 = run(&model, KvType::Q8_0, &prompt, &steps);
    for (i, (a, b)) in f16.iter().zip(&q8).enumerate() {
        let (d, s) = (max_abs_diff(a, b), spread(a));
        eprintln!("position {i}: max |q8_0 - f16| {d}, logit spread {s}");
        assert!(
            d > 0.0,
            "position {i}: the q8_0 cache changed nothing, so it was not used"
        );
        // Measured: at most 3.5% of the spread (random weights make the logits touchy); a head
        // read at the wrong offset or an unscaled block moves them by tens of percent.
        assert!(
            d <= 0.06 * s,
            "position {i}: max diff {d} over a spread of {s}"
        );
    }
}

#[test]
fn q8_0_needs_heads_that_are_whole_blocks() {
    // The default tiny model has 16-wide heads.
    let model = tiny(&TinySpec::default());
    assert_eq!(model.hparams.head_dim, 16);
    let err = Session::with_kv_type(model.clone(), 64, KvType::Q8_0)
        .err()
        .expect("q8_0 over 16-wide heads");
    assert!(matches!(err, EngineError::InvalidRequest(_)), "{err}");
    assert!(err.to_string().contains("multiple of 32"), "{err}");
    assert_eq!(Session::new(model, 64).unwrap().kv_type(), KvType::F16);
}

#[test]
fn the_memory_plan_and_the_session_agree_on_the_q8_0_cache() {
    let model = tiny(&spec_32());
    for kv in [KvType::F16, KvType::Q8_0] {
        let s = Session::with_kv_type(model.clone(), 128, kv).unwrap();
        let plan = model.memory_plan_with_kv(128, kv);
        assert_eq!(plan.kv_type, kv);
        assert_eq!(plan.kv, s.kv_bytes(), "{kv}");
    }
}

/// Top-1 id and its lead over the runner-up.
fn top_with_margin(logits: &[f32]) -> (u32, f32) {
    let best = argmax(logits);
    let second = logits
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best as usize)
        .map(|(_, &l)| l)
        .fold(f32::NEG_INFINITY, f32::max);
    (best, logits[best as usize] - second)
}

/// A ~100-token prompt on the real model and 20 greedy tokens of the f16 cache's reply, fed
/// to both caches (teacher-forced, so one near-tie cannot send the two down different replies):
/// at each of the 21 positions the logits must stay close, and wherever the f16 cache's top
/// token leads by a clear margin the q8_0 cache must pick it too. Near-ties are left out on
/// purpose: the first position's top two are 0.1 apart, and which wins depends on the f32
/// summation order (x86 SIMD against scalar and NEON, see kostant-kernels' crate docs).
#[test]
fn real_model_q8_0_cache_agrees_with_f16() {
    let model = Model::load(&kostant_engine::testing::real_model_path()).unwrap();
    let question = "I am planning a small vegetable garden behind my house. The soil is \
        heavy clay, the spot gets about six hours of sun in summer, and I have never grown \
        anything before. Which three vegetables should a beginner start with, when should I \
        plant them, and how do I improve the clay so the roots do not rot after heavy rain?";
    let prompt = model
        .chat_template
        .render(
            &model.tokenizer,
            &[Message::new(Role::User, question)],
            true,
        )
        .unwrap()
        .tokens;
    assert!(prompt.len() >= 90, "prompt of {} tokens", prompt.len());
    let mut f16 = Session::with_kv_type(model.clone(), 512, KvType::F16).unwrap();
    let mut q8 = Session::with_kv_type(model.clone(), 512, KvType::Q8_0).unwrap();
    let (mut a, _) = kostant_engine::testing::prefill(&mut f16, &prompt).unwrap();
    let (mut b, _) = kostant_engine::testing::prefill(&mut q8, &prompt).unwrap();
    let (mut worst, mut clear, mut kept) = (0.0f32, 0, 0);
    for position in 0..=20 {
        let d = max_abs_diff(&a, &b);
        let (top, margin) = top_with_margin(&a);
        eprintln!(
            "position {position}: max |q8_0 - f16| {d:.3} (spread {:.1}), f16 top {top} by {margin:.3}, q8_0 top {}",
            spread(&a),
            argmax(&b)
        );
        assert!(
            d > 0.0,
            "position {position}: the q8_0 cache changed nothing, so it was not used"
        );
        worst = worst.max(d);
        // A lead of 2 logits is more than the largest difference measured (1.81, scalar order).
        if margin > 2.0 {
            clear += 1;
            kept += usize::from(argmax(&b) == top);
        }
        if position < 20 {
            a = kostant_engine::testing::step(&mut f16, top).unwrap();
            b = kostant_engine::testing::step(&mut q8, top).unwrap();
        }
    }
    // Measured up to 1.81 over a spread of 34 (scalar order; 0.85 in x86 SIMD order). That is the
    // format's rounding, not the kernels': rounding the keys and values through Q8_0 but
    // attending over them with the f16 path moved the same logits by up to 1.05. A head read at
    // the wrong offset or an unscaled block moves them by several logits.
    assert!(worst < 2.5, "max logit difference {worst}");
    assert!(
        clear >= 5,
        "only {clear} of 21 positions have a clear top token"
    );
    assert_eq!(kept, clear, "the q8_0 cache changed a clear top token");
}

/// Perplexity of the real model over the first 192 tokens of assets/evals/perplexity.txt from
/// a cleared cache, with each cache type: the q8_0 cache may cost at most 2% of it. (Over 1021
/// tokens in windows of 512 it measured 22.2265 with f16 and 22.2583 with q8_0, +0.14%.)
#[test]
fn real_model_perplexity_q8_0_within_two_percent_of_f16() {
    let model = Model::load(&kostant_engine::testing::real_model_path()).unwrap();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/evals/perplexity.txt"),
    )
    .unwrap();
    let ids = model.tokenizer.encode(&text, false).unwrap();
    let ids = &ids[..ids.len().min(192)];
    let perplexity = |kv: KvType| {
        let mut s = Session::with_kv_type(model.clone(), 256, kv).unwrap();
        let mut logits = kostant_engine::testing::prefill(&mut s, &ids[..1])
            .unwrap()
            .0;
        let mut total = 0.0f64;
        for (i, &t) in ids[1..].iter().enumerate() {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
            total += -(logits[t as usize] as f64 - max - sum.ln());
            if i + 2 < ids.len() {
                logits = kostant_engine::testing::step(&mut s, t).unwrap();
            }
        }
        (total / (ids.len() - 1) as f64).exp()
    };
    let (f16, q8) = (perplexity(KvType::F16), perplexity(KvType::Q8_0));
    assert!(f16.is_finite() && f16 > 1.0, "f16 perplexity {f16}");
    assert!(
        (q8 / f16 - 1.0).abs() < 0.02,
        "perplexity f16 {f16:.4}, q8_0 {q8:.4}"
    );
    eprintln!(
        "perplexity over {} tokens: f16 {f16:.4}, q8_0 {q8:.4}",
        ids.len()
    );
}
