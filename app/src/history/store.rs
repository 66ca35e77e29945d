//! The history database: schema, connection settings, data-key unwrapping, and every read and
//! write. Text columns hold only sealed bytes (see `crypto.rs`); ids and timestamps are plain.
//!
//! Settings and why:
//! - `journal_mode = DELETE` (rollback journal), not WAL: after each commit the database is one
//!   file again. WAL keeps old page images (of deleted rows too) in `-wal` until a checkpoint,
//!   which makes "deleted means gone" harder to reason about; a chat history has one writer and
//!   tiny transactions, so WAL's concurrency buys nothing here.
//! - `synchronous = FULL`: a committed save survives a crash of the process or the machine.
//! - `secure_delete = ON`: deleted rows are overwritten with zeros, not left in free pages.
//! - `foreign_keys = ON`: deleting a conversation deletes its messages (ON DELETE CASCADE).
//! - `temp_store = MEMORY`: sorts and VACUUM's temporary copy never land in a temp file.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use kostant_platform::dirs::create_private_dir;
use kostant_platform::keystore::{random_key, DataKey, KeyStore};
use kostant_platform::passphrase::{self, LockParams, Passphrase};
use kostant_platform::PlatformError;

use super::crypto::{Cipher, Slot};
use super::{HistoryError, Role};

const FORMAT: &str = "kostant-history";
const SCHEMA_VERSION: i64 = 1;
/// Associated data of the wrapped data key in `meta`.
pub(crate) const DATA_KEY_CONTEXT: &[u8] = b"kostant-history/v1\0meta.data_key";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value ANY NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    title BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    created_at INTEGER NOT NULL,
    body BLOB NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
";

/// Safety eval reports, sealed like messages. Added after schema 1 shipped, and additive (older
/// builds never look at it), so it is created on open when missing instead of bumping the
/// schema version.
const EVAL_RUNS: &str = "
CREATE TABLE IF NOT EXISTS eval_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at INTEGER NOT NULL,
    report BLOB NOT NULL
) STRICT;
";

/// Conversations' saved contexts (see `Store::save_context`): the snapshot header in the clear
/// (model fingerprint, cache type and shape: nothing the user wrote), the model's view of the
/// conversation sealed, and the snapshot's pieces sealed, each bound to the conversation, its
/// place and the header. Additive like `eval_runs`; deleted with their conversation (cascade)
/// and by delete-all.
const SNAPSHOTS: &str = "
CREATE TABLE IF NOT EXISTS snapshots (
    conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    updated_at INTEGER NOT NULL,
    header BLOB NOT NULL,
    context BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS snapshot_pieces (
    conversation_id INTEGER NOT NULL REFERENCES snapshots(conversation_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) STRICT;
";

/// A conversation's saved context, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedContext {
    /// The engine's snapshot header (`kostant_engine::SnapshotHeader` bytes).
    pub header: Vec<u8>,
    /// The model's view of the conversation when it was saved, as the caller wrote it.
    pub context: String,
    /// The snapshot's pieces, in the order they apply.
    pub pieces: Vec<Vec<u8>>,
}

/// Longest title kept, in characters (the first user message, cut).
const TITLE_CHARS: usize = 60;

/// A conversation as `list` shows it; the title may fail its integrity check on its own.
#[derive(Debug)]
pub struct Conversation {
    pub id: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub title: Result<String, HistoryError>,
    pub messages: i64,
}

/// One stored message; `text` fails alone if its row was altered or moved.
#[derive(Debug)]
pub struct Message {
    pub id: i64,
    pub conversation_id: i64,
    pub role: Option<Role>,
    pub created_at_ms: i64,
    pub text: Result<String, HistoryError>,
}

/// One stored safety eval run; `report` (JSON) fails alone if its row was altered.
#[derive(Debug)]
pub struct EvalRun {
    pub id: i64,
    pub created_at_ms: i64,
    pub report: Result<String, HistoryError>,
}

/// What `search` found, and which messages could not be read.
#[derive(Debug)]
pub struct SearchResult {
    pub hits: Vec<Message>,
    pub unreadable: Vec<HistoryError>,
}

pub struct Store {
    pub(super) conn: Connection,
    pub(super) cipher: Cipher,
    keys: Box<dyn KeyStore>,
    pub(super) path: PathBuf,
    /// Called at each step of `delete_all` (tests: copy the files, or stop there as a crash).
    #[cfg(test)]
    pub(crate) erase_hook: Option<EraseHook>,
}

/// The steps of `delete_all` a test can stop at or look in on.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EraseStep {
    /// A new KEK is staged; nothing is deleted yet.
    Staged,
    /// The rows are deleted and the new wrapping written, not committed: the rollback journal
    /// holds the old pages.
    Deleted,
    /// Committed; the old KEK is not destroyed yet.
    Committed,
}

/// Sees each [`EraseStep`] with the database's path; an error stops `delete_all` there.
#[cfg(test)]
pub(crate) type EraseHook = Box<dyn FnMut(EraseStep, &Path) -> Result<(), HistoryError> + Send>;

#[cfg(test)]
fn erase_step(
    hook: &mut Option<EraseHook>,
    step: EraseStep,
    path: &Path,
) -> Result<(), HistoryError> {
    match hook {
        Some(h) => h(step, path),
        None => Ok(()),
    }
}

impl Store {
    /// Opens the history at `path`, creating it (and a data key wrapped by `keys`) when the file
    /// is absent or empty. Fails with a clear error on a damaged file or the wrong key.
    pub fn open(path: &Path, keys: impl KeyStore + 'static) -> Result<Store, HistoryError> {
        let io = |source| HistoryError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir(dir).map_err(|source| HistoryError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let fresh = match fs::metadata(path) {
            Ok(m) => m.len() == 0,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(io(e)),
        };
        if fresh {
            // Created owner-only before SQLite sees it; SQLite gives its journals the same mode.
            let mut opts = fs::OpenOptions::new();
            opts.write(true).create(true).truncate(false);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            opts.open(path).map_err(io)?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(path, e))?;
        let mut store = Store {
            conn,
            // Replaced below once the real data key is unwrapped.
            cipher: Cipher::new(&random_key()?),
            keys: Box::new(keys),
            path: path.to_path_buf(),
            #[cfg(test)]
            erase_hook: None,
        };
        store.configure()?;
        store.check_file()?;
        if fresh {
            store.initialize()?;
        }
        store.cipher = Cipher::new(&store.unwrap_data_key()?);
        store.conn.execute_batch(EVAL_RUNS).map_err(store.err())?;
        store.conn.execute_batch(SNAPSHOTS).map_err(store.err())?;
        store
            .conn
            .execute_batch(super::documents::DOCUMENTS)
            .map_err(store.err())?;
        Ok(store)
    }

    pub(super) fn err(&self) -> impl Fn(rusqlite::Error) -> HistoryError + '_ {
        |e| classify(&self.path, e)
    }

    fn configure(&self) -> Result<(), HistoryError> {
        self.conn
            .busy_timeout(Duration::from_secs(5))
            .map_err(self.err())?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
            .map_err(self.err())?;
        if !mode.eq_ignore_ascii_case("delete") {
            return Err(self.not_history(format!("journal mode stayed {mode}")));
        }
        self.conn
            .execute_batch(
                "PRAGMA synchronous = FULL;
                 PRAGMA secure_delete = ON;
                 PRAGMA foreign_keys = ON;
                 PRAGMA temp_store = MEMORY;",
            )
            .map_err(self.err())
    }

    fn not_history(&self, detail: String) -> HistoryError {
        HistoryError::NotHistory {
            path: self.path.clone(),
            detail,
        }
    }

    /// SQLite's quick structural check: catches a truncated or overwritten file at open, not
    /// halfway through a listing. Linear in the file size, which stays small for chat text.
    fn check_file(&self) -> Result<(), HistoryError> {
        let verdict: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(self.err())?;
        if verdict != "ok" {
            return Err(self.not_history(verdict));
        }
        Ok(())
    }

    /// Creates the schema and the wrapped data key, in one transaction so that two processes
    /// opening a new history at once agree on one key.
    fn initialize(&mut self) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        tx.execute_batch(SCHEMA).map_err(e)?;
        let has_key: Option<i64> = tx
            .query_row("SELECT 1 FROM meta WHERE key = 'data_key'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(e)?;
        if has_key.is_none() {
            let wrapped = self.keys.wrap(&random_key()?, DATA_KEY_CONTEXT)?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('format', ?1), ('schema_version', ?2), ('cipher', 'chacha20-poly1305'), ('data_key', ?3)",
                params![FORMAT, SCHEMA_VERSION, wrapped],
            )
            .map_err(e)?;
        }
        tx.commit().map_err(e)
    }

    fn unwrap_data_key(&self) -> Result<DataKey, HistoryError> {
        open_data_key(&*self.keys, &stored_data_key(&self.conn, &self.path)?)
    }

    /// Whether the data key is locked with a passphrase.
    pub fn is_locked(&self) -> Result<bool, HistoryError> {
        Ok(passphrase::is_locked(&stored_data_key(
            &self.conn, &self.path,
        )?))
    }

    /// Locks the history: the wrapped data key sealed once more under `pass` (Argon2id with
    /// `params`). Rows are not touched. Reopen the store (with the passphrase) to go on.
    pub fn lock(&mut self, pass: &Passphrase, params: LockParams) -> Result<(), HistoryError> {
        self.rewrap(|wrapped| match passphrase::is_locked(wrapped) {
            true => Err(HistoryError::AlreadyLocked),
            false => passphrase::lock(wrapped, pass, params, DATA_KEY_CONTEXT).map_err(lock_error),
        })
    }

    /// Removes the lock: back to the key store's wrapping alone.
    pub fn unlock(&mut self, pass: &Passphrase) -> Result<(), HistoryError> {
        self.rewrap(|wrapped| match passphrase::is_locked(wrapped) {
            false => Err(HistoryError::NotLocked),
            true => passphrase::unlock(wrapped, pass, DATA_KEY_CONTEXT).map_err(lock_error),
        })
    }

    /// Changes the passphrase: the lock opened with `old` and sealed under `new` (a new salt).
    /// The data key and every row stay as they are.
    pub fn change_passphrase(
        &mut self,
        old: &Passphrase,
        new: &Passphrase,
        params: LockParams,
    ) -> Result<(), HistoryError> {
        self.rewrap(|wrapped| match passphrase::is_locked(wrapped) {
            false => Err(HistoryError::NotLocked),
            true => {
                let inner =
                    passphrase::unlock(wrapped, old, DATA_KEY_CONTEXT).map_err(lock_error)?;
                passphrase::lock(&inner, new, params, DATA_KEY_CONTEXT).map_err(lock_error)
            }
        })
    }

    /// Replaces the stored wrapped data key with `change(stored)`, in one write transaction
    /// (the old wrapping stays until the commit, so a crash leaves one or the other).
    fn rewrap(
        &mut self,
        change: impl FnOnce(&[u8]) -> Result<Vec<u8>, HistoryError>,
    ) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        let wrapped = change(&stored_data_key(&tx, &path)?)?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'data_key'",
            [&wrapped],
        )
        .map_err(e)?;
        tx.commit().map_err(e)
    }

    /// Saves a user message and its reply in one transaction, creating the conversation
    /// (titled by the user message) when `conversation` is `None`. Returns the conversation id.
    pub fn append_exchange(
        &mut self,
        conversation: Option<i64>,
        user: &str,
        reply: &str,
    ) -> Result<i64, HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        let run = || -> Result<i64, StepError> {
            let conv = match conversation {
                Some(c) => {
                    touch_conversation(&tx, c)?;
                    c
                }
                None => insert_conversation(&tx, &self.cipher, &title_of(user))?,
            };
            insert_message(&tx, &self.cipher, conv, Role::User, user)?;
            insert_message(&tx, &self.cipher, conv, Role::Assistant, reply)?;
            Ok(conv)
        };
        let conv = run().map_err(|x| x.at(&path))?;
        tx.commit().map_err(e)?;
        Ok(conv)
    }

    /// Replaces the last exchange (the last two messages) of `conversation` with a new user
    /// message and reply, in one transaction: the app's regenerate and edit-and-resend. The old
    /// rows are deleted (zeroed in place by `secure_delete`), not kept as versions.
    pub fn replace_last_exchange(
        &mut self,
        conversation: i64,
        user: &str,
        reply: &str,
    ) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        let run = || -> Result<(), StepError> {
            touch_conversation(&tx, conversation)?;
            tx.execute(
                "DELETE FROM messages WHERE id IN
                   (SELECT id FROM messages WHERE conversation_id = ?1 ORDER BY id DESC LIMIT 2)",
                [conversation],
            )?;
            insert_message(&tx, &self.cipher, conversation, Role::User, user)?;
            insert_message(&tx, &self.cipher, conversation, Role::Assistant, reply)?;
            Ok(())
        };
        run().map_err(|x| x.at(&path))?;
        tx.commit().map_err(e)?;
        Ok(())
    }

    /// Every conversation, most recently updated first.
    /// Where the key that unlocks this history lives, for the user to see.
    pub fn key_location(&self) -> String {
        self.keys.describe()
    }

    pub fn list(&self) -> Result<Vec<Conversation>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.id, c.created_at, c.updated_at, c.title,
                        (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id)
                 FROM conversations c ORDER BY c.updated_at DESC, c.id DESC",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (id, created, updated, title, n) = row.map_err(self.err())?;
            out.push(Conversation {
                id,
                created_at_ms: created,
                updated_at_ms: updated,
                title: self.cipher.open(Slot::Title { conversation: id }, &title),
                messages: n,
            });
        }
        Ok(out)
    }

    /// One conversation's summary; `NoConversation` if there is none with this id.
    pub fn conversation(&self, id: i64) -> Result<Conversation, HistoryError> {
        self.list()?
            .into_iter()
            .find(|c| c.id == id)
            .ok_or(HistoryError::NoConversation(id))
    }

    /// The messages of one conversation in order.
    pub fn messages(&self, conversation: i64) -> Result<Vec<Message>, HistoryError> {
        let exists: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM conversations WHERE id = ?1",
                [conversation],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        if exists.is_none() {
            return Err(HistoryError::NoConversation(conversation));
        }
        self.query_messages(Some(conversation))
    }

    fn query_messages(&self, conversation: Option<i64>) -> Result<Vec<Message>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, conversation_id, role, created_at, body FROM messages
                 WHERE ?1 IS NULL OR conversation_id = ?1 ORDER BY conversation_id, id",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([conversation], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Vec<u8>>(4)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (id, conv, role, created, body) = row.map_err(self.err())?;
            let role = Role::parse(&role);
            let text = match role {
                Some(role) => self.cipher.open(
                    Slot::Message {
                        conversation: conv,
                        message: id,
                        role,
                    },
                    &body,
                ),
                None => Err(HistoryError::Integrity(format!(
                    "message {id} of conversation {conv}"
                ))),
            };
            out.push(Message {
                id,
                conversation_id: conv,
                role,
                created_at_ms: created,
                text,
            });
        }
        Ok(out)
    }

    /// Decrypts every message and keeps those containing `needle` (case-insensitive). There is
    /// no plaintext index by design: an index would put the words on disk.
    pub fn search(&self, needle: &str) -> Result<SearchResult, HistoryError> {
        let needle = needle.to_lowercase();
        let mut result = SearchResult {
            hits: Vec::new(),
            unreadable: Vec::new(),
        };
        for mut m in self.query_messages(None)? {
            match std::mem::replace(&mut m.text, Ok(String::new())) {
                Ok(t) => {
                    if t.to_lowercase().contains(&needle) {
                        m.text = Ok(t);
                        result.hits.push(m);
                    }
                }
                Err(e) => result.unreadable.push(e),
            }
        }
        Ok(result)
    }

    /// Deletes a conversation and (by cascade) its messages; their bytes are zeroed in place.
    pub fn delete(&mut self, conversation: i64) -> Result<(), HistoryError> {
        let n = self
            .conn
            .execute("DELETE FROM conversations WHERE id = ?1", [conversation])
            .map_err(self.err())?;
        if n == 0 {
            return Err(HistoryError::NoConversation(conversation));
        }
        Ok(())
    }

    /// Deletes everything and erases what could open it (a crypto-erase): a new data key,
    /// wrapped under a new key-encryption key, and the old KEK destroyed; then VACUUMs so the
    /// file holds no free pages. Whatever of the old history survives on disk (the rollback
    /// journal of the delete, removed after the commit, held the old pages, the old wrapped
    /// data key among them, in blocks the file system freed but did not clear) then opens with
    /// nothing the key store holds. Returns how many conversations were deleted.
    ///
    /// A crash at any point leaves a history that opens: before the commit, the old one, whole,
    /// under the old KEK (the staged new KEK wraps nothing stored and is dropped by the next
    /// delete-all); after it, the new empty one, under the staged KEK, which the next open
    /// finds and puts in place (`KeyStore::unwrap`).
    pub fn delete_all(&mut self) -> Result<usize, HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let new_key = random_key()?;
        // The write lock first: no other delete-all can stage a KEK until this one commits.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        // Unwrapping the stored key finishes a rotation a crash left half done, so every KEK
        // still staged wraps nothing stored (begin_rotation drops them).
        open_data_key(&*self.keys, &stored_data_key(&tx, &path)?)?;
        let wrapped = self.keys.begin_rotation(&new_key, DATA_KEY_CONTEXT)?;
        #[cfg(test)]
        erase_step(&mut self.erase_hook, EraseStep::Staged, &path)?;
        tx.execute("DELETE FROM snapshot_pieces", []).map_err(e)?;
        tx.execute("DELETE FROM snapshots", []).map_err(e)?;
        tx.execute("DELETE FROM messages", []).map_err(e)?;
        tx.execute("DELETE FROM eval_runs", []).map_err(e)?;
        tx.execute("DELETE FROM document_chunks", []).map_err(e)?;
        tx.execute("DELETE FROM documents", []).map_err(e)?;
        let n = tx.execute("DELETE FROM conversations", []).map_err(e)?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'data_key'",
            [&wrapped],
        )
        .map_err(e)?;
        #[cfg(test)]
        erase_step(&mut self.erase_hook, EraseStep::Deleted, &path)?;
        tx.commit().map_err(e)?;
        self.cipher = Cipher::new(&new_key);
        #[cfg(test)]
        erase_step(&mut self.erase_hook, EraseStep::Committed, &path)?;
        self.keys.finish_rotation(&wrapped, DATA_KEY_CONTEXT)?;
        self.conn.execute_batch("VACUUM").map_err(e)?;
        Ok(n)
    }

    /// Saves `conversation`'s context in one transaction: its snapshot `header`, the model's
    /// view of the conversation (`context`, replacing the stored one), and `piece` appended
    /// after the stored pieces; with `fresh`, or a header unlike the stored one, the stored
    /// pieces are dropped first (the piece then holds the whole context). A kill at any point
    /// leaves the previous saved context or this one. Returns how many pieces are stored.
    pub fn save_context(
        &mut self,
        conversation: i64,
        header: &[u8],
        context: &str,
        piece: Option<&[u8]>,
        fresh: bool,
    ) -> Result<usize, HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let header_hash = sha256(header);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        let run = || -> Result<usize, StepError> {
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM conversations WHERE id = ?1",
                    [conversation],
                    |r| r.get(0),
                )
                .optional()?;
            if exists.is_none() {
                return Err(HistoryError::NoConversation(conversation).into());
            }
            let stored: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT header FROM snapshots WHERE conversation_id = ?1",
                    [conversation],
                    |r| r.get(0),
                )
                .optional()?;
            if fresh || stored.as_deref() != Some(header) {
                tx.execute(
                    "DELETE FROM snapshot_pieces WHERE conversation_id = ?1",
                    [conversation],
                )?;
            }
            let sealed = self.cipher.seal(
                Slot::SnapshotContext {
                    conversation,
                    header: header_hash,
                },
                context,
            )?;
            tx.execute(
                "INSERT INTO snapshots (conversation_id, updated_at, header, context)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (conversation_id) DO UPDATE
                 SET updated_at = ?2, header = ?3, context = ?4",
                params![conversation, now_ms(), header, sealed],
            )?;
            if let Some(piece) = piece {
                let seq: i64 = tx.query_row(
                    "SELECT coalesce(max(seq), -1) + 1 FROM snapshot_pieces WHERE conversation_id = ?1",
                    [conversation],
                    |r| r.get(0),
                )?;
                let slot = Slot::SnapshotPiece {
                    conversation,
                    seq,
                    header: header_hash,
                };
                tx.execute(
                    "INSERT INTO snapshot_pieces (conversation_id, seq, body) VALUES (?1, ?2, ?3)",
                    params![conversation, seq, self.cipher.seal_bytes(slot, piece)?],
                )?;
            }
            let n: i64 = tx.query_row(
                "SELECT count(*) FROM snapshot_pieces WHERE conversation_id = ?1",
                [conversation],
                |r| r.get(0),
            )?;
            Ok(n as usize)
        };
        let n = run().map_err(|x| x.at(&path))?;
        tx.commit().map_err(e)?;
        Ok(n)
    }

    /// `conversation`'s saved context, opened; None when none is saved. Fails on a value
    /// that was altered or moved (the caller then re-reads the conversation).
    pub fn saved_context(&self, conversation: i64) -> Result<Option<SavedContext>, HistoryError> {
        let row: Option<(Vec<u8>, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT header, context FROM snapshots WHERE conversation_id = ?1",
                [conversation],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        let Some((header, sealed_context)) = row else {
            return Ok(None);
        };
        let header_hash = sha256(&header);
        let context = self.cipher.open(
            Slot::SnapshotContext {
                conversation,
                header: header_hash,
            },
            &sealed_context,
        )?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT seq, body FROM snapshot_pieces WHERE conversation_id = ?1 ORDER BY seq",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([conversation], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(self.err())?;
        let mut pieces = Vec::new();
        for (i, row) in rows.enumerate() {
            let (seq, sealed) = row.map_err(self.err())?;
            let slot = Slot::SnapshotPiece {
                conversation,
                seq,
                header: header_hash,
            };
            // A gap in the sequence is a deleted piece: what follows it would not restore.
            if seq != i as i64 {
                return Err(HistoryError::Integrity(slot.to_string()));
            }
            pieces.push(self.cipher.open_bytes_owned(slot, sealed)?);
        }
        Ok(Some(SavedContext {
            header,
            context,
            pieces,
        }))
    }

    /// Forgets `conversation`'s saved context (its messages stay).
    pub fn delete_context(&mut self, conversation: i64) -> Result<(), HistoryError> {
        self.conn
            .execute(
                "DELETE FROM snapshots WHERE conversation_id = ?1",
                [conversation],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Stores a safety eval report (JSON), sealed; returns the run's id.
    pub fn save_eval_run(&mut self, report: &str) -> Result<i64, HistoryError> {
        let path = self.path.clone();
        let e = |e| classify(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        let id = next_id(&tx, "eval_runs").map_err(e)?;
        let sealed = self.cipher.seal(Slot::EvalRun { run: id }, report)?;
        tx.execute(
            "INSERT INTO eval_runs (id, created_at, report) VALUES (?1, ?2, ?3)",
            params![id, now_ms(), sealed],
        )
        .map_err(e)?;
        tx.commit().map_err(e)?;
        Ok(id)
    }

    /// Stored eval runs, newest first.
    pub fn eval_runs(&self) -> Result<Vec<EvalRun>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, created_at, report FROM eval_runs ORDER BY id DESC")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (id, created_at_ms, sealed) = row.map_err(self.err())?;
            out.push(EvalRun {
                id,
                created_at_ms,
                report: self.cipher.open(Slot::EvalRun { run: id }, &sealed),
            });
        }
        Ok(out)
    }

    /// Every conversation with its messages, for export; fails on the first unreadable value.
    pub fn everything(&self) -> Result<Vec<(Conversation, Vec<Message>)>, HistoryError> {
        let mut out = Vec::new();
        for c in self.list()? {
            let c = Conversation {
                title: Ok(c.title?),
                ..c
            };
            let mut msgs = Vec::new();
            for m in self.messages(c.id)? {
                msgs.push(Message {
                    text: Ok(m.text?),
                    ..m
                });
            }
            out.push((c, msgs));
        }
        Ok(out)
    }
}

/// What can be read of a history without its key: whether it is locked, and how many bytes of
/// sealed data each kind holds (sizes are no secret: anyone with the file sees them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    pub locked: bool,
    pub file_bytes: u64,
    /// Conversations' titles and messages.
    pub chats: u64,
    /// Saved contexts.
    pub contexts: u64,
    /// Documents' names, passages and vectors.
    pub documents: u64,
    /// Safety eval reports.
    pub eval_runs: u64,
}

/// Reads `path` as [`Inspection`] without a key, read-only (nothing is created or changed);
/// `None` when there is no history there.
pub fn inspect(path: &Path) -> Result<Option<Inspection>, HistoryError> {
    let file_bytes = match fs::metadata(path) {
        Ok(m) if m.len() > 0 => m.len(),
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(HistoryError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(path, e))?;
    let locked = kostant_platform::passphrase::is_locked(&stored_data_key(&conn, path)?);
    // A table an older history lacks holds nothing.
    let sum = |sql: &str| -> u64 {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map_or(0, |n| n.max(0) as u64)
    };
    Ok(Some(Inspection {
        locked,
        file_bytes,
        chats: sum("SELECT coalesce(sum(length(title)), 0) FROM conversations")
            + sum("SELECT coalesce(sum(length(body)), 0) FROM messages"),
        contexts: sum("SELECT coalesce(sum(length(header) + length(context)), 0) FROM snapshots")
            + sum("SELECT coalesce(sum(length(body)), 0) FROM snapshot_pieces"),
        documents: sum("SELECT coalesce(sum(length(meta)), 0) FROM documents")
            + sum("SELECT coalesce(sum(length(body) + length(vector)), 0) FROM document_chunks"),
        eval_runs: sum("SELECT coalesce(sum(length(report)), 0) FROM eval_runs"),
    }))
}

/// The wrapped data key in `meta`, once the file shows it is a Kostant history of this schema.
fn stored_data_key(conn: &Connection, path: &Path) -> Result<Vec<u8>, HistoryError> {
    let not_history = |detail: String| HistoryError::NotHistory {
        path: path.to_path_buf(),
        detail,
    };
    let has_meta: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| classify(path, e))?;
    if !has_meta {
        return Err(not_history("no meta table".into()));
    }
    let meta = |key: &str| -> Result<Option<rusqlite::types::Value>, HistoryError> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| classify(path, e))
    };
    use rusqlite::types::Value;
    match meta("format")? {
        Some(Value::Text(f)) if f == FORMAT => {}
        _ => return Err(not_history("no Kostant history format marker".into())),
    }
    match meta("schema_version")? {
        Some(Value::Integer(SCHEMA_VERSION)) => {}
        other => return Err(not_history(format!("unsupported schema version {other:?}"))),
    }
    match meta("data_key")? {
        Some(Value::Blob(wrapped)) => Ok(wrapped),
        _ => Err(not_history("no wrapped data key".into())),
    }
}

/// Unwraps the stored data key; a key that does not open it is a clear error.
fn open_data_key(keys: &dyn KeyStore, wrapped: &[u8]) -> Result<DataKey, HistoryError> {
    keys.unwrap(wrapped, DATA_KEY_CONTEXT).map_err(|e| match e {
        PlatformError::KeyUnwrap => HistoryError::WrongKey {
            key: keys.describe(),
        },
        other => lock_error(other),
    })
}

/// The history's words for the passphrase lock's refusals.
fn lock_error(e: PlatformError) -> HistoryError {
    match e {
        PlatformError::Locked => HistoryError::Locked,
        PlatformError::WrongPassphrase => HistoryError::WrongPassphrase,
        other => HistoryError::Key(other),
    }
}

/// An error inside a transaction step, before the path is known to attach.
pub(super) enum StepError {
    Sql(rusqlite::Error),
    History(HistoryError),
}

impl StepError {
    pub(super) fn at(self, path: &Path) -> HistoryError {
        match self {
            StepError::Sql(e) => classify(path, e),
            StepError::History(h) => h,
        }
    }
}

impl From<rusqlite::Error> for StepError {
    fn from(e: rusqlite::Error) -> Self {
        StepError::Sql(e)
    }
}

impl From<HistoryError> for StepError {
    fn from(e: HistoryError) -> Self {
        StepError::History(e)
    }
}

/// The next id of an AUTOINCREMENT table, never reusing one (the id is sealed into the row's
/// associated data, so it must be known before the insert). Runs inside a write transaction.
pub(super) fn next_id(tx: &Connection, table: &str) -> Result<i64, rusqlite::Error> {
    let sql = format!(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{table}'), 0),
                    coalesce((SELECT max(id) FROM {table}), 0)) + 1"
    );
    tx.query_row(&sql, [], |r| r.get(0))
}

fn insert_conversation(tx: &Connection, cipher: &Cipher, title: &str) -> Result<i64, StepError> {
    let id = next_id(tx, "conversations")?;
    let sealed = cipher.seal(Slot::Title { conversation: id }, title)?;
    let now = next_update_stamp(tx)?;
    tx.execute(
        "INSERT INTO conversations (id, created_at, updated_at, title) VALUES (?1, ?2, ?2, ?3)",
        params![id, now, sealed],
    )?;
    Ok(id)
}

fn touch_conversation(tx: &Connection, conversation: i64) -> Result<(), StepError> {
    let n = tx.execute(
        "UPDATE conversations SET updated_at = ?2 WHERE id = ?1",
        params![conversation, next_update_stamp(tx)?],
    )?;
    if n == 0 {
        return Err(HistoryError::NoConversation(conversation).into());
    }
    Ok(())
}

/// The clock for `updated_at`, kept strictly increasing across conversations: the list's
/// order is "last written first", which a millisecond clock cannot promise on its own (two
/// saves in the same millisecond tie, and a clock set back would sink the newest).
fn next_update_stamp(tx: &Connection) -> Result<i64, StepError> {
    let last: Option<i64> = tx.query_row("SELECT max(updated_at) FROM conversations", [], |r| {
        r.get(0)
    })?;
    let now = now_ms();
    Ok(last.map_or(now, |l| now.max(l.saturating_add(1))))
}

fn insert_message(
    tx: &Connection,
    cipher: &Cipher,
    conversation: i64,
    role: Role,
    text: &str,
) -> Result<i64, StepError> {
    let id = next_id(tx, "messages")?;
    let slot = Slot::Message {
        conversation,
        message: id,
        role,
    };
    let sealed = cipher.seal(slot, text)?;
    tx.execute(
        "INSERT INTO messages (id, conversation_id, role, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, conversation, role.as_str(), now_ms(), sealed],
    )?;
    Ok(id)
}

/// The first line of the first user message, cut to `TITLE_CHARS` characters.
fn title_of(user: &str) -> String {
    let line = user.trim().lines().next().unwrap_or("");
    let mut t: String = line.chars().take(TITLE_CHARS).collect();
    if line.chars().count() > TITLE_CHARS {
        t.push('…');
    }
    t
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A damaged or foreign file reads as "not a history database"; other errors keep SQLite's.
pub(super) fn classify(path: &Path, e: rusqlite::Error) -> HistoryError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => HistoryError::NotHistory {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => HistoryError::Db {
            path: path.to_path_buf(),
            source: e,
        },
    }
}
