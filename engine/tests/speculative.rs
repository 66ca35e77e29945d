//! Speculative decoding changes how many passes a reply takes, never the reply: verified rows
//! carry the bits single steps would, a greedy reply is the plain one token for token whatever
//! the drafter proposes, the cache after a reply is the one plain decoding leaves, sampled
//! replies keep their distribution, and an observer reads every kept token in order.

use std::ops::ControlFlow;
use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::speculative::draft::{check_compatible, DraftModel};
use kostant_engine::testing::{real_model_path, step, tiny_model_bytes, TinySpec};
use kostant_engine::{
    generate_with, ActiveAdapter, Batch, CancelHandle, Drafter, EngineError, GenerateRequest,
    Generation, Judgement, KvType, LoraAdapter, Message, Model, Observer, Outputs, Riders, Role,
    SamplingParams, Session, Speculation, StopReason,
};

fn tiny() -> Arc<Model> {
    // Heads 32 wide, so the Q8_0 cache can run too.
    let spec = TinySpec {
        n_embd: 128,
        n_head: 4,
        n_head_kv: 2,
        ..Default::default()
    };
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&spec).unwrap()).unwrap()).unwrap()
}

fn request(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        prompt,
        max_tokens,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
    }
}

/// Proposes what a known reply says next (while the reply so far follows it), with every
/// `wrong_every`-th drafted token replaced by another, so bursts are accepted in part.
struct Oracle {
    prompt_len: usize,
    reply: Vec<u32>,
    wrong_every: usize,
    drafted: usize,
}

impl Oracle {
    fn new(req: &GenerateRequest, reply: &[u32], wrong_every: usize) -> Oracle {
        Oracle {
            prompt_len: req.prompt.len(),
            reply: reply.to_vec(),
            wrong_every,
            drafted: 0,
        }
    }
}

impl Drafter for Oracle {
    fn draft(
        &mut self,
        history: &[u32],
        max: usize,
        out: &mut Vec<u32>,
    ) -> kostant_engine::Result<()> {
        out.clear();
        let so_far = &history[self.prompt_len..];
        if !self.reply.starts_with(so_far) {
            return Ok(());
        }
        for &t in self.reply[so_far.len()..].iter().take(max) {
            self.drafted += 1;
            let wrong = self.wrong_every > 0 && self.drafted.is_multiple_of(self.wrong_every);
            out.push(if wrong { (t + 1) % 200 + 3 } else { t });
        }
        Ok(())
    }
}

/// Fails on its second call, as a draft model out of room would.
struct Failing(usize);

impl Drafter for Failing {
    fn draft(
        &mut self,
        history: &[u32],
        _: usize,
        out: &mut Vec<u32>,
    ) -> kostant_engine::Result<()> {
        self.0 += 1;
        if self.0 >= 2 {
            return Err(EngineError::InvalidRequest("out of room".into()));
        }
        out.clear();
        out.push(history[history.len() - 1]);
        Ok(())
    }
}

/// Proposes tokens from a fixed pseudo-random sequence: almost all rejected.
struct Noise(u32);

impl Drafter for Noise {
    fn draft(&mut self, _: &[u32], max: usize, out: &mut Vec<u32>) -> kostant_engine::Result<()> {
        out.clear();
        for _ in 0..max {
            self.0 = self.0.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            out.push(3 + (self.0 >> 8) % 250);
        }
        Ok(())
    }
}

fn run<'a>(
    model: &Arc<Model>,
    n_ctx: usize,
    kv: KvType,
    req: &GenerateRequest,
    drafter: Option<&'a mut dyn Drafter>,
    observer: Option<&'a mut dyn Observer>,
) -> (Generation, Session, Vec<u32>) {
    let mut s = Session::with_kv_type(model.clone(), n_ctx, kv).unwrap();
    let mut shown = Vec::new();
    // Drafts of up to 4 whenever there are any: the adaptive policy would rightly decline to
    // draft for a random model, and these tests are about what drafting must not change.
    let riders = Riders {
        observer,
        drafter,
        fixed_draft: Some(4),
    };
    let g = generate_with(&mut s, req, &CancelHandle::new(), riders, |id, _| {
        shown.extend(id)
    })
    .unwrap();
    (g, s, shown)
}

/// One generation with no riders but the session's own: the adaptive policy, as chat runs it.
fn as_chat_runs_it(s: &mut Session, req: &GenerateRequest) -> Generation {
    generate_with(s, req, &CancelHandle::new(), Riders::default(), |_, _| {}).unwrap()
}

/// The logits of one more step after `token`: equal bits mean equal caches.
fn next_logits(s: &mut Session, token: u32) -> Vec<f32> {
    step(s, token).unwrap()
}

#[test]
fn verified_rows_carry_the_bits_of_single_steps() {
    let model = tiny();
    for kv in [KvType::F16, KvType::Q8_0] {
        rows_are_steps(&model, kv, None);
    }
}

#[test]
fn real_model_verified_rows_carry_the_bits_of_single_steps() {
    let real = Model::load(&real_model_path()).unwrap();
    rows_are_steps(&real, KvType::F16, None);
    // With a shipped adapter too: its side path sums a prompt in tinyBLAS's order, as ggml
    // does, but a verification pass in one row's, as a step does.
    let proofread = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/adapters/proofread/proofread.gguf");
    let adapter = LoraAdapter::load(&proofread, &real).unwrap();
    rows_are_steps(&real, KvType::F16, Some(&adapter));
    // And the prompt order really differs somewhere, or the rows-as-steps switch would be
    // untested: a prompt-ordered batch over the same tokens.
    let prompt = test_prompt();
    let mut prompt_order = Session::new(real.clone(), 128).unwrap();
    let mut out = Outputs::new();
    prompt_order
        .decode(&Batch::prompt(&prompt), &mut out)
        .unwrap();
    let all_rows = Batch {
        as_steps: false,
        ..Batch::verify(&BURST)
    };
    prompt_order.decode(&all_rows, &mut out).unwrap();
    assert!(
        (0..BURST.len()).any(|i| out.logits(i) != one_step_logits(&real, &prompt, &BURST, i)),
        "the prompt order gave the steps' bits on every row"
    );
}

const BURST: [u32; 6] = [17, 4, 250, 99, 17, 5];

fn test_prompt() -> Vec<u32> {
    (0..40).map(|i| 3 + (i * 37) % 250).collect()
}

/// A verification pass over [`BURST`] after [`test_prompt`] against single steps: every row's
/// logits and hidden states, bit for bit (under `adapter` on both sessions if given).
fn rows_are_steps(model: &Arc<Model>, kv: KvType, adapter: Option<&Arc<LoraAdapter>>) {
    let prompt = test_prompt();
    let burst = BURST;
    let taps = [0, model.hparams.n_layer];
    let mut one = Session::with_kv_type(model.clone(), 128, kv).unwrap();
    let mut many = Session::with_kv_type(model.clone(), 128, kv).unwrap();
    let mut out = Outputs::new();
    for s in [&mut one, &mut many] {
        s.set_adapter(adapter.map(|a| ActiveAdapter {
            adapter: a.clone(),
            scale: 1.0,
        }))
        .unwrap();
        s.decode(&Batch::prompt(&prompt), &mut out).unwrap();
    }
    many.decode(&Batch::verify(&burst).with_taps(&taps), &mut out)
        .unwrap();
    assert_eq!(out.rows(), burst.len());
    let width = model.hparams.n_embd;
    let mut single = Outputs::new();
    for (i, t) in burst.iter().enumerate() {
        one.decode(&Batch::step(t).with_taps(&taps), &mut single)
            .unwrap();
        assert!(
            single.last_logits() == out.logits(i),
            "{kv}, adapter {}: row {i}'s logits differ from a step's",
            adapter.is_some()
        );
        for (tap, (a, b)) in single.states().iter().zip(out.states()).enumerate() {
            assert!(
                a[..] == b[i * width..(i + 1) * width],
                "{kv}, adapter {}: row {i}'s states at tap {tap} differ from a step's",
                adapter.is_some()
            );
        }
    }
}

/// The logits of a run of single steps over `burst[..=i]` after `prompt`.
fn one_step_logits(model: &Arc<Model>, prompt: &[u32], burst: &[u32], i: usize) -> Vec<f32> {
    let mut s = Session::new(model.clone(), 128).unwrap();
    let mut out = Outputs::new();
    s.decode(&Batch::prompt(prompt), &mut out).unwrap();
    for t in &burst[..=i] {
        s.decode(&Batch::step(t), &mut out).unwrap();
    }
    out.last_logits().to_vec()
}

#[test]
fn greedy_replies_are_the_plain_reply_whatever_is_drafted() {
    let model = tiny();
    let prompt: Vec<u32> = (0..24).map(|i| 3 + (i * 11) % 40).collect();
    for kv in [KvType::F16, KvType::Q8_0] {
        // Budget, context and end of turn each end a reply: a long budget, a short one and a
        // context that fills.
        for (max_tokens, n_ctx) in [(48, 256), (5, 256), (64, 40)] {
            let req = request(prompt.clone(), max_tokens);
            let (want, mut plain, _) = run(&model, n_ctx, kv, &req, None, None);
            let mut drafters: Vec<(&str, Box<dyn Drafter>)> = vec![
                ("oracle", Box::new(Oracle::new(&req, &want.tokens, 0))),
                (
                    "oracle, every 3rd wrong",
                    Box::new(Oracle::new(&req, &want.tokens, 3)),
                ),
                ("noise", Box::new(Noise(7))),
                ("failing", Box::new(Failing(0))),
                (
                    "lookup",
                    Box::new(kostant_engine::speculative::lookup::PromptLookup::default()),
                ),
            ];
            let follow = want.tokens.last().copied().unwrap_or(5);
            let want_next = (plain.tokens().len() < n_ctx).then(|| next_logits(&mut plain, follow));
            for (name, d) in drafters.iter_mut() {
                let (got, mut s, _) = run(&model, n_ctx, kv, &req, Some(d.as_mut()), None);
                let case = format!("{name}, {kv}, budget {max_tokens}, context {n_ctx}");
                assert_eq!(got.tokens, want.tokens, "{case}");
                assert_eq!(got.reply, want.reply, "{case}");
                assert_eq!(got.stop, want.stop, "{case}");
                // The cache holds what plain decoding left, bit for bit.
                assert_eq!(
                    s.tokens().len(),
                    req.prompt.len() + want.tokens.len()
                        - usize::from(matches!(
                            want.stop,
                            StopReason::MaxTokens | StopReason::ContextFull
                        )),
                    "{case}"
                );
                if let Some(w) = &want_next {
                    assert!(
                        next_logits(&mut s, follow) == *w,
                        "{case}: the cache differs"
                    );
                }
                assert!(
                    got.stats.accepted <= got.stats.drafted,
                    "{case}: {:?}",
                    got.stats
                );
                if *name == "oracle" && want.tokens.len() > 2 {
                    assert!(got.stats.accepted > 0, "{case}: {:?}", got.stats);
                    assert!(
                        got.stats.passes < want.stats.passes,
                        "{case}: {:?}",
                        got.stats
                    );
                }
            }
        }
    }
}

/// Records each token it reads and the states it was shown.
struct Recorder {
    tokens: Vec<u32>,
    states: Vec<Vec<f32>>,
    stop_after: Option<usize>,
}

impl Observer for Recorder {
    fn taps(&self) -> Vec<usize> {
        vec![1, 2]
    }
    fn prompt(&mut self, _: &[u32], _: &[Vec<f32>]) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    fn token(&mut self, id: u32, _: &str, states: &[Vec<f32>]) -> Judgement {
        self.tokens.push(id);
        self.states.push(states.concat());
        match self.stop_after {
            Some(n) if self.tokens.len() >= n => Judgement::Stop,
            // Hold every other token: text waits for a later judgement across bursts.
            _ if self.tokens.len() % 2 == 1 => Judgement::Hold,
            _ => Judgement::Show,
        }
    }
    fn finish(&mut self) -> Judgement {
        Judgement::Show
    }
}

#[test]
fn an_observer_reads_every_kept_token_in_order_and_can_stop_mid_burst() {
    let model = tiny();
    let prompt: Vec<u32> = (0..20).map(|i| 3 + (i * 7) % 30).collect();
    let req = request(prompt, 24);
    let (want, _, _) = run(&model, 256, KvType::F16, &req, None, None);
    for stop_after in [None, Some(5), Some(9)] {
        let mut plain_obs = Recorder {
            tokens: vec![],
            states: vec![],
            stop_after,
        };
        let (plain, plain_s, plain_shown) =
            run(&model, 256, KvType::F16, &req, None, Some(&mut plain_obs));
        let mut obs = Recorder {
            tokens: vec![],
            states: vec![],
            stop_after,
        };
        let mut oracle = Oracle::new(&req, &want.tokens, 4);
        let (got, s, shown) = run(
            &model,
            256,
            KvType::F16,
            &req,
            Some(&mut oracle),
            Some(&mut obs),
        );
        assert!(got.stats.accepted > 0, "{:?}", got.stats);
        assert_eq!(got.tokens, plain.tokens, "stop after {stop_after:?}");
        assert_eq!(got.stop, plain.stop);
        assert_eq!(obs.tokens, plain_obs.tokens, "read in order");
        assert_eq!(obs.tokens, got.tokens, "every kept token was read");
        assert!(
            obs.states == plain_obs.states,
            "the states read are a step's"
        );
        assert_eq!(shown, plain_shown, "the same text was shown");
        assert_eq!(s.tokens(), plain_s.tokens());
        if stop_after.is_some() {
            assert_eq!(got.stop, StopReason::Observer);
        }
    }
}

#[test]
fn sampled_replies_keep_their_distribution() {
    let model = tiny();
    let prompt: Vec<u32> = (0..12).map(|i| 3 + (i * 13) % 50).collect();
    let sampling = |seed| SamplingParams {
        temperature: 1.5,
        top_k: 3,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        repeat_last_n: 0,
        seed,
        grammar: None,
    };
    // The drafter proposes the greedy first token and then the runner-up for the second: an
    // unlikely token, so keeping it too often or too rarely both show.
    let first = run(
        &model,
        64,
        KvType::F16,
        &request(prompt.clone(), 1),
        None,
        None,
    )
    .0
    .tokens[0];
    let mut s = Session::new(model.clone(), 64).unwrap();
    let mut after = prompt.clone();
    after.push(first);
    let logits = kostant_engine::testing::prefill(&mut s, &after).unwrap().0;
    let mut ranked: Vec<u32> = (0..logits.len() as u32).collect();
    ranked.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    let proposal = [first, ranked[1]];
    let n = 3000;
    let mut counts = std::collections::HashMap::<(Vec<u32>, bool), f64>::new();
    for seed in 0..n {
        for drafted in [false, true] {
            let req = GenerateRequest {
                sampling: sampling(seed + 1_000_000 * u64::from(drafted)),
                ..request(prompt.clone(), 2)
            };
            let mut oracle = Oracle::new(&req, &proposal, 0);
            let d: Option<&mut dyn Drafter> = match drafted {
                true => Some(&mut oracle),
                false => None,
            };
            let g = run(&model, 64, KvType::F16, &req, d, None).0;
            *counts.entry((g.tokens, drafted)).or_default() += 1.0;
        }
    }
    let pairs: std::collections::BTreeSet<&Vec<u32>> = counts.keys().map(|(t, _)| t).collect();
    let chi: f64 = pairs
        .iter()
        .map(|p| {
            let a = counts.get(&((*p).clone(), false)).copied().unwrap_or(0.0);
            let b = counts.get(&((*p).clone(), true)).copied().unwrap_or(0.0);
            (a - b).powi(2) / (a + b)
        })
        .sum();
    let df = pairs.len() - 1;
    // 3 df + 1 is about chi-square's 0.1% tail for up to 9 degrees of freedom (26.1 at 8).
    // Keeping the draft whenever the sampler would take it at least 90% of the time, never,
    // or 1.5 times too often measured 2515, 273 and 50 here.
    assert!(pairs.len() > 3, "only {} distinct replies", pairs.len());
    assert!(
        chi < 3.0 * df as f64 + 1.0,
        "chi-square {chi} over {df} degrees of freedom"
    );
}

#[test]
fn a_real_reply_that_quotes_its_input_is_the_plain_reply_in_fewer_passes() {
    let model = Model::load(&real_model_path()).unwrap();
    let text = "Return this paragraph with its typos fixed: Our team will meet on Tuesday \
        at the libary to review the budjet for next year. Please bring your notes, the \
        sales figures from last quater and any questions you have about the new travel \
        policy.";
    let prompt = model
        .chat_template
        .render(&model.tokenizer, &[Message::new(Role::User, text)], true)
        .unwrap()
        .tokens;
    let mut req = request(prompt, 64);
    let (plain, _, _) = run(&model, 512, KvType::F16, &req, None, None);
    req.speculation = Speculation::Lookup;
    let (lookup, _, _) = run(&model, 512, KvType::F16, &req, None, None);
    assert_eq!(lookup.tokens, plain.tokens);
    assert!(lookup.stats.accepted > 0, "{:?}", lookup.stats);
    assert!(lookup.stats.passes < plain.stats.passes);
    eprintln!(
        "plain {} passes; lookup {} passes, {} drafted, {} accepted",
        plain.stats.passes, lookup.stats.passes, lookup.stats.drafted, lookup.stats.accepted
    );

    // The product's path: lookup with the adaptive policy (no fixed length), as chat runs it.
    let mut s = Session::new(model.clone(), 512).unwrap();
    let adaptive = as_chat_runs_it(&mut s, &req);
    assert_eq!(adaptive.tokens, plain.tokens);

    // The default model drafting for itself agrees with itself on every greedy token.
    let mut draft = DraftModel::new(model.clone(), &model, 512).unwrap();
    let (drafted, _, _) = run(&model, 512, KvType::F16, &req, Some(&mut draft), None);
    assert_eq!(drafted.tokens, plain.tokens);
    assert_eq!(drafted.stats.accepted, drafted.stats.drafted);

    // Attached to the session (`--draft-model`), it drafts in lookup's place, and it stays
    // attached after the reply for the next one.
    let mut s = Session::new(model.clone(), 512).unwrap();
    let draft = DraftModel::new(model.clone(), &model, 512).unwrap();
    s.set_drafter(Some(Box::new(draft)));
    let riders = Riders {
        fixed_draft: Some(4),
        ..Riders::default()
    };
    let attached = generate_with(&mut s, &req, &CancelHandle::new(), riders, |_, _| {}).unwrap();
    assert_eq!(attached.tokens, plain.tokens);
    assert!(attached.stats.drafted > 0, "{:?}", attached.stats);
    assert_eq!(attached.stats.accepted, attached.stats.drafted);
    assert!(s.has_drafter());
    // Plain decoding never drafts, drafter or not.
    req.speculation = Speculation::Off;
    let off = as_chat_runs_it(&mut s, &req);
    assert_eq!((off.tokens, off.stats.drafted), (plain.tokens, 0));
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused() {
    let real = Model::load(&real_model_path()).unwrap();
    let err = DraftModel::new(tiny(), &real, 64).err().expect("refused");
    assert!(matches!(err, EngineError::InvalidRequest(_)), "{err}");
    assert!(err.to_string().contains("vocabulary"), "{err}");
    assert!(check_compatible(&real, &real).is_ok());
}
