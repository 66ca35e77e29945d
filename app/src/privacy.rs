//! What is true about the user's privacy at this moment, read from the same functions the
//! checks use: the netguard's status (as `kostant doctor`'s check), the key directory the
//! history opens with, the history file read without its key, the shipped Android manifest.
//! Settings' Privacy section shows [`Facts::lines`]; `kostant doctor --json` prints
//! [`Facts::to_json`]. Nothing here is what we hope: a fact we cannot read says so.

use std::path::{Path, PathBuf};

use kostant_platform::netguard::{self, NetguardStatus};
use serde_json::{json, Value};

use crate::history::store::{inspect, Inspection};
use crate::history::DB_FILE;

/// The shipped manifest: its permissions and backup flag are the phone's facts.
const ANDROID_MANIFEST: &str = include_str!("../../platform/android/AndroidManifest.xml");

/// Whether a protection is in force, off, or has no meaning on this platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    /// In force (backups off, learning off, screenshots blocked); the detail says how.
    InForce(String),
    /// Not in force; the detail says why.
    NotInForce(String),
    NotApplicable(&'static str),
}

impl Setting {
    fn state(&self) -> &'static str {
        match self {
            Setting::InForce(_) => "in_force",
            Setting::NotInForce(_) => "not_in_force",
            Setting::NotApplicable(_) => "not_applicable",
        }
    }

    fn detail(&self) -> &str {
        match self {
            Setting::InForce(d) | Setting::NotInForce(d) => d,
            Setting::NotApplicable(d) => d,
        }
    }
}

/// What protects the history's data key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyProtection {
    /// The Android Keystore (and a passphrase over it when locked).
    Keystore { passphrase: bool },
    /// A passphrase over the key file.
    Passphrase { key_file: PathBuf },
    /// The key file alone.
    File { key_file: PathBuf },
    /// No history yet (or it could not be read): the detail says which.
    Nothing(String),
}

impl KeyProtection {
    fn kind(&self) -> &'static str {
        match self {
            KeyProtection::Keystore { .. } => "keystore",
            KeyProtection::Passphrase { .. } => "passphrase",
            KeyProtection::File { .. } => "file",
            KeyProtection::Nothing(_) => "none",
        }
    }

    fn text(&self) -> String {
        match self {
            KeyProtection::Keystore { passphrase: false } => "the Android Keystore".into(),
            KeyProtection::Keystore { passphrase: true } => {
                "a passphrase, over the Android Keystore".into()
            }
            KeyProtection::Passphrase { key_file } => format!(
                "a passphrase, over the key file {} (both are needed)",
                key_file.display()
            ),
            KeyProtection::File { key_file } => format!(
                "a file: {} (anyone who can read your files can open the history; \
                 `kostant history lock` adds a passphrase)",
                key_file.display()
            ),
            KeyProtection::Nothing(why) => why.clone(),
        }
    }
}

/// The facts, gathered at one moment.
#[derive(Clone, Debug)]
pub struct Facts {
    pub network: NetguardStatus,
    /// Permissions the app holds.
    pub permissions: Vec<String>,
    pub backups: Setting,
    pub keyboard_learning: Setting,
    pub screenshots: Setting,
    pub data_dir: Option<PathBuf>,
    pub key_dir: Option<PathBuf>,
    pub key_protection: KeyProtection,
    /// The history read without its key, when there is one.
    pub stored: Option<Inspection>,
    /// Whether the chat on screen is temporary; `None` where there is no chat (the CLI).
    pub temporary_chat: Option<bool>,
}

/// Gathers the facts for the history in `data_dir` (`None`: no data directory known).
pub fn gather(data_dir: Option<&Path>, temporary_chat: Option<bool>) -> Facts {
    let key_dir = key_dir();
    let stored = data_dir.map(|d| inspect(&d.join(DB_FILE)));
    let key_protection = protection(&stored, key_dir.as_deref());
    Facts {
        network: netguard::status(),
        permissions: permissions(),
        backups: backups(),
        keyboard_learning: keyboard_learning(),
        screenshots: screenshots(),
        data_dir: data_dir.map(Path::to_path_buf),
        key_dir,
        key_protection,
        stored: stored.and_then(Result::ok).flatten(),
        temporary_chat,
    }
}

/// The directory the desktop key store uses (`None` on Android, where the Keystore is).
fn key_dir() -> Option<PathBuf> {
    #[cfg(target_os = "android")]
    return None;
    #[cfg(not(target_os = "android"))]
    kostant_platform::keystore::FileKeyStore::default_dir().ok()
}

fn protection(
    stored: &Option<Result<Option<Inspection>, crate::history::HistoryError>>,
    key_dir: Option<&Path>,
) -> KeyProtection {
    let locked = match stored {
        None => return KeyProtection::Nothing("no data directory".into()),
        Some(Ok(None)) => return KeyProtection::Nothing("no history yet".into()),
        Some(Err(e)) => return KeyProtection::Nothing(format!("the history cannot be read: {e}")),
        Some(Ok(Some(i))) => i.locked,
    };
    if cfg!(target_os = "android") {
        return KeyProtection::Keystore { passphrase: locked };
    }
    let key_file = key_dir.map_or_else(PathBuf::new, |d| d.join("history.key"));
    match locked {
        true => KeyProtection::Passphrase { key_file },
        false => KeyProtection::File { key_file },
    }
}

/// The permissions the app holds: none asked for on the desktop; on Android, the manifest's.
fn permissions() -> Vec<String> {
    match cfg!(target_os = "android") {
        true => manifest_permissions(ANDROID_MANIFEST),
        false => Vec::new(),
    }
}

/// The `uses-permission` names of `xml` that are asked for (not removed by `tools:node`).
fn manifest_permissions(xml: &str) -> Vec<String> {
    xml.split("<uses-permission")
        .skip(1)
        .map(|tag| tag.split('>').next().unwrap_or(""))
        .filter(|tag| !tag.contains("tools:node=\"remove\""))
        .filter_map(|tag| tag.split("android:name=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect()
}

fn backups() -> Setting {
    match (
        cfg!(target_os = "android"),
        ANDROID_MANIFEST.contains("android:allowBackup=\"false\""),
    ) {
        (false, _) => Setting::NotApplicable("not applicable on the desktop (no app backup)"),
        (true, true) => Setting::InForce("off: the manifest sets android:allowBackup=false".into()),
        (true, false) => Setting::NotInForce("the manifest allows backups".into()),
    }
}

fn keyboard_learning() -> Setting {
    match cfg!(target_os = "android") {
        false => Setting::NotApplicable("not applicable on the desktop (no on-screen keyboard)"),
        true => Setting::NotInForce(
            "not turned off by the app yet (needs the phone's Java-side layer)".into(),
        ),
    }
}

fn screenshots() -> Setting {
    match cfg!(target_os = "android") {
        false => Setting::NotApplicable(
            "not applicable on the desktop (any program of yours can capture the screen)",
        ),
        true => Setting::NotInForce(
            "not blocked yet (FLAG_SECURE needs the phone's Java-side layer)".into(),
        ),
    }
}

fn path_text(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map_or_else(|| "unknown".into(), |p| p.display().to_string())
}

/// "12.3 KB", "4.5 MB".
fn size_text(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} bytes"),
        b if b < 1024 * 1024 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{:.1} MB", b as f64 / (1024.0 * 1024.0)),
    }
}

impl Facts {
    pub fn network_denied(&self) -> bool {
        self.network == NetguardStatus::Enforced
    }

    /// The facts as Settings lists them: what, and what is true.
    pub fn lines(&self) -> Vec<(String, String)> {
        let permissions = match self.permissions.is_empty() {
            true => "none".to_string(),
            false => self.permissions.join(", "),
        };
        let network = match self.network_denied() {
            true => format!("denied: {}", self.network),
            false => format!("not denied: {}", self.network),
        };
        let mut lines = vec![
            ("Network".to_string(), network),
            ("Permissions".to_string(), permissions),
            ("Backups".to_string(), self.backups.detail().to_string()),
            (
                "Keyboard learning".to_string(),
                self.keyboard_learning.detail().to_string(),
            ),
            (
                "Screenshots".to_string(),
                self.screenshots.detail().to_string(),
            ),
            ("Data".to_string(), path_text(&self.data_dir)),
            ("Key".to_string(), self.key_protection.text()),
        ];
        if let Some(s) = &self.stored {
            lines.push((
                "Stored".to_string(),
                format!(
                    "chats {}, contexts {}, documents {}, eval reports {} (file {})",
                    size_text(s.chats),
                    size_text(s.contexts),
                    size_text(s.documents),
                    size_text(s.eval_runs),
                    size_text(s.file_bytes)
                ),
            ));
        }
        if let Some(t) = self.temporary_chat {
            let text = match t {
                true => "on: this chat is not saved",
                false => "off: chats are saved, encrypted",
            };
            lines.push(("Temporary chat".to_string(), text.to_string()));
        }
        lines
    }

    /// The facts as one JSON object (`kostant doctor --json`'s "privacy").
    pub fn to_json(&self) -> Value {
        let setting = |s: &Setting| json!({"state": s.state(), "detail": s.detail()});
        let stored = self.stored.as_ref().map(|s| {
            json!({
                "file_bytes": s.file_bytes,
                "chats_bytes": s.chats,
                "contexts_bytes": s.contexts,
                "documents_bytes": s.documents,
                "eval_runs_bytes": s.eval_runs,
            })
        });
        json!({
            "network_denied": self.network_denied(),
            "network": self.network.to_string(),
            "permissions": self.permissions,
            "backups": setting(&self.backups),
            "keyboard_learning": setting(&self.keyboard_learning),
            "screenshots": setting(&self.screenshots),
            "data_dir": self.data_dir.as_ref().map(|p| p.display().to_string()),
            "key_dir": self.key_dir.as_ref().map(|p| p.display().to_string()),
            "key_protection": self.key_protection.kind(),
            "key_protection_detail": self.key_protection.text(),
            "stored": stored,
            "temporary_chat": self.temporary_chat,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_manifest_asks_for_no_permission_and_turns_backups_off() {
        assert!(manifest_permissions(ANDROID_MANIFEST).is_empty());
        assert!(ANDROID_MANIFEST.contains("android:allowBackup=\"false\""));
        let asked = "<uses-permission android:name=\"android.permission.CAMERA\" />\
                     <uses-permission android:name=\"x.Y\" tools:node=\"remove\" />";
        assert_eq!(manifest_permissions(asked), ["android.permission.CAMERA"]);
    }

    #[test]
    fn facts_come_from_the_files_a_locked_history_included() {
        let root = std::env::temp_dir().join(format!(
            "kostant-privacy-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let data = root.join("data");
        // No history yet: said, and nothing is created by looking.
        let facts = gather(Some(&data), Some(true));
        assert!(matches!(facts.key_protection, KeyProtection::Nothing(_)));
        assert!(!data.exists());
        let keys = kostant_platform::keystore::FileKeyStore::new(root.join("keys"));
        let mut store = crate::history::Store::open(&data.join(DB_FILE), keys).unwrap();
        store.append_exchange(None, "hello", "hi").unwrap();
        let inspected = inspect(&data.join(DB_FILE)).unwrap().unwrap();
        assert!(!inspected.locked && inspected.chats > 0 && inspected.eval_runs == 0);
        let fast = crate::history::LockParams {
            m_kib: 64,
            t: 1,
            p: 1,
        };
        store
            .lock(&crate::history::Passphrase::new("pw").unwrap(), fast)
            .unwrap();
        drop(store);
        let facts = gather(Some(&data), Some(false));
        assert!(matches!(
            facts.key_protection,
            KeyProtection::Passphrase { .. }
        ));
        let j = facts.to_json();
        assert_eq!(j["key_protection"], "passphrase");
        assert_eq!(j["temporary_chat"], false);
        assert!(j["stored"]["chats_bytes"].as_u64().unwrap() > 0);
        if !cfg!(target_os = "android") {
            assert_eq!(j["permissions"], json!([]));
            assert_eq!(j["screenshots"]["state"], "not_applicable");
            assert!(facts.lines().iter().any(
                |(what, v)| what == "Backups" && v.starts_with("not applicable on the desktop")
            ));
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
