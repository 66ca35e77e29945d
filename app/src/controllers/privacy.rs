//! Settings' Privacy section: the facts as they are when the screen is shown
//! ([`crate::privacy`]), and "Erase everything" behind a confirmation that names what goes,
//! which runs the panic wipe (`history::wipe`: keys first, then the files).

use std::path::PathBuf;

use super::AppError;
use crate::history::wipe::{wipe_with, Wiped, WHAT_GOES};
use crate::history::HistoryError;
use crate::privacy::{gather, Facts};

pub struct PrivacyController {
    data_dir: Option<PathBuf>,
    /// The key directory the wipe destroys (`None`: the desktop default).
    key_dir: Option<PathBuf>,
    confirming_erase: bool,
    /// What the last erase did, once it ran.
    erased: Option<String>,
}

impl PrivacyController {
    pub fn new(data_dir: Option<PathBuf>, key_dir: Option<PathBuf>) -> Self {
        PrivacyController {
            data_dir,
            key_dir,
            confirming_erase: false,
            erased: None,
        }
    }

    /// The facts now; `temporary` is whether the chat on screen is temporary.
    pub fn facts(&self, temporary: bool) -> Facts {
        gather(self.data_dir.as_deref(), Some(temporary))
    }

    /// First step of "Erase everything": the screen asks, naming what goes.
    pub fn request_erase(&mut self) {
        self.confirming_erase = true;
    }

    pub fn cancel_erase(&mut self) {
        self.confirming_erase = false;
    }

    pub fn confirming_erase(&self) -> bool {
        self.confirming_erase
    }

    /// The confirmation's words: what goes, and that it cannot be undone.
    pub fn erase_question(&self) -> String {
        format!("This erases {WHAT_GOES}, on this device. It cannot be undone, and Kostant closes afterwards.")
    }

    /// Runs the wipe (only after [`PrivacyController::request_erase`]).
    pub fn confirm_erase(&mut self) -> Result<Wiped, AppError> {
        if !self.confirming_erase {
            return Err(AppError::Nothing("erase confirmation"));
        }
        self.confirming_erase = false;
        let data_dir = self.data_dir.clone().ok_or(AppError::HistoryOff)?;
        let key_dir = match &self.key_dir {
            Some(d) => d.clone(),
            None => kostant_platform::keystore::FileKeyStore::default_dir()
                .map_err(HistoryError::from)?,
        };
        let wiped = wipe_with(&data_dir, &key_dir, |_| {})?;
        self.erased = Some(format!(
            "Everything is erased. The keys went first ({:.0} ms), so nothing could open the \
             history from then on; then {} file(s) and folder(s). Close Kostant now.",
            wiped.unreadable_after.as_secs_f64() * 1000.0,
            wiped.removed.len()
        ));
        Ok(wiped)
    }

    /// What the erase did, once it ran.
    pub fn erased(&self) -> Option<&str> {
        self.erased.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Store, DB_FILE};
    use kostant_platform::keystore::FileKeyStore;

    #[test]
    fn erase_asks_first_names_what_goes_then_wipes_keys_and_files() {
        let root = std::env::temp_dir().join(format!(
            "kostant-privacy-ctl-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let (data, keys) = (root.join("data"), root.join("keys"));
        let mut store = Store::open(&data.join(DB_FILE), FileKeyStore::new(&keys)).unwrap();
        store.append_exchange(None, "hello", "hi").unwrap();
        drop(store);
        let mut c = PrivacyController::new(Some(data.clone()), Some(keys.clone()));
        let facts = c.facts(true);
        assert!(facts
            .lines()
            .iter()
            .any(|(what, v)| what == "Temporary chat" && v.starts_with("on")));

        assert!(c.confirm_erase().is_err(), "nothing without the question");
        assert!(data.join(DB_FILE).exists());
        c.request_erase();
        let q = c.erase_question();
        for what in ["conversation", "documents", "eval", "settings", "keys"] {
            assert!(q.contains(what), "{q}");
        }
        assert!(q.contains("cannot be undone"));
        c.cancel_erase();
        assert!(!c.confirming_erase() && data.join(DB_FILE).exists());

        c.request_erase();
        let wiped = c.confirm_erase().unwrap();
        assert_eq!(wiped.key_files, 1);
        assert!(!data.join(DB_FILE).exists() && !keys.join("history.key").exists());
        assert!(c.erased().unwrap().starts_with("Everything is erased."));
        let _ = std::fs::remove_dir_all(&root);
    }
}
