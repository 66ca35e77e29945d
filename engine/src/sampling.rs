//! Picks the next token from the logits: repetition penalty, then top-k, top-p (nucleus) and
//! min-p truncation, then temperature and a draw from a seeded RNG. Temperature 0 is greedy.
//! With a grammar, only tokens the grammar allows may come out (see [`Sampler::sample`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::grammar::constraint::Constraint;
use crate::grammar::{Grammar, GrammarState, GrammarVocab};
use crate::model::Model;
use crate::{EngineError, Result};

/// How the next token is chosen. The grammar sits here, with the other rules of the choice (as
/// in llama.cpp's sampler chain): its state starts afresh with each [`Sampler`], that is with
/// each generation, and moves with every token the sampler chooses.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 picks the most likely token every time (deterministic).
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probabilities add up to at least p (1 = off).
    pub top_p: f32,
    /// Drop tokens less likely than min_p times the most likely one (0 = off).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recently seen tokens by this (1 = off).
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
    /// Only text this grammar accepts may be generated, and the reply ends only where it may.
    pub grammar: Option<Arc<Grammar>>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.1,
            repeat_last_n: 64,
            seed: 0,
            grammar: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding with no penalty: what golden tests and `--temperature 0` use.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            seed: 0,
            grammar: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(EngineError::InvalidRequest(what));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top-p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min-p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(format!(
                "repeat penalty must be > 0, got {}",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: SmallRng,
    /// Candidates and their probabilities, kept between calls so sampling a token allocates
    /// nothing once they have grown to the vocabulary.
    cand: Vec<(u32, f32)>,
    probs: Vec<f32>,
    seen: Vec<u32>,
    /// The grammar's state, when the parameters have a grammar.
    constraint: Option<Constraint>,
    grammar_time: Duration,
    masks: usize,
}

impl Sampler {
    /// A sampler without a grammar: parameters with one need the model's vocabulary
    /// ([`Sampler::for_model`]).
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        if params.grammar.is_some() {
            return Err(EngineError::InvalidRequest(
                "a grammar needs the model's vocabulary: make the sampler with Sampler::for_model"
                    .into(),
            ));
        }
        Sampler::build(params, None)
    }

    /// A sampler for `model`'s tokens, with the parameters' grammar if they have one.
    pub fn for_model(params: SamplingParams, model: &Model) -> Result<Sampler> {
        let vocab = params.grammar.as_ref().map(|_| model.grammar_vocab());
        Sampler::build(params, vocab)
    }

    /// A sampler over `vocab`'s tokens, with the parameters' grammar if they have one.
    pub fn with_vocab(params: SamplingParams, vocab: Arc<GrammarVocab>) -> Result<Sampler> {
        Sampler::build(params, Some(vocab))
    }

    fn build(params: SamplingParams, vocab: Option<Arc<GrammarVocab>>) -> Result<Sampler> {
        params.validate()?;
        let rng = SmallRng::seed_from_u64(params.seed);
        let constraint = match (&params.grammar, vocab) {
            (Some(g), Some(v)) => Some(Constraint::new(g.clone(), v)),
            _ => None,
        };
        Ok(Sampler {
            seen: Vec::with_capacity(params.repeat_last_n.min(1 << 16)),
            params,
            rng,
            cand: Vec::new(),
            probs: Vec::new(),
            constraint,
            grammar_time: Duration::ZERO,
            masks: 0,
        })
    }

    /// Where the generation stands in the grammar, if there is one.
    pub fn grammar_state(&self) -> Option<&GrammarState> {
        self.constraint.as_ref().map(Constraint::state)
    }

    /// How many of `drafts`, in order, the grammar allows after the tokens chosen so far (all
    /// of them without a grammar): a drafted token it refuses can never be accepted.
    pub fn grammar_prefix(&mut self, drafts: &[u32]) -> usize {
        match self.constraint.as_mut() {
            Some(c) => c.allowed_prefix(drafts),
            None => drafts.len(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Chooses a token. `recent` is the conversation so far (prompt and reply), newest last.
    pub fn sample(&mut self, logits: &mut [f32], recent: &[u32]) -> u32 {
        self.choose(logits, recent, None)
    }

    /// [`Sampler::sample`] where a drafter has proposed `draft` for this position (speculative
    /// sampling, Leviathan et al. 2023, with a proposal that is sure of its token): keeps
    /// `draft` with the probability the sampler gives it, and otherwise draws from the rest of
    /// the distribution, renormalised. Each token comes out exactly as often as
    /// [`Sampler::sample`] would pick it; greedy, it is the same argmax.
    pub fn sample_or_accept(&mut self, logits: &mut [f32], recent: &[u32], draft: u32) -> u32 {
        self.choose(logits, recent, Some(draft))
    }

    fn choose(&mut self, logits: &mut [f32], recent: &[u32], draft: Option<u32>) -> u32 {
        let p = &self.params;
        apply_repeat_penalty(
            logits,
            recent,
            p.repeat_penalty,
            p.repeat_last_n,
            &mut self.seen,
        );
        match self.constraint.take() {
            None => self.pick(logits, draft),
            Some(mut c) => {
                let id = self.pick_allowed(&mut c, logits, draft);
                self.constraint = Some(c);
                id
            }
        }
    }

    /// The choice under a grammar, made as llama.cpp makes it: the token chosen without the
    /// grammar stands if the grammar allows it (testing one token costs far less than masking
    /// the vocabulary); otherwise the grammar masks the logits and the choice is made again.
    /// Greedy, that is the likeliest token the grammar allows. When the grammar allows no
    /// token with a finite logit, the reply ends.
    fn pick_allowed(&mut self, c: &mut Constraint, logits: &mut [f32], draft: Option<u32>) -> u32 {
        let first = self.pick(logits, draft);
        // Only what the grammar adds is timed: the first choice is made with or without it.
        let start = Instant::now();
        let id = self.pick_again(c, logits, draft, first);
        self.grammar_time += start.elapsed();
        id
    }

    /// `first` if the grammar takes it, else the choice among the tokens it allows.
    fn pick_again(
        &mut self,
        c: &mut Constraint,
        logits: &mut [f32],
        draft: Option<u32>,
        first: u32,
    ) -> u32 {
        let finite = |l: &[f32], id: u32| l.get(id as usize).is_some_and(|x| x.is_finite());
        // Taking a token tests it: a refused one leaves the state as it was.
        if finite(logits, first) && c.accept(first) {
            return first;
        }
        self.masks += 1;
        c.mask(logits);
        if !logits.iter().any(|l| l.is_finite()) {
            return c.end_token().unwrap_or(first);
        }
        let id = self.pick(logits, draft);
        c.accept(id);
        id
    }

    /// Time the grammar has added to choosing tokens so far (testing the unconstrained choice,
    /// masking when it was refused, choosing again), and how many choices needed a mask.
    pub fn grammar_cost(&self) -> (Duration, usize) {
        (self.grammar_time, self.masks)
    }

    /// The sampling chain without a grammar.
    fn pick(&mut self, logits: &mut [f32], draft: Option<u32>) -> u32 {
        let p = &self.params;
        if p.temperature == 0.0 {
            return argmax(logits);
        }

        // Candidates sorted by logit, most likely first, cut by top-k before any softmax.
        let (cand, probs) = (&mut self.cand, &mut self.probs);
        cand.clear();
        cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l)),
        );
        if cand.is_empty() {
            return argmax(logits);
        }
        let k = if p.top_k == 0 {
            cand.len()
        } else {
            p.top_k.min(cand.len())
        };
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(k);
        }
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));

        // Truncation is decided on the untempered distribution, as llama.cpp's default chain does.
        softmax_of(cand, 1.0, probs);
        let mut keep = cand.len();
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, &pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p;
            keep = keep.min(probs.iter().take_while(|&&pr| pr >= floor).count().max(1));
        }
        cand.truncate(keep.max(1));

        softmax_of(cand, p.temperature, probs);
        let Some(d) = draft else {
            return draw(cand, probs, None, self.rng.gen());
        };
        let p_draft = cand.iter().position(|c| c.0 == d).map_or(0.0, |i| probs[i]);
        if self.rng.gen::<f32>() < p_draft {
            return d;
        }
        let r = self.rng.gen::<f32>() * (1.0 - p_draft);
        draw(cand, probs, Some(d), r)
    }
}

/// The candidate whose probability interval holds `r` (in `[0, total)`), skipping `skip`.
fn draw(cand: &[(u32, f32)], probs: &[f32], skip: Option<u32>, mut r: f32) -> u32 {
    let mut last = cand[0].0;
    for (&(id, _), &pr) in cand.iter().zip(probs) {
        if Some(id) == skip {
            continue;
        }
        if r < pr {
            return id;
        }
        r -= pr;
        last = id;
    }
    // Rounding left `r` past the end: the last candidate drawn from.
    last
}

/// Penalizes each distinct token of the last `last_n` of `recent` once. `seen` is scratch.
fn apply_repeat_penalty(
    logits: &mut [f32],
    recent: &[u32],
    penalty: f32,
    last_n: usize,
    seen: &mut Vec<u32>,
) {
    if penalty == 1.0 || last_n == 0 {
        return;
    }
    let window = &recent[recent.len().saturating_sub(last_n)..];
    seen.clear();
    seen.extend_from_slice(window);
    seen.sort_unstable();
    seen.dedup();
    for &t in seen.iter() {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

/// Index of the largest logit; the first one wins a tie, so greedy decoding is reproducible.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The candidates' probabilities at `temperature`, into `probs`.
fn softmax_of(cand: &[(u32, f32)], temperature: f32, probs: &mut Vec<f32>) {
    let max = cand[0].1;
    probs.clear();
    probs.extend(cand.iter().map(|&(_, l)| ((l - max) / temperature).exp()));
    let sum: f32 = probs.iter().sum();
    for p in probs.iter_mut() {
        *p /= sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, -1.0, 2.9]
    }

    #[test]
    fn greedy_picks_the_largest_logit() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&mut logits(), &[]), 1);
    }

    #[test]
    fn repeat_penalty_can_change_the_greedy_choice() {
        let mut p = SamplingParams::greedy();
        p.repeat_penalty = 1.5;
        p.repeat_last_n = 8;
        let mut s = Sampler::new(p).unwrap();
        assert_eq!(s.sample(&mut logits(), &[1]), 4);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let p = SamplingParams {
            temperature: 5.0,
            top_k: 1,
            seed: 7,
            ..SamplingParams::default()
        };
        let mut s = Sampler::new(p).unwrap();
        for _ in 0..50 {
            assert_eq!(s.sample(&mut logits(), &[]), 1);
        }
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // Token 1 alone holds well over half the mass; top_p = 0.5 must keep only it.
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            min_p: 0.0,
            repeat_penalty: 1.0,
            ..Default::default()
        };
        let mut s = Sampler::new(p).unwrap();
        let mut l = vec![0.0, 10.0, 1.0, 1.0];
        for _ in 0..50 {
            assert_eq!(s.sample(&mut l.clone(), &[]), 1);
        }
        l[1] = 0.0; // flat: every token can come out
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            seen.insert(s.sample(&mut l.clone(), &[]));
        }
        assert!(seen.len() > 1);
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            repeat_penalty: 1.0,
            seed: 3,
            ..Default::default()
        };
        let mut s = Sampler::new(p).unwrap();
        let l = vec![5.0, 5.0, 0.0, 0.0];
        for _ in 0..100 {
            assert!(s.sample(&mut l.clone(), &[]) < 2);
        }
    }

    #[test]
    fn same_seed_same_choices() {
        let p = SamplingParams {
            temperature: 1.0,
            seed: 42,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        };
        let draw = |p: SamplingParams| {
            let mut s = Sampler::new(p).unwrap();
            (0..30)
                .map(|_| s.sample(&mut [0.1, 0.2, 0.3, 0.2], &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(p.clone()), draw(p));
    }

    #[test]
    fn bad_parameters_are_rejected() {
        for p in [
            SamplingParams {
                temperature: -1.0,
                ..Default::default()
            },
            SamplingParams {
                temperature: f32::NAN,
                ..Default::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..Default::default()
            },
            SamplingParams {
                min_p: 2.0,
                ..Default::default()
            },
            SamplingParams {
                repeat_penalty: 0.0,
                ..Default::default()
            },
        ] {
            assert!(Sampler::new(p).is_err());
        }
    }

    /// Counts of each of 6 tokens over `n` draws.
    fn histogram(mut pick: impl FnMut() -> u32, n: usize) -> [f64; 6] {
        let mut h = [0.0; 6];
        for _ in 0..n {
            h[pick() as usize] += 1.0;
        }
        h
    }

    /// Two-sample chi-square statistic over the categories either sample saw.
    fn chi_square(a: &[f64; 6], b: &[f64; 6]) -> f64 {
        a.iter()
            .zip(b)
            .filter(|(x, y)| **x + **y > 0.0)
            .map(|(x, y)| (x - y).powi(2) / (x + y))
            .sum()
    }

    #[test]
    fn accepting_drafts_keeps_the_distribution() {
        let params = SamplingParams {
            temperature: 0.8,
            top_k: 0,
            top_p: 0.97,
            min_p: 0.0,
            repeat_penalty: 1.3,
            repeat_last_n: 8,
            seed: 7,
            grammar: None,
        };
        let logits = [1.0f32, 2.0, 0.5, 1.8, -1.0, -4.0];
        let recent = [3u32, 3, 1];
        let n = 100_000;
        let mut plain = Sampler::new(params.clone()).unwrap();
        let reference = histogram(|| plain.sample(&mut logits.clone(), &recent), n);
        // A likely draft, an unlikely one and one the nucleus cuts.
        for draft in [1u32, 2, 5] {
            let mut s = Sampler::new(SamplingParams {
                seed: 100 + u64::from(draft),
                ..params.clone()
            })
            .unwrap();
            let got = histogram(
                || s.sample_or_accept(&mut logits.clone(), &recent, draft),
                n,
            );
            let chi = chi_square(&reference, &got);
            // 5 degrees of freedom: 20.5 is the 0.1% tail. Keeping every draft, or never
            // keeping one, moves the statistic into the thousands.
            assert!(
                chi < 20.5,
                "draft {draft}: chi-square {chi}, {reference:?} vs {got:?}"
            );
        }
        // The cut token stays cut.
        assert_eq!(reference[5], 0.0);
    }

    #[test]
    fn a_greedy_sampler_accepts_only_the_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        let logits = [0.1f32, 0.9, 0.3];
        assert_eq!(s.sample_or_accept(&mut logits.clone(), &[], 1), 1);
        assert_eq!(s.sample_or_accept(&mut logits.clone(), &[], 2), 1);
    }
}
