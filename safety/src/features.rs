//! What the user asks the assistant to do (chat, summarize, proofread, reply, rewrite, ask the
//! documents) and the system prompt each one runs under (the policy's tone rules included): one
//! definition shared by the app's feature chips, `kostant eval --feature` and the feature evals' tasks, so the
//! evals measure the guard under the prompts users get.

use crate::policy;

/// A task with its own system prompt and, for all but chat, its own shipped adapter (the app's
/// `feature_adapters`) and scored test split (`kostant_evals::feature_eval::Task`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    Chat,
    Summarize,
    Reply,
    Rewrite,
    Proofread,
    /// Ask the user's documents: the reply answers from retrieved passages and cites them.
    Documents,
}

impl Feature {
    /// Every feature, in the order the eval CLI lists them.
    pub const ALL: [Feature; 5] = [
        Feature::Chat,
        Feature::Summarize,
        Feature::Reply,
        Feature::Rewrite,
        Feature::Proofread,
    ];

    /// The features the chat screen offers as chips, in order (the phone scrolls the row): the
    /// text features, then asking the documents.
    pub const CHIPS: [Feature; 6] = [
        Feature::Chat,
        Feature::Summarize,
        Feature::Reply,
        Feature::Rewrite,
        Feature::Proofread,
        Feature::Documents,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Feature::Chat => "Chat",
            Feature::Summarize => "Summarize",
            Feature::Reply => "Reply",
            Feature::Rewrite => "Rewrite",
            Feature::Proofread => "Proofread",
            Feature::Documents => "Ask documents",
        }
    }

    /// The name on the command line and in eval reports.
    pub fn id(self) -> &'static str {
        match self {
            Feature::Chat => "chat",
            Feature::Summarize => "summarize",
            Feature::Reply => "reply",
            Feature::Rewrite => "rewrite",
            Feature::Proofread => "proofread",
            Feature::Documents => "documents",
        }
    }

    /// A feature by its id; the error names the ones there are.
    pub fn parse(id: &str) -> Result<Feature, String> {
        let id = id.trim();
        Feature::CHIPS
            .into_iter()
            .find(|f| f.id() == id)
            .ok_or_else(|| {
                let known: Vec<&str> = Feature::CHIPS.iter().map(|f| f.id()).collect();
                format!("unknown feature {id:?} (known: {})", known.join(", "))
            })
    }

    /// The system prompt for this feature, with the policy's tone rules (Chat's is the
    /// terminal chat's own, so both answer alike).
    pub fn system_prompt(self) -> String {
        let task = match self {
            Feature::Chat => return policy::default_system_prompt(),
            Feature::Summarize => {
                "Summarize the text the user gives you in a few short sentences. Keep its facts, \
                 names and numbers; add nothing that is not in it."
            }
            Feature::Reply => {
                "Write a reply to the message the user pastes, as the user, ready to send. Match \
                 the message's language and register."
            }
            Feature::Rewrite => {
                "Rewrite the text the user gives you so that it reads clearly and correctly. Keep \
                 its meaning and language, and return only the rewritten text."
            }
            Feature::Proofread => {
                "Correct the spelling, grammar and punctuation of the text the user gives you. \
                 Keep its meaning, wording and language, and reply with the corrected text only."
            }
            Feature::Documents => {
                "Answer the user's question from the numbered passages of their documents given \
                 with it, and from nothing else. After each sentence, put the number of the \
                 passage it comes from in brackets, like [1]. If the passages do not answer the \
                 question, say that the documents do not say."
            }
        };
        format!("{task} {}", policy::TONE_RULES)
    }

    /// Where this feature's chip sits in [`Feature::CHIPS`].
    pub fn index(self) -> usize {
        Feature::CHIPS.iter().position(|f| *f == self).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_prompts_differ() {
        for f in Feature::CHIPS {
            assert_eq!(Feature::parse(f.id()), Ok(f));
            assert!(f.system_prompt().contains(policy::TONE_RULES), "{f:?}");
        }
        let prompts: std::collections::HashSet<String> =
            Feature::CHIPS.iter().map(|f| f.system_prompt()).collect();
        assert_eq!(prompts.len(), Feature::CHIPS.len());
        assert_eq!(
            Feature::Chat.system_prompt(),
            policy::default_system_prompt()
        );
        assert!(Feature::Proofread
            .system_prompt()
            .contains("corrected text only"));
        let e = Feature::parse("proof").unwrap_err();
        assert!(
            e.contains("unknown feature \"proof\"") && e.contains("proofread"),
            "{e}"
        );
        // A chip's index is its feature's.
        for (i, f) in Feature::CHIPS.iter().enumerate() {
            assert_eq!(f.index(), i);
        }
    }
}
