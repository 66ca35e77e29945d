//! When the guard may name a hazard category to the user. A category-specific refusal tells the
//! asker what the system thinks they asked for, so a wrong one accuses them: the head's category
//! outputs are trusted only when one category clearly stands out ([`CategoryRule`]), by a rule
//! of that category's own ([`CategoryRules`]); otherwise the user gets the neutral refusal. The
//! rules are picked on the dev split ([`pick_rules`]), never on the eval suites.

use serde::{Deserialize, Serialize};

use crate::scores::Scores;
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

/// A rule per category. The head shows category `c` only when `c` is its top category and
/// `c` has a rule here that is confident in it; a category without a rule is never shown (the
/// safe default: a head with no rules is always neutral). Why one per category: benign text
/// looks like some categories far more than others (flagged safe dev prompts can get a top
/// category at 0.99-1.0 in a few categories), and one rule for all would then keep every
/// category silent, the self-harm text with its crisis line among them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryRules(pub Vec<(Category, CategoryRule)>);

impl CategoryRules {
    pub fn get(&self, c: Category) -> Option<&CategoryRule> {
        self.0.iter().find(|(k, _)| *k == c).map(|(_, r)| r)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The category a head with `rules` shows for `scores`, if any.
pub fn shown_category(rules: &CategoryRules, scores: &Scores) -> Option<Category> {
    let (top, _, _) = scores.ranked();
    rules.get(top).and_then(|r| r.name(scores))
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

/// Counts what `rules` show for each of `flagged`.
pub fn evaluate(rules: &CategoryRules, flagged: &[Flagged]) -> RuleReport {
    let mut r = RuleReport::default();
    for f in flagged {
        let shown = shown_category(rules, &f.scores);
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

/// Picks each category's rule from the texts the head flagged on the dev split whose top
/// category it is (only those can be shown it): among the rules that show no flagged safe text
/// that category, the one under which the most flagged unsafe texts are named rightly, less
/// those named wrongly (a wrong name on a harmful request misleads too). Of rules that do
/// equally well on dev, the strictest is kept: dev cannot tell them apart, and on unseen text
/// a needless category name costs more than a missing one. A category gets no rule when no
/// rule names more of its texts rightly than wrongly, when fewer than [`MIN_NAMED`] would be
/// named rightly, or when dev holds fewer than [`MIN_SAFE_SEEN`] flagged safe texts with it on
/// top (too little evidence that its texts can be told apart from benign ones).
pub fn pick_rules(flagged: &[Flagged]) -> (CategoryRules, RuleReport) {
    let mut rules = Vec::new();
    for c in Category::ALL {
        let mine: Vec<Flagged> = flagged
            .iter()
            .filter(|f| f.scores.ranked().0 == c)
            .cloned()
            .collect();
        if let Some(rule) = pick_one(c, &mine) {
            rules.push((c, rule));
        }
    }
    let rules = CategoryRules(rules);
    let report = evaluate(&rules, flagged);
    (rules, report)
}

/// A category needs at least this many flagged unsafe dev texts named rightly to get a rule.
pub const MIN_NAMED: usize = 3;

/// ... and at least this many flagged safe dev texts with it on top, all left unnamed: a rule
/// that never met a benign look-alike on dev says nothing about the ones users will send (with
/// none excluded, dev cannot tell a rule that names every benign look-alike from one that names
/// none).
pub const MIN_SAFE_SEEN: usize = 3;

/// The rule for category `c` over the flagged texts whose top category is `c`.
fn pick_one(c: Category, mine: &[Flagged]) -> Option<CategoryRule> {
    if mine.iter().filter(|f| f.truth.is_none()).count() < MIN_SAFE_SEEN {
        return None;
    }
    let mut best: Option<(i64, CategoryRule)> = None;
    for i in 0..=GRID {
        for j in 0..=GRID {
            let rule = CategoryRule {
                min_prob: i as f32 / GRID as f32,
                min_margin: j as f32 / GRID as f32,
            };
            let r = evaluate(&CategoryRules(vec![(c, rule)]), mine);
            if r.safe_named > 0 || r.unsafe_named_right < MIN_NAMED {
                continue;
            }
            let wrong = r.unsafe_named - r.unsafe_named_right;
            let gain = r.unsafe_named_right as i64 - wrong as i64;
            // Later grid points are stricter in one coordinate and no looser in the other, so
            // `>=` keeps the strictest among equals.
            if gain > 0 && best.as_ref().is_none_or(|b| gain >= b.0) {
                best = Some((gain, rule));
            }
        }
    }
    best.map(|(_, rule)| rule)
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
        // No rules: never a name; a rule for another category does not name this one.
        let none = CategoryRules::default();
        assert_eq!(shown_category(&none, &scores(&[(hate, 0.99)])), None);
        let other = CategoryRules(vec![(Category::Privacy, rule)]);
        assert_eq!(shown_category(&other, &scores(&[(hate, 0.99)])), None);
        let mine = CategoryRules(vec![(hate, rule)]);
        assert_eq!(shown_category(&mine, &scores(&[(hate, 0.99)])), Some(hate));
    }

    #[test]
    fn each_category_gets_its_own_rule_and_none_names_a_flagged_safe_text() {
        let (v, sh, hate) = (
            Category::ViolentCrimes,
            Category::SuicideSelfHarm,
            Category::Hate,
        );
        let mut data = vec![
            // Self-harm: its unsafe texts clear 0.8, its flagged safe texts stay at or below 0.6.
            flagged(Some(sh), &[(sh, 0.95)]),
            flagged(Some(sh), &[(sh, 0.9)]),
            flagged(Some(sh), &[(sh, 0.85), (v, 0.1)]),
            flagged(None, &[(sh, 0.6)]),
            flagged(None, &[(sh, 0.5), (v, 0.3)]),
            flagged(None, &[(sh, 0.3)]),
            // Violent crimes: a flagged safe text as sure as the unsafe ones; no rule can name
            // them without naming it.
            flagged(Some(v), &[(v, 0.99)]),
            flagged(Some(v), &[(v, 0.99)]),
            flagged(Some(v), &[(v, 0.99)]),
            flagged(None, &[(v, 0.99)]),
        ];
        // Hate: clearly apart from benign text, but only two texts: too little evidence.
        data.push(flagged(Some(hate), &[(hate, 0.9)]));
        data.push(flagged(Some(hate), &[(hate, 0.9)]));
        // Privacy: three clear texts, but no benign look-alike on dev to show the rule holds.
        let privacy = Category::Privacy;
        data.extend((0..3).map(|_| flagged(Some(privacy), &[(privacy, 0.9)])));
        let (rules, r) = pick_rules(&data);
        assert_eq!(r, evaluate(&rules, &data));
        assert_eq!((r.flagged_safe, r.safe_named), (4, 0));
        assert!(rules.get(v).is_none(), "{rules:?}");
        assert!(rules.get(hate).is_none(), "{rules:?}");
        assert!(rules.get(privacy).is_none(), "{rules:?}");
        let rule = rules.get(sh).expect("a self-harm rule");
        assert!(rule.min_prob > 0.6 && rule.min_prob <= 0.85, "{rule:?}");
        // The three self-harm texts are named, rightly; nothing else is.
        assert_eq!((r.unsafe_named, r.unsafe_named_right), (3, 3));
        assert_eq!(rules.0.len(), 1, "{rules:?}");
    }

    #[test]
    fn no_rule_when_nothing_can_be_named_safely() {
        let v = Category::ViolentCrimes;
        // The safe text looks exactly like the unsafe ones: every rule naming one names all.
        let mut data: Vec<Flagged> = (0..3).map(|_| flagged(None, &[(v, 0.9)])).collect();
        data.extend((0..5).map(|_| flagged(Some(v), &[(v, 0.9)])));
        let (rules, r) = pick_rules(&data);
        assert!(rules.is_empty(), "{rules:?}");
        assert_eq!((r.safe_named, r.unsafe_named), (0, 0));
    }
}
