//! How many tokens to draft. A pass over 1 + k tokens costs more than a step, by how much
//! depends on the model and the CPU (BENCHMARKS.md, issue 24, `kostant bench --verify-cost`),
//! so drafting pays only when enough drafts are kept. The policy keeps two running
//! estimates, both of which only change speed, never the reply:
//! - `accept`: the chance a drafted token is kept, given the ones before it were;
//! - the time of a one-token pass and of each extra row of a verification pass, as measured,
//!   and the time the drafter takes per drafted token (next to nothing for a lookup; a step
//!   of the draft model for a draft model).
//!
//! With acceptance a, a pass over k drafts yields 1 + a + ... + a^k tokens on average; the
//! policy picks the k with the most tokens per millisecond, drafting included, and drafts
//! nothing unless that beats plain decoding by a margin.

/// Weight of each new observation in the running estimates.
const LEARNING_RATE: f64 = 0.15;

/// Drafting must promise this many times plain decoding's rate before it is tried: the
/// estimates are noisy, and open chat must not get slower.
const MARGIN: f64 = 1.1;

#[derive(Clone, Debug)]
pub struct DraftPolicy {
    /// Always this many drafts, whatever the estimates say (tests and benchmarks).
    fixed: Option<usize>,
    max: usize,
    accept: f64,
    step_ms: Option<f64>,
    /// Extra milliseconds per drafted row in a verification pass.
    row_ms: Option<f64>,
    /// Milliseconds the drafter takes per token it drafts.
    draft_ms: Option<f64>,
}

impl DraftPolicy {
    /// Up to `max` drafts a pass.
    pub fn new(max: usize) -> DraftPolicy {
        DraftPolicy {
            fixed: None,
            max: max.max(1),
            // A guess that lets a first draft be tried; the first verdicts replace it quickly.
            accept: 0.6,
            step_ms: None,
            row_ms: None,
            draft_ms: None,
        }
    }

    /// A policy that always asks for `k` drafts.
    pub fn fixed(k: usize) -> DraftPolicy {
        DraftPolicy {
            fixed: Some(k),
            ..DraftPolicy::new(k)
        }
    }

    /// Expected tokens from a pass over k drafts.
    fn yield_of(&self, k: usize) -> f64 {
        (0..=k).map(|i| self.accept.powi(i as i32)).sum()
    }

    /// Tokens to draft for the next pass: 0 means a plain step.
    pub fn get(&self) -> usize {
        if let Some(k) = self.fixed {
            return k;
        }
        // Before anything is measured, an extra row is taken to cost half a step.
        let step = self.step_ms.unwrap_or(1.0);
        let row = self.row_ms.unwrap_or(0.5 * step) + self.draft_ms.unwrap_or(0.0);
        let rate = |k: usize| self.yield_of(k) / (step + row * k as f64);
        let plain = rate(0);
        let (best, best_rate) = (1..=self.max)
            .map(|k| (k, rate(k)))
            .fold((0, plain), |a, b| if b.1 > a.1 { b } else { a });
        if best_rate > MARGIN * plain {
            best
        } else {
            0
        }
    }

    /// Learns from a settled draft: the first `accepted` of `drafted` tokens were kept (and the
    /// next, if any, was not).
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        for i in 0..drafted.min(accepted + 1) {
            let kept = if i < accepted { 1.0 } else { 0.0 };
            self.accept += LEARNING_RATE * (kept - self.accept);
        }
    }

    /// Learns what drafting `tokens` tokens took the drafter.
    pub fn drafted(&mut self, tokens: usize, ms: f64) {
        if tokens == 0 || !(ms.is_finite() && ms >= 0.0) {
            return;
        }
        let per_token = ms / tokens as f64;
        self.draft_ms = Some(
            self.draft_ms
                .map_or(per_token, |o| o + LEARNING_RATE * (per_token - o)),
        );
    }

    /// Learns what a pass over `rows` tokens took.
    pub fn timed(&mut self, rows: usize, ms: f64) {
        if !(ms.is_finite() && ms > 0.0) {
            return;
        }
        let ewma =
            |old: Option<f64>, new: f64| Some(old.map_or(new, |o| o + LEARNING_RATE * (new - o)));
        match (rows, self.step_ms) {
            (0, _) => {}
            (1, _) => self.step_ms = ewma(self.step_ms, ms),
            (_, Some(step)) => {
                let per_row = ((ms - step) / (rows - 1) as f64).max(0.0);
                self.row_ms = ewma(self.row_ms, per_row);
            }
            // A verification before any step: its rows taken as equal shares.
            (_, None) => self.step_ms = ewma(None, ms / rows as f64),
        }
    }
}

impl Default for DraftPolicy {
    /// Up to 16 drafts a pass.
    fn default() -> DraftPolicy {
        DraftPolicy::new(16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(step: f64, row: f64) -> DraftPolicy {
        let mut p = DraftPolicy::new(16);
        for _ in 0..40 {
            p.timed(1, step);
            p.timed(5, step + 4.0 * row);
        }
        p
    }

    #[test]
    fn drafts_that_keep_being_kept_earn_long_drafts() {
        let mut p = timed(8.0, 3.0);
        for _ in 0..30 {
            p.update(8, 8);
        }
        assert!(p.get() >= 8, "{p:?} drafts {}", p.get());
    }

    #[test]
    fn drafts_that_keep_failing_stop_drafting() {
        let mut p = timed(8.0, 3.0);
        for _ in 0..30 {
            p.update(2, 0);
        }
        assert_eq!(p.get(), 0, "{p:?}");
        // And come back when guesses start matching again.
        for _ in 0..30 {
            p.update(1, 1);
        }
        assert!(p.get() > 0, "{p:?}");
    }

    #[test]
    fn a_drafter_as_slow_as_the_model_never_pays() {
        // A draft model as costly as the model itself (the model drafting for itself) cannot
        // pay even when every draft is kept; one at a tenth of a step does.
        let (mut same, mut small) = (timed(8.0, 1.0), timed(8.0, 1.0));
        for _ in 0..40 {
            same.update(8, 8);
            same.drafted(4, 32.0);
            small.update(8, 8);
            small.drafted(4, 3.2);
        }
        assert_eq!(same.get(), 0, "{same:?}");
        assert!(small.get() > 0, "{small:?}");
    }

    #[test]
    fn cheap_rows_make_drafting_pay_at_lower_acceptance() {
        // A bandwidth-bound model: an extra row costs 2% of a step; a compute-bound one 40%.
        let (mut cheap, mut dear) = (timed(100.0, 2.0), timed(8.0, 3.2));
        for _ in 0..40 {
            cheap.update(3, 1);
            dear.update(3, 1);
        }
        assert!(cheap.get() > 0, "{cheap:?}");
        assert_eq!(dear.get(), 0, "{dear:?}");
    }
}
