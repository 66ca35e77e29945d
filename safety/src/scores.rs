//! What the guard head says about one text: its unsafe probability and one probability per
//! hazard category. Both the head, which computes them, and the category rules, which decide
//! whether a category may be shown, read this type.

use crate::Category;

/// What the head says about one text.
#[derive(Clone, Debug, PartialEq)]
pub struct Scores {
    pub unsafe_prob: f32,
    /// Per category, in `Category::ALL` order.
    pub categories: [f32; Category::ALL.len()],
}

impl Scores {
    /// The most likely category: the head's guess, which is shown to no one unless the head's
    /// category rule for it is confident in it.
    pub fn top_category(&self) -> Category {
        self.ranked().0
    }

    /// The most likely category, its probability, and how far it is ahead of the runner-up.
    pub fn ranked(&self) -> (Category, f32, f32) {
        let (mut best, mut second) = (0, None::<usize>);
        for (i, &p) in self.categories.iter().enumerate().skip(1) {
            if p > self.categories[best] {
                second = Some(best);
                best = i;
            } else if second.is_none_or(|s| p > self.categories[s]) {
                second = Some(i);
            }
        }
        let top = self.categories[best];
        let runner_up = second.map_or(0.0, |s| self.categories[s]);
        (Category::ALL[best], top, top - runner_up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranked_gives_the_top_category_and_its_lead() {
        let mut categories = [0.1; Category::ALL.len()];
        categories[Category::Hate.index()] = 0.9;
        categories[Category::Harassment.index()] = 0.6;
        let s = Scores {
            unsafe_prob: 0.9,
            categories,
        };
        let (top, p, margin) = s.ranked();
        assert_eq!((top, p), (Category::Hate, 0.9));
        assert!((margin - 0.3).abs() < 1e-6, "{margin}");
        // The winner in first place, and ties, rank the same way.
        categories = [0.2; Category::ALL.len()];
        categories[0] = 0.8;
        let s = Scores {
            unsafe_prob: 0.9,
            categories,
        };
        assert_eq!(s.ranked().0, Category::ALL[0]);
        assert!((s.ranked().2 - 0.6).abs() < 1e-6);
        let flat = Scores {
            unsafe_prob: 0.9,
            categories: [0.5; Category::ALL.len()],
        };
        assert_eq!(flat.ranked(), (Category::ALL[0], 0.5, 0.0));
    }
}
