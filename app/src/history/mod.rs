//! The encrypted local chat history: conversations and their messages in a SQLite file, every
//! piece of user-visible text sealed with the data key before it reaches the disk.
//!
//! Layout: `crypto.rs` seals and opens rows (AEAD bound to the row's place), `store.rs` owns the
//! database (schema, pragmas, key unwrapping, reads and deletes), `export.rs` writes a
//! passphrase-encrypted copy, `time.rs` formats its dates. The data key is random, wrapped by the
//! platform [`KeyStore`](kostant_platform::keystore::KeyStore), and kept wrapped in the `meta`
//! table; the key-encryption key lives elsewhere (see `paths`), so the data directory alone does
//! not open.
//!
//! Search decrypts every message and matches in memory: there is no plaintext index, by design.

pub mod context;
pub mod crypto;
pub mod documents;
pub mod export;
pub mod store;
#[cfg(test)]
mod tests;
pub mod time;
pub mod wipe;

use std::path::{Path, PathBuf};

#[cfg(not(target_os = "android"))]
use kostant_platform::keystore::FileKeyStore;
use kostant_platform::passphrase::LockedKeyStore;
pub use kostant_platform::passphrase::{LockParams, Passphrase};
use kostant_platform::PlatformError;

pub use store::{SavedContext, Store};

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "history.sqlite3";

/// What a temporary chat tells the user (`kostant chat --temporary`, the app's banner).
pub const TEMPORARY_NOTICE: &str =
    "Temporary: this chat is not saved and is cleared when you leave it";

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

/// What went wrong with the history. Messages name the file, conversation or message.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history database {path}: {source}")]
    Db {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path} is not a readable Kostant history database (damaged or truncated?): {detail}")]
    NotHistory { path: PathBuf, detail: String },
    #[error("history key: {0}")]
    Key(#[from] PlatformError),
    #[error(
        "the history's data key does not open with the {key} \
         (wrong key directory, or the database belongs to another key)"
    )]
    WrongKey { key: String },
    /// Locked with a passphrase, and none was given. Same words as the platform's.
    #[error(
        "the history is locked: give its passphrase in a file named by KOSTANT_PASSPHRASE_FILE"
    )]
    Locked,
    #[error("that passphrase does not open the history")]
    WrongPassphrase,
    #[error(
        "the history is locked already (to change its passphrase: kostant history passphrase)"
    )]
    AlreadyLocked,
    #[error("the history is not locked")]
    NotLocked,
    #[error("{0}: integrity check failed (the stored ciphertext was altered or moved)")]
    Integrity(String),
    #[error("no conversation {0}")]
    NoConversation(i64),
    #[error("no document {0} (see `kostant docs list`)")]
    NoDocument(i64),
    #[error(
        "the key directory {key_dir} is inside or around the data directory {data_dir}; \
         keep the key apart from the data it protects"
    )]
    KeyNextToData { key_dir: PathBuf, data_dir: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no data directory: set --data-dir, KOSTANT_DATA_DIR, XDG_DATA_HOME or HOME")]
    NoDataDir,
    #[error("the system random generator failed")]
    Random,
    #[error("export: {0}")]
    Export(String),
}

/// `--data-dir`/`KOSTANT_DATA_DIR` if given, else `$XDG_DATA_HOME/kostant`, else
/// `~/.local/share/kostant`.
pub fn data_dir(given: Option<&Path>) -> Result<PathBuf, HistoryError> {
    if let Some(d) = given {
        return Ok(d.to_path_buf());
    }
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("XDG_DATA_HOME") {
        return Ok(d.join("kostant"));
    }
    env("HOME")
        .map(|h| h.join(".local").join("share").join("kostant"))
        .ok_or(HistoryError::NoDataDir)
}

/// Opens (creating if needed) the history in `data_dir` with the platform's key store: on
/// Android the Keystore (and nothing weaker if it fails: the error says why, and there is no
/// history); elsewhere the file key store from `KOSTANT_KEY_DIR` / the config directory,
/// refusing a key directory inside the data directory.
#[cfg(target_os = "android")]
pub fn open_default(data_dir: &Path) -> Result<Store, HistoryError> {
    open_with_passphrase(data_dir, None)
}

/// As [`open_default`], with the passphrase lock's layer over the Keystore (the phone's
/// own lock, issue 62's device lock, is meant to replace it there).
#[cfg(target_os = "android")]
pub fn open_with_passphrase(
    data_dir: &Path,
    passphrase: Option<Passphrase>,
) -> Result<Store, HistoryError> {
    let keys = kostant_platform::android_keystore::AndroidKeyStore::new()?;
    Store::open(
        &data_dir.join(DB_FILE),
        LockedKeyStore::new(keys, passphrase),
    )
}

/// Opens (creating if needed) the history in `data_dir` with the desktop file key store from
/// `KOSTANT_KEY_DIR` / the config directory, refusing a key directory inside the data directory.
/// A locked history opens with the passphrase in the file `KOSTANT_PASSPHRASE_FILE` names.
#[cfg(not(target_os = "android"))]
pub fn open_default(data_dir: &Path) -> Result<Store, HistoryError> {
    open_with_passphrase(data_dir, passphrase_from_env()?)
}

/// The passphrase in the file `KOSTANT_PASSPHRASE_FILE` names, if it is set.
pub fn passphrase_from_env() -> Result<Option<Passphrase>, HistoryError> {
    match std::env::var_os(PASSPHRASE_ENV).filter(|v| !v.is_empty()) {
        Some(path) => Ok(Some(Passphrase::from_file(Path::new(&path))?)),
        None => Ok(None),
    }
}

/// The variable naming a file with the history's passphrase.
pub const PASSPHRASE_ENV: &str = "KOSTANT_PASSPHRASE_FILE";

/// As [`open_default`], with the passphrase given (the app's dialog, `--passphrase-file`);
/// `None` opens an unlocked history only.
#[cfg(not(target_os = "android"))]
pub fn open_with_passphrase(
    data_dir: &Path,
    passphrase: Option<Passphrase>,
) -> Result<Store, HistoryError> {
    let key_dir = FileKeyStore::default_dir()?;
    let (k, d) = (normalize(&key_dir), normalize(data_dir));
    if k.starts_with(&d) || d.starts_with(&k) {
        return Err(HistoryError::KeyNextToData {
            key_dir,
            data_dir: data_dir.to_path_buf(),
        });
    }
    let keys = LockedKeyStore::new(FileKeyStore::new(key_dir), passphrase);
    Store::open(&data_dir.join(DB_FILE), keys)
}

/// An absolute path with symlinks resolved as far as the path exists.
#[cfg(not(target_os = "android"))]
fn normalize(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(c, |acc: PathBuf, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return abs,
        }
    }
}

/// Saves a chat as it happens: the first exchange creates the conversation (titled by the
/// first user message), later ones append to it.
pub struct Recorder {
    store: Store,
    conversation: Option<i64>,
}

impl Recorder {
    pub fn open(data_dir: Option<&Path>) -> Result<Recorder, HistoryError> {
        let store = open_default(&self::data_dir(data_dir)?)?;
        Ok(Recorder {
            store,
            conversation: None,
        })
    }

    /// Saves a user message and its reply in one transaction.
    pub fn record(&mut self, user: &str, reply: &str) -> Result<i64, HistoryError> {
        let id = self.store.append_exchange(self.conversation, user, reply)?;
        self.conversation = Some(id);
        Ok(id)
    }

    /// One line for the user: history is on, encrypted, and where its key is kept. On a desktop
    /// without an OS keyring the key is a 0600 file, and the user should know that.
    pub fn notice(&self) -> String {
        let lock = match self.store.is_locked() {
            Ok(true) => "locked with a passphrase, and ",
            _ => "",
        };
        format!(
            "history: saved encrypted (ChaCha20-Poly1305); {lock}{} — a file, as this desktop offers no OS keystore; --no-history to not save",
            self.store.key_location()
        )
    }

    /// The conversation the next exchange is appended to, if any.
    pub fn conversation(&self) -> Option<i64> {
        self.conversation
    }

    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Appends the next exchanges to conversation `id` and returns its messages (each with
    /// its role, or the reason it does not open).
    pub fn continue_conversation(&mut self, id: i64) -> Result<Vec<store::Message>, HistoryError> {
        self.store.conversation(id)?;
        let messages = self.store.messages(id)?;
        self.conversation = Some(id);
        Ok(messages)
    }

    /// The next exchange starts a new conversation (after `/reset`).
    pub fn new_conversation(&mut self) {
        self.conversation = None;
    }
}
