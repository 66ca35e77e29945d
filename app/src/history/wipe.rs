//! The panic wipe: everything Kostant keeps, erased in one action, keys first. Destroying the
//! key-encryption key makes the history (messages, contexts, documents, eval reports) unreadable
//! at once, wherever a copy of it lies; then the files go: the database and its journals, the
//! app's eval runs and its settings. `kostant history wipe --yes` and Settings' "Erase
//! everything" call [`wipe`]. On Android the wrapping key lives in the Keystore, which this
//! does not delete yet (issue 62's device-lock work): there the files go, the key stays.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kostant_platform::keystore::FileKeyStore;

use super::{HistoryError, DB_FILE};

/// Files of the data directory the wipe removes (the database, its journals, the settings).
pub const DATA_FILES: [&str; 6] = [
    DB_FILE,
    "history.sqlite3-journal",
    "history.sqlite3-wal",
    "history.sqlite3-shm",
    "settings.json",
    "settings.json.tmp",
];

/// Directories of the data directory the wipe removes with all they hold (the app's eval runs).
pub const DATA_DIRS: [&str; 1] = ["evals"];

/// What a confirmation says goes, in a person's words.
pub const WHAT_GOES: &str = "every saved conversation and its context, your documents' \
passages, the safety eval reports and runs, your settings, and the keys that open them";

/// The points a test can look in at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WipeStep {
    /// The keys are destroyed; the files are still there, unreadable.
    KeysDestroyed,
    /// The files are removed too.
    FilesRemoved,
}

/// What a wipe did.
#[derive(Debug)]
pub struct Wiped {
    /// Key files destroyed.
    pub key_files: usize,
    /// From the call to the moment no key opened the history any more.
    pub unreadable_after: Duration,
    /// Files and directories removed after that.
    pub removed: Vec<PathBuf>,
}

/// Wipes the data directory `data_dir` with the key directory the history uses.
pub fn wipe(data_dir: &Path) -> Result<Wiped, HistoryError> {
    wipe_with(data_dir, &FileKeyStore::default_dir()?, |_| {})
}

/// The wipe, with the key directory given and `step` called after each step.
pub fn wipe_with(
    data_dir: &Path,
    key_dir: &Path,
    mut step: impl FnMut(WipeStep),
) -> Result<Wiped, HistoryError> {
    let started = Instant::now();
    let key_files = FileKeyStore::new(key_dir).destroy()?;
    let unreadable_after = started.elapsed();
    step(WipeStep::KeysDestroyed);
    let mut removed = Vec::new();
    for name in DATA_FILES {
        let path = data_dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(HistoryError::Io { path, source }),
        }
    }
    for name in DATA_DIRS {
        let path = data_dir.join(name);
        match fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(HistoryError::Io { path, source }),
        }
    }
    // The directories go only when nothing else is in them (a --data-dir may be shared).
    let _ = fs::remove_dir(data_dir);
    let _ = fs::remove_dir(key_dir);
    step(WipeStep::FilesRemoved);
    Ok(Wiped {
        key_files,
        unreadable_after,
        removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Store;

    #[test]
    fn the_keys_go_first_then_every_file_and_nothing_else() {
        let root = std::env::temp_dir().join(format!(
            "kostant-wipe-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let (data, keys) = (root.join("data"), root.join("keys"));
        let db = data.join(DB_FILE);
        let mut store = Store::open(&db, FileKeyStore::new(&keys)).unwrap();
        store.append_exchange(None, "secret", "reply").unwrap();
        store.save_eval_run("{}").unwrap();
        drop(store);
        fs::create_dir_all(data.join("evals").join("run-1")).unwrap();
        fs::write(data.join("evals").join("run-1").join("results.jsonl"), "{}").unwrap();
        fs::write(data.join("settings.json"), "{}").unwrap();
        fs::write(data.join("mine.txt"), "the user's own file").unwrap();

        let mut seen = Vec::new();
        let wiped = wipe_with(&data, &keys, |step| {
            if step == WipeStep::KeysDestroyed {
                // Keys first: the database is still on disk, and nothing opens it.
                assert!(db.exists());
                let opened = Store::open(&db, FileKeyStore::new(&keys));
                assert!(matches!(opened, Err(HistoryError::Key(_))));
            }
            seen.push(step);
        })
        .unwrap();
        assert_eq!(seen, [WipeStep::KeysDestroyed, WipeStep::FilesRemoved]);
        assert_eq!(wiped.key_files, 1);
        assert!(!db.exists() && !data.join("evals").exists());
        assert!(!data.join("settings.json").exists());
        assert!(!keys.exists(), "the emptied key directory is gone");
        // What is not Kostant's stays, and so does the directory holding it.
        assert!(data.join("mine.txt").exists());
        // A second wipe finds nothing to do.
        assert_eq!(wipe_with(&data, &keys, |_| {}).unwrap().key_files, 0);
        let _ = fs::remove_dir_all(&root);
    }
}
