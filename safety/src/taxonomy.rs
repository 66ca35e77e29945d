//! The hazard taxonomy: the MLCommons hazard categories as Llama Guard 3 numbers them (S1–S14),
//! plus harassment/insult, which provocation needs and MLCommons folds into hate.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    ViolentCrimes,
    NonViolentCrimes,
    SexRelatedCrimes,
    ChildSexualExploitation,
    Defamation,
    SpecializedAdvice,
    Privacy,
    IntellectualProperty,
    IndiscriminateWeapons,
    Hate,
    SuicideSelfHarm,
    SexualContent,
    Elections,
    CodeInterpreterAbuse,
    Harassment,
}

impl Category {
    /// Every category, in the order of the guard head's outputs.
    pub const ALL: [Category; 15] = [
        Category::ViolentCrimes,
        Category::NonViolentCrimes,
        Category::SexRelatedCrimes,
        Category::ChildSexualExploitation,
        Category::Defamation,
        Category::SpecializedAdvice,
        Category::Privacy,
        Category::IntellectualProperty,
        Category::IndiscriminateWeapons,
        Category::Hate,
        Category::SuicideSelfHarm,
        Category::SexualContent,
        Category::Elections,
        Category::CodeInterpreterAbuse,
        Category::Harassment,
    ];

    /// The snake_case id used in data files, JSON output and reports.
    pub fn id(self) -> &'static str {
        match self {
            Category::ViolentCrimes => "violent_crimes",
            Category::NonViolentCrimes => "non_violent_crimes",
            Category::SexRelatedCrimes => "sex_related_crimes",
            Category::ChildSexualExploitation => "child_sexual_exploitation",
            Category::Defamation => "defamation",
            Category::SpecializedAdvice => "specialized_advice",
            Category::Privacy => "privacy",
            Category::IntellectualProperty => "intellectual_property",
            Category::IndiscriminateWeapons => "indiscriminate_weapons",
            Category::Hate => "hate",
            Category::SuicideSelfHarm => "suicide_self_harm",
            Category::SexualContent => "sexual_content",
            Category::Elections => "elections",
            Category::CodeInterpreterAbuse => "code_interpreter_abuse",
            Category::Harassment => "harassment",
        }
    }

    /// Llama Guard 3's code for the category ("S1".."S14"); harassment is ours ("H1").
    pub fn code(self) -> &'static str {
        const CODES: [&str; 15] = [
            "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "S13",
            "S14", "H1",
        ];
        CODES[self.index()]
    }

    /// A short human name, for reports and the UI.
    pub fn title(self) -> &'static str {
        match self {
            Category::ViolentCrimes => "Violent crimes",
            Category::NonViolentCrimes => "Non-violent crimes",
            Category::SexRelatedCrimes => "Sex-related crimes",
            Category::ChildSexualExploitation => "Child sexual exploitation",
            Category::Defamation => "Defamation",
            Category::SpecializedAdvice => "Specialized advice",
            Category::Privacy => "Privacy",
            Category::IntellectualProperty => "Intellectual property",
            Category::IndiscriminateWeapons => "Indiscriminate weapons",
            Category::Hate => "Hate",
            Category::SuicideSelfHarm => "Suicide and self-harm",
            Category::SexualContent => "Sexual content",
            Category::Elections => "Elections",
            Category::CodeInterpreterAbuse => "Code interpreter abuse",
            Category::Harassment => "Harassment and insult",
        }
    }

    pub fn index(self) -> usize {
        // Invariant: ALL lists every variant exactly once, so the search always succeeds.
        Category::ALL.iter().position(|&c| c == self).unwrap()
    }

    pub fn from_id(id: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.id() == id)
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (i, c) in Category::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i);
            assert_eq!(Category::from_id(c.id()), Some(c));
            assert!(seen.insert(c.id()));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.id()));
        }
        assert_eq!(Category::from_id("weather"), None);
        assert_eq!(Category::Elections.code(), "S13");
    }
}
