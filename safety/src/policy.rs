//! The refusal and tone policy: what the assistant says when the guard stops something. A pure
//! function of the category, so every message is reviewed here and unit-tested.
//!
//! The rules, from the product brief, "polite, not preachy": say no in one sentence, without
//! lecturing or guessing at motives; offer what can be offered; never answer rudeness in kind.

use crate::Category;

/// The reply shown instead of an answer when the guard flags a request in `category`.
pub fn refusal(category: Category) -> &'static str {
    match category {
        Category::ViolentCrimes => {
            "I can't help with hurting anyone. If you or someone else is in danger right now, please contact your local emergency number. I'm glad to help with something else, like staying safe or de-escalating a conflict."
        }
        Category::NonViolentCrimes => {
            "I can't help with that one, since it could cause real harm to people or get you into legal trouble. I'm happy to explain how these schemes work so you can protect yourself, or help with something else."
        }
        Category::SexRelatedCrimes => {
            "I can't help with that. If you or someone you know has been affected by sexual violence, a local support line or the police can help, and I can talk through where to find support."
        }
        Category::ChildSexualExploitation => {
            "I can't help with anything that sexualises or endangers children. If a child is at risk, please contact your local emergency number or a child-protection service."
        }
        Category::Defamation => {
            "I'd rather not write claims about a real person that could be false and damaging. I can help you write something factual, or an opinion clearly labelled as yours."
        }
        Category::SpecializedAdvice => {
            "That's a question for a doctor, pharmacist, lawyer or financial adviser who can look at your situation, and getting it wrong could hurt you. I can help you prepare questions to ask them, or explain the general background."
        }
        Category::Privacy => {
            "I can't help find or share private information about someone: people have a right not to be tracked or exposed. I can help with protecting your own privacy, or with reaching someone through public, official channels."
        }
        Category::IntellectualProperty => {
            "I can't reproduce or help get around protection on someone else's work. I can summarise it, discuss it, or point you towards legal ways to get it."
        }
        Category::IndiscriminateWeapons => {
            "I can't help with weapons that can harm many people. I'm glad to talk about the history, the science at a general level, or how societies protect against them."
        }
        Category::Hate => {
            "I won't write things that demean people for who they are. I'm happy to help with the topic in a way that treats everyone with respect."
        }
        Category::SuicideSelfHarm => {
            "I'm really sorry you're going through this, and I can't help with anything that could hurt you. You don't have to face it alone: please call your local emergency number or a crisis line now (in many countries you can dial 112 or 911; the number is on your phone's emergency screen even offline), or tell someone you trust. I'm here to keep talking if that helps."
        }
        Category::SexualContent => {
            "I don't write sexual content. I can help with relationships, health questions, or a romantic story kept non-explicit."
        }
        Category::Elections => {
            "I can't help with anything that could mislead voters or interfere with an election. For accurate information on how, when and where to vote, your official election authority is the best source."
        }
        Category::CodeInterpreterAbuse => {
            "I can't help with code meant to break into, damage or take over systems. I'm glad to help with securing your own systems or learning how these attacks are defended against."
        }
        Category::Harassment => {
            "I'd rather not write something meant to hurt or insult someone. If there's a conflict behind this, I'm happy to help you put your point across firmly and fairly."
        }
    }
}

/// The notice that replaces a reply the guard stopped while it streamed.
pub fn withdrawn_notice(category: Category) -> String {
    format!(
        "[The rest of this reply was withdrawn by the on-device safety check ({}).] {}",
        category.title().to_lowercase(),
        refusal(category)
    )
}

/// Shown in place of a reply when the safety check itself failed: nothing it could not read
/// is shown, so what was shown is taken back too.
pub const GUARD_FAILED_NOTICE: &str = "[This reply was withdrawn because the on-device safety check could not read it. Please try again.]";

/// Tone rules for the chat model's system prompt: the same policy, said to the model. Kept
/// short: a 135M model follows one plain sentence better than a paragraph (a longer version
/// made the default model drift off the question).
pub const TONE_RULES: &str =
    "Stay polite and calm even if the user is rude, and do not insult them back.";

/// The system prompt used when the caller gives none. It asks for a direct answer because the
/// default 135M model, told only to be "a helpful AI assistant", turned down about one benign
/// question in eight on its own ("I'm sorry… as a chatbot I'm not equipped…"); refusing is the
/// guard's job, not the chat model's. Chosen on the dev split with
/// `scripts/system-prompt-refusals.py`. The guard head is trained under this prompt
/// (`FeatureSpec::system_prompt`), so changing it means retraining the head.
pub fn default_system_prompt() -> String {
    format!(
        "You are a knowledgeable assistant. Give a direct, useful answer to every question. {TONE_RULES}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that make a refusal preachy or cold.
    const PREACHY: [&str; 8] = [
        "unethical",
        "immoral",
        "you should be ashamed",
        "as an ai",
        "i must remind",
        "it is important to note",
        "shame",
        "disgusting",
    ];

    #[test]
    fn every_refusal_is_short_polite_and_offers_something() {
        for c in Category::ALL {
            let r = refusal(c);
            let lower = r.to_lowercase();
            assert!(!r.is_empty());
            assert!(r.len() < 420, "{c}: {} chars is not short", r.len());
            for w in PREACHY {
                assert!(!lower.contains(w), "{c} says {w:?}");
            }
            // An offer or a pointer to help, not just a no.
            assert!(
                [
                    "i can",
                    "i'm glad",
                    "i'm happy",
                    "i'm here",
                    "please",
                    "is the best source"
                ]
                .iter()
                .any(|o| lower.contains(o)),
                "{c} offers nothing"
            );
        }
    }

    #[test]
    fn self_harm_points_to_help_that_works_offline() {
        let r = refusal(Category::SuicideSelfHarm).to_lowercase();
        assert!(r.contains("crisis line") && r.contains("emergency"));
        assert!(r.contains("offline"));
    }

    #[test]
    fn specialised_advice_sends_to_a_professional() {
        let r = refusal(Category::SpecializedAdvice).to_lowercase();
        assert!(r.contains("doctor") && r.contains("lawyer"));
    }

    #[test]
    fn privacy_says_why() {
        assert!(refusal(Category::Privacy).contains("right not to be"));
    }

    #[test]
    fn notice_names_the_category() {
        let n = withdrawn_notice(Category::Hate);
        assert!(n.contains("withdrawn") && n.contains("hate"));
    }

    #[test]
    fn system_prompt_carries_the_tone_rules() {
        let s = default_system_prompt();
        assert!(s.contains("do not insult them back"));
        assert!(s.contains(TONE_RULES));
    }
}
