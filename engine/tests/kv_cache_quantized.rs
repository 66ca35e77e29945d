//! The Q8_0 and Q4_0 kv caches against the f16 one: the same model and tokens, run through
//! each, must give close logits (Q8_0 rounds keys and values by at most half a step of their
//! block's `max|x| / 127`, Q4_0 by at most a step of `max|x| / 8`), on a tiny random model and
//! on the real default model.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::sampling::argmax;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{EngineError, KvType, Message, Model, Role, Session};

fn tiny(spec: &TinySpec) -> Arc<Model> {
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(spec).unwrap()).unwrap()).unwrap()
}

/// Heads 32 wide: one block each.
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
fn tiny_model_quantized_logits_stay_close_to_f16() {
    let model = tiny(&spec_32());
    let prompt: Vec<u32> = (0..60).map(|i| 3 + (i * 37) % 250).collect();
    let steps = [10, 200, 77, 5];
    let f16 = run(&model, KvType::F16, &prompt, &steps);
    // Q8_0 measured at most 3.5% of the spread (random weights make the logits touchy); a head
    // read at the wrong offset or an unscaled block moves them by tens of percent. Q4_0 rounds
    // 16 times coarser (a step of max/8 against max/127, so up to 16x the error per value):
    // measured at most 38% of the spread (SIMD and scalar alike), so this test only tells a
    // used cache from an unused one; the real-model tests below judge the format.
    for (kv, bound) in [(KvType::Q8_0, 0.06), (KvType::Q4_0, 0.5)] {
        let q = run(&model, kv, &prompt, &steps);
        for (i, (a, b)) in f16.iter().zip(&q).enumerate() {
            let (d, s) = (max_abs_diff(a, b), spread(a));
            eprintln!("{kv} position {i}: max |{kv} - f16| {d}, logit spread {s}");
            assert!(
                d > 0.0,
                "position {i}: the {kv} cache changed nothing, so it was not used"
            );
            assert!(
                d <= bound * s,
                "{kv} position {i}: max diff {d} over a spread of {s}"
            );
        }
    }
}

#[test]
fn quantized_caches_need_heads_that_are_whole_blocks() {
    // The default tiny model has 16-wide heads.
    let model = tiny(&TinySpec::default());
    assert_eq!(model.hparams.head_dim, 16);
    for kv in [KvType::Q8_0, KvType::Q4_0] {
        let err = Session::with_kv_type(model.clone(), 64, kv)
            .err()
            .expect("a block cache over 16-wide heads");
        assert!(matches!(err, EngineError::InvalidRequest(_)), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("multiple of 32") && msg.contains(kv.name()),
            "{msg}"
        );
    }
    assert_eq!(Session::new(model, 64).unwrap().kv_type(), KvType::F16);
}

#[test]
fn the_memory_plan_and_the_session_agree_on_each_cache() {
    let model = tiny(&spec_32());
    for kv in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
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

/// How a quantized cache compared with f16 over a teacher-forced reply: the largest logit
/// difference, how many positions had a top token clear by more than the margin, and at how
/// many of those the quantized cache picked the same token.
struct Agreement {
    worst: f32,
    clear: usize,
    kept: usize,
}

/// A ~100-token prompt on the real model and 20 greedy tokens of the f16 cache's reply, fed
/// to both caches (teacher-forced, so one near-tie cannot send the two down different replies):
/// at each of the 21 positions the logits must differ (the cache was used), and wherever the
/// f16 cache's top token leads by more than `margin` the quantized cache should pick it too.
/// Near-ties are left out on purpose: the first position's top two are 0.1 apart, and which
/// wins depends on the f32 summation order (x86 SIMD against scalar and NEON, see
/// kostant-kernels' crate docs).
fn real_model_agreement(kv: KvType, margin: f32) -> Agreement {
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
    let mut q = Session::with_kv_type(model.clone(), 512, kv).unwrap();
    let (mut a, _) = kostant_engine::testing::prefill(&mut f16, &prompt).unwrap();
    let (mut b, _) = kostant_engine::testing::prefill(&mut q, &prompt).unwrap();
    let mut r = Agreement {
        worst: 0.0,
        clear: 0,
        kept: 0,
    };
    for position in 0..=20 {
        let d = max_abs_diff(&a, &b);
        let (top, lead) = top_with_margin(&a);
        eprintln!(
            "position {position}: max |{kv} - f16| {d:.3} (spread {:.1}), f16 top {top} by {lead:.3}, {kv} top {}",
            spread(&a),
            argmax(&b)
        );
        assert!(
            d > 0.0,
            "position {position}: the {kv} cache changed nothing, so it was not used"
        );
        r.worst = r.worst.max(d);
        if lead > margin {
            r.clear += 1;
            r.kept += usize::from(argmax(&b) == top);
        }
        if position < 20 {
            a = kostant_engine::testing::step(&mut f16, top).unwrap();
            b = kostant_engine::testing::step(&mut q, top).unwrap();
        }
    }
    eprintln!(
        "{kv}: worst {:.3}, {} of {} clear tops kept",
        r.worst, r.kept, r.clear
    );
    r
}

#[test]
fn real_model_q8_0_cache_agrees_with_f16() {
    // A lead of 2 logits is more than the largest difference measured (1.81, scalar order).
    let r = real_model_agreement(KvType::Q8_0, 2.0);
    // Measured up to 1.81 over a spread of 34 (scalar order; 0.85 in x86 SIMD order). That is the
    // format's rounding, not the kernels': rounding the keys and values through Q8_0 but
    // attending over them with the f16 path moved the same logits by up to 1.05. A head read at
    // the wrong offset or an unscaled block moves them by several logits.
    assert!(r.worst < 2.5, "max logit difference {}", r.worst);
    assert!(
        r.clear >= 5,
        "only {} of 21 positions have a clear top token",
        r.clear
    );
    assert_eq!(r.kept, r.clear, "the q8_0 cache changed a clear top token");
}

/// Q4_0's step is `max|x| / 8` against Q8_0's `max|x| / 127`, and the logits move about ten
/// times as far: measured up to 9.8 over spreads of 34-55 in x86 SIMD order and 12.2 in scalar
/// order (`KOSTANT_FORCE_SCALAR=1`, which also changes the f16 reply the caches are fed). So
/// a lead of 2 is not always safe: in scalar order one f16 top token leading by 3.8 changed,
/// and the test asks for most clear tops (two thirds; measured 6 of 6 SIMD, 5 of 6 scalar).
/// What catches a misread block is the bound on the difference and, more sharply, the
/// perplexity test below.
#[test]
fn real_model_q4_0_cache_mostly_agrees_with_f16() {
    let r = real_model_agreement(KvType::Q4_0, 2.0);
    assert!(r.worst < 16.0, "max logit difference {}", r.worst);
    assert!(
        r.clear >= 5,
        "only {} of 21 positions have a clear top token",
        r.clear
    );
    assert!(
        3 * r.kept >= 2 * r.clear,
        "the q4_0 cache changed {} of {} clear top tokens",
        r.clear - r.kept,
        r.clear
    );
}

/// Perplexity of the real model over the first 192 tokens of assets/evals/perplexity.txt from
/// a cleared cache, for the f16 cache and `kv`.
fn real_model_perplexity(kv: KvType) -> (f64, f64) {
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
    let (f16, q) = (perplexity(KvType::F16), perplexity(kv));
    eprintln!(
        "perplexity over {} tokens: f16 {f16:.4}, {kv} {q:.4}",
        ids.len()
    );
    assert!(f16.is_finite() && f16 > 1.0, "f16 perplexity {f16}");
    (f16, q)
}

/// The q8_0 cache may cost at most 2% of the perplexity. (Over 1021 tokens in windows of 512
/// it measured 22.2265 with f16 and 22.2583 with q8_0, +0.14%.)
#[test]
fn real_model_perplexity_q8_0_within_two_percent_of_f16() {
    let (f16, q8) = real_model_perplexity(KvType::Q8_0);
    assert!(
        (q8 / f16 - 1.0).abs() < 0.02,
        "perplexity f16 {f16:.4}, q8_0 {q8:.4}"
    );
}

/// The q4_0 cache costs far more than 2% on this model: measured +19.0% over these 192
/// tokens (28.3201 to 33.7022, x86 SIMD order; +17.1% in scalar order), which misses issue
/// 23's 2% target (docs/benchmarks-log.md, issue 23, has the suite's figure). The bound guards what
/// the format gives: a misread nibble, scale or head sends perplexity up by multiples, not
/// by a fifth.
#[test]
fn real_model_perplexity_q4_0_within_thirty_percent_of_f16() {
    let (f16, q4) = real_model_perplexity(KvType::Q4_0);
    assert!(
        (q4 / f16 - 1.0).abs() < 0.30,
        "perplexity f16 {f16:.4}, q4_0 {q4:.4}"
    );
}
