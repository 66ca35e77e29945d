//! The History screen's logic: conversations newest first with their decrypted titles,
//! search, open, delete, and delete-all behind a confirmation.

use std::collections::BTreeSet;

use super::{AppError, SharedStore};
use crate::history::Role;

/// One row of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversationItem {
    pub id: i64,
    /// The decrypted title, or a note that it did not open.
    pub title: String,
    /// "2026-11-29 16:05" in UTC.
    pub when: String,
    pub messages: i64,
}

pub struct HistoryController {
    store: SharedStore,
    query: String,
    items: Vec<ConversationItem>,
    confirming_delete_all: bool,
    status: Option<String>,
}

impl HistoryController {
    pub fn new(store: SharedStore) -> HistoryController {
        let mut h = HistoryController {
            store,
            query: String::new(),
            items: Vec::new(),
            confirming_delete_all: false,
            status: None,
        };
        h.refresh();
        h
    }

    pub fn items(&self) -> &[ConversationItem] {
        &self.items
    }

    pub fn query(&self) -> &str {
        &self.query
    }

    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// Reloads the list (after a chat saved an exchange, say), keeping the search.
    pub fn refresh(&mut self) {
        match self.load() {
            Ok(items) => {
                self.items = items;
                self.status = None;
            }
            Err(e) => {
                self.items.clear();
                self.status = Some(e.to_string());
            }
        }
    }

    /// Shows only conversations whose title or messages contain `query` (case-insensitive).
    pub fn search(&mut self, query: &str) {
        self.query = query.trim().to_string();
        self.refresh();
    }

    fn load(&self) -> Result<Vec<ConversationItem>, AppError> {
        let store = self.store.borrow();
        let all = store.list()?;
        let keep: Option<BTreeSet<i64>> = if self.query.is_empty() {
            None
        } else {
            let found = store.search(&self.query)?;
            Some(found.hits.iter().map(|m| m.conversation_id).collect())
        };
        let needle = self.query.to_lowercase();
        Ok(all
            .into_iter()
            .filter_map(|c| {
                let title = match &c.title {
                    Ok(t) => t.clone(),
                    Err(e) => format!("(title does not open: {e})"),
                };
                let shown = match &keep {
                    None => true,
                    Some(ids) => ids.contains(&c.id) || title.to_lowercase().contains(&needle),
                };
                shown.then(|| ConversationItem {
                    id: c.id,
                    title,
                    when: crate::history::time::format_utc(c.updated_at_ms),
                    messages: c.messages,
                })
            })
            .collect())
    }

    /// The messages of conversation `id`, for the chat to continue it.
    pub fn open(&self, id: i64) -> Result<Vec<(Role, String)>, AppError> {
        let messages = self.store.borrow().messages(id)?;
        messages
            .into_iter()
            .map(|m| {
                let role = m.role.unwrap_or(Role::User);
                Ok((role, m.text?))
            })
            .collect()
    }

    pub fn delete(&mut self, id: i64) -> Result<(), AppError> {
        self.store.borrow_mut().delete(id)?;
        self.refresh();
        Ok(())
    }

    /// First step of delete-all: the screen asks for a confirmation.
    pub fn request_delete_all(&mut self) {
        self.confirming_delete_all = true;
    }

    pub fn cancel_delete_all(&mut self) {
        self.confirming_delete_all = false;
    }

    pub fn confirming_delete_all(&self) -> bool {
        self.confirming_delete_all
    }

    /// Second step: deletes everything (new data key, VACUUM). Without the first step it does
    /// nothing and returns `Nothing`.
    pub fn confirm_delete_all(&mut self) -> Result<usize, AppError> {
        if !self.confirming_delete_all {
            return Err(AppError::Nothing("confirmed delete-all"));
        }
        self.confirming_delete_all = false;
        let n = self.store.borrow_mut().delete_all()?;
        self.refresh();
        Ok(n)
    }
}
