//! A conversation's context kept beside its messages: after each reply the rows the engine
//! added since the last save are appended, sealed, to the conversation's snapshot; opening the
//! conversation again restores them instead of re-reading every turn.
//!
//! The snapshot comes with the model's view of the conversation (which can differ from the
//! messages shown: a refused exchange is shown and saved but leaves the model's context), so
//! the next prompt renders to the same tokens the restored cache holds.

use kostant_engine::{EngineError, Message, Role, Session};

use super::{HistoryError, SavedContext, Store};

/// More pieces than this and the next save rewrites the snapshot as one piece: restoring
/// reads every piece, and pieces a turn rewrote are dead weight.
const MAX_PIECES: usize = 16;

/// Why a saved context was not restored. The caller then re-reads the conversation: nothing is
/// lost but time.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("{0}")]
    History(#[from] HistoryError),
    #[error("{0}")]
    Engine(#[from] EngineError),
    #[error("the saved context of conversation {0} could not be read")]
    Unreadable(i64),
}

/// What to write for a conversation's context after a reply ([`ContextKeeper::plan`]), made
/// where the session lives and written where the history is ([`ContextSave::write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSave {
    /// The session's snapshot header.
    pub header: Vec<u8>,
    /// The rows since the last save (None: nothing new).
    pub piece: Option<Vec<u8>>,
    /// Whether the stored pieces are dropped first (the piece holds the whole context).
    pub fresh: bool,
}

impl ContextSave {
    /// Saves it for `conversation`, with `context`, the model's view of the conversation the
    /// session holds. Returns how many pieces are stored.
    pub fn write(
        &self,
        store: &mut Store,
        conversation: i64,
        context: &[Message],
    ) -> Result<usize, HistoryError> {
        store.save_context(
            conversation,
            &self.header,
            &encode(context),
            self.piece.as_deref(),
            self.fresh,
        )
    }
}

/// Whose context the saved tokens are.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Nothing saved, or saved for a conversation since left.
    #[default]
    Nobody,
    /// Saved for a conversation the history had no id for yet: the next save that names one
    /// continues it (the exchange that created it was saved under that id).
    New,
    Conversation(i64),
}

/// Tracks what of a session's context is saved for which conversation.
#[derive(Debug, Default)]
pub struct ContextKeeper {
    owner: Owner,
    /// The tokens the stored snapshot holds, in order.
    saved: Vec<u32>,
    pieces: usize,
}

impl ContextKeeper {
    pub fn new() -> ContextKeeper {
        ContextKeeper::default()
    }

    /// What to save of `session`'s context after a reply in `conversation` (None: one the
    /// history has not named yet): the rows from where the session first differs from what
    /// is saved, as one piece; the whole context when the conversation is another, or the
    /// snapshot has grown to [`MAX_PIECES`]. The caller must write it (a plan not written
    /// leaves the next pieces with a gap, which restore refuses, and the conversation is
    /// read again).
    pub fn plan(&mut self, conversation: Option<i64>, session: &Session) -> ContextSave {
        let tokens = session.tokens();
        let same = match (self.owner, conversation) {
            (Owner::Conversation(a), Some(b)) => a == b,
            (Owner::New, Some(_)) => true,
            _ => false,
        };
        let common = match same {
            true => self
                .saved
                .iter()
                .zip(tokens)
                .take_while(|(a, b)| a == b)
                .count(),
            false => 0,
        };
        // A context that only shrank has no new rows to append, but the stored pieces hold
        // more than it: rewrite it whole.
        let shrank = common < self.saved.len() && common == tokens.len();
        let fresh = !same || common == 0 || shrank || self.pieces >= MAX_PIECES;
        let from = if fresh { 0 } else { common };
        let piece = session.snapshot_piece(from);
        self.owner = conversation.map_or(Owner::New, Owner::Conversation);
        self.saved = tokens.to_vec();
        self.pieces = if fresh {
            1
        } else {
            self.pieces + usize::from(piece.is_some())
        };
        ContextSave {
            header: session.snapshot_header().to_bytes(),
            piece,
            fresh,
        }
    }

    /// [`ContextKeeper::plan`] and [`ContextSave::write`] in one, where the session and the
    /// history are at hand (the terminal chat).
    pub fn save(
        &mut self,
        store: &mut Store,
        conversation: i64,
        session: &Session,
        context: &[Message],
    ) -> Result<(), HistoryError> {
        let written = self
            .plan(Some(conversation), session)
            .write(store, conversation, context);
        if written.is_err() {
            // Not saved: the next save starts over rather than append after a gap.
            self.forget();
        }
        written.map(|_| ())
    }

    /// Restores `conversation`'s saved context into `session`: the model's view of the
    /// conversation, with the cache holding its tokens. None when nothing is saved. On an
    /// error (a snapshot for another model or cache type, a damaged one) the session is empty
    /// and the error says why, for a notice; the caller re-reads the conversation.
    pub fn restore(
        &mut self,
        store: &Store,
        conversation: i64,
        session: &mut Session,
    ) -> Result<Option<Vec<Message>>, ContextError> {
        self.forget();
        let Some(saved) = store.saved_context(conversation)? else {
            return Ok(None);
        };
        self.restore_saved(conversation, &saved, session).map(Some)
    }

    /// [`ContextKeeper::restore`] from a context already read from the history (the app
    /// reads it on the screen's thread and restores it where the session lives).
    pub fn restore_saved(
        &mut self,
        conversation: i64,
        saved: &SavedContext,
        session: &mut Session,
    ) -> Result<Vec<Message>, ContextError> {
        self.forget();
        let context = decode(&saved.context).ok_or(ContextError::Unreadable(conversation))?;
        let pieces: Vec<&[u8]> = saved.pieces.iter().map(Vec::as_slice).collect();
        if pieces.is_empty() {
            // Saved while the model's context was empty (every exchange refused).
            session.reset();
        } else {
            session.restore(&saved.header, &pieces)?;
        }
        self.owner = Owner::Conversation(conversation);
        self.saved = session.tokens().to_vec();
        self.pieces = pieces.len();
        Ok(context)
    }

    /// The next save starts a new snapshot (after a reset, or for another conversation).
    pub fn forget(&mut self) {
        *self = ContextKeeper::default();
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn encode(context: &[Message]) -> String {
    let items: Vec<serde_json::Value> = context
        .iter()
        .map(|m| serde_json::json!({"role": role_name(m.role), "content": m.content}))
        .collect();
    serde_json::Value::Array(items).to_string()
}

fn decode(text: &str) -> Option<Vec<Message>> {
    let items: Vec<serde_json::Value> = serde_json::from_str(text).ok()?;
    items
        .iter()
        .map(|m| {
            let role = match m.get("role")?.as_str()? {
                "system" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                _ => return None,
            };
            Some(Message::new(role, m.get("content")?.as_str()?))
        })
        .collect()
}
