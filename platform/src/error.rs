//! The crate's one error type.

/// What went wrong in the OS glue; messages name the thing that failed.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// The seccomp filter could not be built (a bug, or a rule the library rejects).
    #[error("network denial: cannot build the seccomp filter: {0}")]
    NetguardFilter(String),
    /// The kernel refused the filter (no seccomp support, or a thread could not be synced).
    #[error("network denial: the kernel refused the seccomp filter: {0}")]
    NetguardApply(String),
    /// The filter has no syscall table for this CPU architecture.
    #[error("network denial: no seccomp filter for the {0} architecture")]
    NetguardUnsupportedArch(&'static str),
    /// The key file could not be read, written or created.
    #[error("key file {path}: {source}")]
    KeyIo {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `unwrap` found no key file (it never creates one).
    #[error("key file {0} does not exist (was the key directory moved or changed?)")]
    KeyMissing(std::path::PathBuf),
    #[error("key file {path} holds {len} bytes, expected 32")]
    KeyBadLength { path: std::path::PathBuf, len: u64 },
    #[error("key file {0} is readable by other users (mode must be 0600)")]
    KeyPermissions(std::path::PathBuf),
    /// The wrapped key does not open: another key, another context, or altered bytes.
    #[error("the wrapped key does not open with this key store's key (wrong key, or tampered)")]
    KeyUnwrap,
    #[error("the system random generator failed")]
    Random,
    #[error("no key directory: set KOSTANT_KEY_DIR, XDG_CONFIG_HOME or HOME")]
    NoKeyDir,
    /// The wrapped key is locked with a passphrase and none was given.
    #[error(
        "the history is locked: give its passphrase in a file named by KOSTANT_PASSPHRASE_FILE"
    )]
    Locked,
    /// The passphrase given does not open the lock.
    #[error("that passphrase does not open the history")]
    WrongPassphrase,
    #[error("the passphrase is empty")]
    EmptyPassphrase,
    #[error("passphrase file {path}: {source}")]
    PassphraseFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A lock's header cannot be used (costs past the caps, too short).
    #[error("the history's passphrase lock is damaged: {0}")]
    LockDamaged(String),
    /// The Android Keystore refused or failed (the call that failed, and Java's exception).
    #[error("the Android Keystore: {0}")]
    Keystore(String),
}
