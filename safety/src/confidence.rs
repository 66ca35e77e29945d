//! When the guard may name a hazard category to the user. A category-specific refusal tells the
//! asker what the system thinks they asked for, so a wrong one accuses them: the head's category
//! outputs are trusted only when one category clearly stands out ([`CategoryRule`]); otherwise
//! the user gets the neutral refusal. The rule is picked on the dev split ([`pick_rule`]), never
//! on the eval suites.

use serde::{Deserialize, Serialize};

use crate::head::Scores;
use crate::Category;

/// The head names a category only when its top category is likely on its own (`min_prob`) and
/// clearly ahead of the runner-up (`min_margin`, in probability). Why both: the category outputs
/// are independent sigmoids, all trained towards 0 on safe text, so a benign prompt that was
/// flagged tends to have low category probabilities (caught by `min_prob`) or two or three
/// middling ones (the head does not know which harm; caught by `min_margin`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CategoryRule {
    pub min_prob: f32,
    pub min_margin: f32,
}

impl CategoryRule {
    /// The category to show for `scores`, or None when the head is not confident.
    pub fn name(&self, scores: &Scores) -> Option<Category> {
        let (top, p, margin) = scores.ranked();
        (p >= self.min_prob && margin >= self.min_margin).then_some(top)
    }
}

/// The category a head with `rule` shows for `scores`; a head without a rule shows none (the
/// safe default: heads made before rules existed are always neutral).
pub fn shown_category(rule: Option<&CategoryRule>, scores: &Scores) -> Option<Category> {
    rule.and_then(|r| r.name(scores))
}

/// One dev text the guard flagged: the head's scores where it flagged, and the text's true
/// category (None: a safe text).
#[derive(Clone, Debug)]
pub struct Flagged {
    pub scores: Scores,
    pub truth: Option<Category>,
}

/// How a rule treats the flagged dev texts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleReport {
    /// Safe texts the guard flagged, and how many of them would be shown a category text.
    pub flagged_safe: usize,
    pub safe_named: usize,
    /// Unsafe texts the guard flagged, how many are shown a category text, and how many of
    /// those name the text's own category.
    pub flagged_unsafe: usize,
    pub unsafe_named: usize,
    pub unsafe_named_right: usize,
}

/// Counts what `rule` shows for each of `flagged`.
pub fn evaluate(rule: Option<&CategoryRule>, flagged: &[Flagged]) -> RuleReport {
    let mut r = RuleReport::default();
    for f in flagged {
        let shown = shown_category(rule, &f.scores);
        match f.truth {
            None => {
                r.flagged_safe += 1;
                r.safe_named += shown.is_some() as usize;
            }
            Some(truth) => {
                r.flagged_unsafe += 1;
                r.unsafe_named += shown.is_some() as usize;
                r.unsafe_named_right += (shown == Some(truth)) as usize;
            }
        }
    }
    r
}

/// Steps of the grid rules are picked from: values a person can read in a head's header, and a
/// little room between the rule and the dev texts it had to exclude.
const GRID: usize = 100;

/// Picks the rule for a head from the texts it flagged on the dev split: among the rules that
/// show no flagged safe text a category, the one under which the most flagged unsafe texts are
/// named rightly, less those named wrongly (a wrong name on a harmful request misleads too). Of
/// rules that do equally well on dev, the strictest is kept: dev cannot tell them apart, and
/// on unseen text a needless category name costs more than a missing one. None when no rule
/// names more unsafe texts rightly than wrongly: the head stays neutral.
pub fn pick_rule(flagged: &[Flagged]) -> (Option<CategoryRule>, RuleReport) {
    let mut best: Option<(i64, CategoryRule, RuleReport)> = None;
    for i in 0..=GRID {
        for j in 0..=GRID {
            let rule = CategoryRule {
                min_prob: i as f32 / GRID as f32,
                min_margin: j as f32 / GRID as f32,
            };
            let r = evaluate(Some(&rule), flagged);
            if r.safe_named > 0 {
                continue;
            }
            let wrong = r.unsafe_named - r.unsafe_named_right;
            let gain = r.unsafe_named_right as i64 - wrong as i64;
            // Later grid points are stricter in one coordinate and no looser in the other, so
            // `>=` keeps the strictest among equals.
            if gain > 0 && best.as_ref().is_none_or(|b| gain >= b.0) {
                best = Some((gain, rule, r));
            }
        }
    }
    match best {
        Some((_, rule, r)) => (Some(rule), r),
        None => (None, evaluate(None, flagged)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(pairs: &[(Category, f32)]) -> Scores {
        let mut categories = [0.01; Category::ALL.len()];
        for &(c, p) in pairs {
            categories[c.index()] = p;
        }
        Scores {
            unsafe_prob: 0.9,
            categories,
        }
    }

    fn flagged(truth: Option<Category>, pairs: &[(Category, f32)]) -> Flagged {
        Flagged {
            scores: scores(pairs),
            truth,
        }
    }

    #[test]
    fn a_rule_names_only_a_clear_winner() {
        let rule = CategoryRule {
            min_prob: 0.5,
            min_margin: 0.3,
        };
        let hate = Category::Hate;
        assert_eq!(rule.name(&scores(&[(hate, 0.9)])), Some(hate));
        // Likely, but a close second.
        let close = scores(&[(hate, 0.9), (Category::Harassment, 0.7)]);
        assert_eq!(rule.name(&close), None);
        // Alone, but not likely.
        assert_eq!(rule.name(&scores(&[(hate, 0.4)])), None);
        // No rule: never a name.
        assert_eq!(shown_category(None, &scores(&[(hate, 0.99)])), None);
    }

    #[test]
    fn the_picked_rule_names_no_flagged_safe_text() {
        let (v, nv, hate) = (
            Category::ViolentCrimes,
            Category::NonViolentCrimes,
            Category::Hate,
        );
        let data = vec![
            flagged(Some(v), &[(v, 0.95)]),
            flagged(Some(v), &[(v, 0.8), (nv, 0.2)]),
            flagged(Some(hate), &[(hate, 0.7)]),
            flagged(Some(nv), &[(v, 0.6), (nv, 0.5)]),
            // Safe but flagged: one middling, one confident-looking.
            flagged(None, &[(v, 0.4), (nv, 0.35)]),
            flagged(None, &[(hate, 0.65), (v, 0.05)]),
        ];
        let (rule, r) = pick_rule(&data);
        let rule = rule.expect("a rule that names something");
        assert_eq!(r, evaluate(Some(&rule), &data));
        assert_eq!((r.flagged_safe, r.safe_named), (2, 0));
        assert_eq!(r.flagged_unsafe, 4);
        // The two clear violent crimes and the hate text (just above the safe text's 0.65) are
        // named; the muddled non-violent one is not.
        assert_eq!((r.unsafe_named, r.unsafe_named_right), (3, 3));
        assert!(rule.min_prob > 0.65, "{rule:?}");
    }

    #[test]
    fn no_rule_when_nothing_can_be_named_safely() {
        let v = Category::ViolentCrimes;
        // The safe text looks exactly like the unsafe one: every rule naming one names both.
        let data = vec![flagged(Some(v), &[(v, 0.9)]), flagged(None, &[(v, 0.9)])];
        let (rule, r) = pick_rule(&data);
        assert_eq!(rule, None);
        assert_eq!((r.safe_named, r.unsafe_named), (0, 0));
    }
}
