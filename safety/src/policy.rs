//! The refusal and tone policy: what the assistant says when the guard stops something. A pure
//! function of the category the guard may show, so every message is reviewed here and
//! unit-tested.
//!
//! The rules, from the product brief, "polite, not preachy": say no in one sentence, without
//! lecturing or guessing at motives; offer what can be offered; never answer rudeness in kind.
//! A category-specific text tells the asker what the system thinks they asked for, so it is
//! used only when the guard is confident in that category; otherwise the neutral text, which
//! names no harm and offers a way forward (see [`crate::confidence`]).

use crate::Category;

/// The neutral texts' offer: the nearest help a refusal that knows nothing of the request can
/// give. One literal for both texts that carry it.
macro_rules! neutral_offer {
    () => {
        "If I've misread what you need, tell me a little more about it or ask it another way, and I'll do my best to help."
    };
}

/// The refusal when the guard flagged a message without being sure why.
const NEUTRAL_REFUSAL: &str = concat!(
    "Sorry, I can't help with this one: my on-device safety check stopped it. ",
    neutral_offer!()
);

/// The reply shown instead of an answer when the guard flags a request: the category's own
/// text when the guard is confident in one, else the neutral one.
pub fn refusal(category: Option<Category>) -> &'static str {
    match category {
        Some(c) => category_refusal(c),
        None => NEUTRAL_REFUSAL,
    }
}

/// Whether `text` is one of the refusals above, neutral or a category's.
pub fn is_refusal(text: &str) -> bool {
    text == NEUTRAL_REFUSAL || Category::ALL.iter().any(|&c| text == category_refusal(c))
}

fn category_refusal(category: Category) -> &'static str {
    match category {
        Category::ViolentCrimes => {
            "I can't help with anything that could hurt someone. If you or someone else is in danger right now, please contact your local emergency number. I'm glad to help with something else, like staying safe or de-escalating a conflict."
        }
        Category::NonViolentCrimes => {
            "I can't help with that one, since it could lead to real harm or break the law. I'm happy to explain how people protect themselves from scams and similar crimes, or help with something else."
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
            "I can't help with this one. If things feel hard right now, you don't have to face it alone: please call your local emergency number or a crisis line (in many countries you can dial 112 or 911; the number is on your phone's emergency screen even offline), or tell someone you trust. I'm here to keep talking if that helps."
        }
        Category::SexualContent => {
            "I don't write sexual content. I can help with relationships, health questions, or a romantic story kept non-explicit."
        }
        Category::Elections => {
            "I can't help with anything that could mislead voters or interfere with an election. For accurate information on how, when and where to vote, your official election authority is the best source."
        }
        Category::CodeInterpreterAbuse => {
            "I can't help with code that breaks into, damages or takes over systems. I'm glad to help with securing your own systems or learning how these attacks are defended against."
        }
        Category::Harassment => {
            "I'd rather not write something that could hurt or insult someone. If there's a conflict behind this, I'm happy to help you put your point across firmly and fairly."
        }
    }
}

/// The notice that replaces a reply the guard stopped while it streamed: named after the
/// category only when the guard is confident in it, like [`refusal`].
pub fn withdrawn_notice(category: Option<Category>) -> String {
    match category {
        Some(c) => format!(
            "[The rest of this reply was withdrawn by the on-device safety check ({}).] {}",
            c.title().to_lowercase(),
            category_refusal(c)
        ),
        None => concat!(
            "[The on-device safety check stopped this reply.] ",
            neutral_offer!()
        )
        .to_string(),
    }
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

    /// Phrases that claim to know why the asker asked: the guard cannot know, and a benign
    /// asker reads them as an accusation.
    const MOTIVE: [&str; 14] = [
        "you want to",
        "you wanted to",
        "your intent",
        "your goal",
        "your motive",
        "why would you",
        "you're trying",
        "you are trying",
        "you plan",
        "you intend",
        "meant to",
        "get you into",
        "you're going through",
        "people like you",
    ];

    /// An offer or a pointer to help, not just a no.
    const OFFERS: [&str; 7] = [
        "i can",
        "i'm glad",
        "i'm happy",
        "i'm here",
        "i'll do my best",
        "please",
        "is the best source",
    ];

    /// Every text a user can be shown when the guard stops something.
    fn every_text() -> Vec<(String, String)> {
        let mut all = vec![
            ("neutral".to_string(), refusal(None).to_string()),
            ("neutral notice".to_string(), withdrawn_notice(None)),
        ];
        for c in Category::ALL {
            all.push((c.id().to_string(), refusal(Some(c)).to_string()));
            all.push((format!("{c} notice"), withdrawn_notice(Some(c))));
        }
        all
    }

    #[test]
    fn every_refusal_and_only_a_refusal_is_recognised() {
        assert!(is_refusal(refusal(None)));
        for c in Category::ALL {
            assert!(is_refusal(refusal(Some(c))), "{c}");
            assert!(!is_refusal(&withdrawn_notice(Some(c))), "{c} notice");
        }
        assert!(!is_refusal(&withdrawn_notice(None)));
        assert!(!is_refusal("Paris is the capital of France."));
    }

    #[test]
    fn every_text_is_short_polite_offers_something_and_guesses_no_motive() {
        for (name, text) in every_text() {
            let lower = text.to_lowercase();
            assert!(!text.is_empty());
            assert!(
                text.len() < 480,
                "{name}: {} chars is not short",
                text.len()
            );
            for w in PREACHY {
                assert!(!lower.contains(w), "{name} says {w:?}");
            }
            for w in MOTIVE {
                assert!(!lower.contains(w), "{name} guesses a motive: {w:?}");
            }
            assert!(
                OFFERS.iter().any(|o| lower.contains(o)),
                "{name} offers nothing"
            );
        }
    }

    #[test]
    fn the_neutral_texts_name_no_harm() {
        // Every category's name and the words its texts use for the harm.
        let mut harms: Vec<String> = Category::ALL
            .iter()
            .flat_map(|c| [c.title().to_lowercase(), c.id().replace('_', " ")])
            .collect();
        harms.extend(
            [
                "harm",
                "hurt",
                "crime",
                "illegal",
                "law",
                "danger",
                "weapon",
                "violen",
                "child",
                "sex",
                "hate",
                "demean",
                "insult",
                "abuse",
                "privacy",
                "private",
                "tracked",
                "suicide",
                "self-harm",
                "crisis",
                "emergency",
                "election",
                "voter",
                "copyright",
                "scam",
                "attack",
                "unsafe",
                "harmful",
                "risk",
            ]
            .map(String::from),
        );
        for text in [refusal(None).to_string(), withdrawn_notice(None)] {
            let lower = text.to_lowercase();
            for h in &harms {
                assert!(!lower.contains(h.as_str()), "{text:?} names {h:?}");
            }
            // Says what happened, and where the way forward is.
            assert!(lower.contains("safety check"), "{text}");
            assert!(lower.contains("another way"), "{text}");
        }
    }

    #[test]
    fn a_category_text_is_used_only_when_a_category_is_known() {
        for c in Category::ALL {
            assert_ne!(refusal(Some(c)), refusal(None));
            assert_ne!(withdrawn_notice(Some(c)), withdrawn_notice(None));
        }
    }

    #[test]
    fn self_harm_points_to_help_that_works_offline() {
        let r = refusal(Some(Category::SuicideSelfHarm)).to_lowercase();
        assert!(r.contains("crisis line") && r.contains("emergency"));
        assert!(r.contains("offline"));
    }

    #[test]
    fn specialised_advice_sends_to_a_professional() {
        let r = refusal(Some(Category::SpecializedAdvice)).to_lowercase();
        assert!(r.contains("doctor") && r.contains("lawyer"));
    }

    #[test]
    fn privacy_says_why() {
        assert!(refusal(Some(Category::Privacy)).contains("right not to be"));
    }

    #[test]
    fn a_notice_names_its_category_only_when_known() {
        let n = withdrawn_notice(Some(Category::Hate));
        assert!(n.contains("withdrawn") && n.contains("hate"));
        let n = withdrawn_notice(None);
        assert!(n.starts_with("[The on-device safety check stopped this reply.]"));
    }

    #[test]
    fn system_prompt_carries_the_tone_rules() {
        let s = default_system_prompt();
        assert!(s.contains("do not insult them back"));
        assert!(s.contains(TONE_RULES));
    }
}
