//! A message on the Chat screen and how it stands. A reply's outcome is the pipeline's
//! [`Verdict`], kept whole: the screen's status, caption and whether the exchange stays in the
//! model's context are all read off it.

use kostant_safety::{StoppedBy, Verdict};

use crate::assistant::ask::Source;
use crate::history::Role;

/// How a message on screen stands: a reply still arriving, one that could not be made, or
/// one that ended with the pipeline's [`Verdict`]. The user's own messages, and replies
/// reopened from the history (which keeps no verdict), stand as [`MessageState::SENT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageState {
    /// Tokens are still arriving.
    Streaming,
    /// No reply came; the text says why.
    Failed,
    /// The reply ended so: answered, stopped by the user, withdrawn (stopped by the guard; the
    /// text is its notice) or refused (the text is the refusal).
    Finished(Verdict),
}

impl MessageState {
    /// A message that stands as written: the user's, or a reply answered in full.
    pub const SENT: MessageState = MessageState::Finished(Verdict::Answered);

    /// What the guard withdrew while it streamed stands so until the reply ends (the category
    /// comes with the end).
    pub(super) const WITHDRAWN: MessageState = MessageState::Finished(Verdict::Stopped {
        by: StoppedBy::Guard,
        category: None,
    });

    pub fn verdict(self) -> Option<Verdict> {
        match self {
            MessageState::Finished(v) => Some(v),
            MessageState::Streaming | MessageState::Failed => None,
        }
    }

    /// Whether the text is not the model's reply but the guard's or the app's: a refusal, a
    /// withdrawal notice, or why no reply came.
    pub fn is_notice(self) -> bool {
        match self {
            MessageState::Finished(v) => v.by_guard(),
            MessageState::Failed => true,
            MessageState::Streaming => false,
        }
    }

    /// Whether the guard stopped the reply and its notice stands in its place.
    pub fn is_withdrawn(self) -> bool {
        matches!(
            self,
            MessageState::Finished(Verdict::Stopped {
                by: StoppedBy::Guard,
                ..
            })
        )
    }

    /// The line shown with the message: the verdict's ("Refused · Hate", "Withdrawn",
    /// "Stopped"), "Error" for a failure, empty otherwise.
    pub fn caption(self) -> String {
        match self {
            MessageState::Finished(v) => v.caption(),
            MessageState::Failed => "Error".into(),
            MessageState::Streaming => String::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    pub text: String,
    pub state: MessageState,
    /// The passages an "Ask documents" reply stands on (empty for every other message). Kept
    /// on screen only: the history saves the question and the reply, not the passages.
    pub sources: Vec<Source>,
    /// A proofread reply's changes to the user's text, under review (None for every other
    /// message).
    pub review: Option<super::proofread::ChangeReview>,
    /// A Reply reply's three suggestions, parsed from its text once it was answered in full
    /// (empty for every other message): the screen shows them as chips.
    pub choices: Vec<String>,
    /// Saved to the history as the last exchange (so regenerate can replace it there).
    pub(super) saved: bool,
}

impl ChatMessage {
    pub(super) fn new(role: Role, text: impl Into<String>, state: MessageState) -> ChatMessage {
        ChatMessage {
            role,
            text: text.into(),
            state,
            sources: Vec::new(),
            review: None,
            choices: Vec::new(),
            saved: false,
        }
    }
}
