//! The Documents screen's logic: the documents in the sealed index (name, size, passages, when
//! added), adding a file by its path on a worker thread (reading and embedding take seconds),
//! and removing one behind a confirmation.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::{AppError, Notify, SharedStore};
use crate::assistant::ask::Adder;
use crate::assistant::documents::{AddedDocument, DocsError};

/// One row of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentRow {
    pub id: i64,
    /// The file's name, or a note that it did not open.
    pub name: String,
    /// "12 KB", "3.4 MB".
    pub size: String,
    pub passages: i64,
    /// "2026-11-29 16:05" in UTC.
    pub added: String,
}

/// Where adding a file stands; the text is for the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddState {
    Idle,
    /// "Adding lease.md…": read, cut into passages and embedded off the UI thread.
    Adding(String),
    /// "Added lease.md: 8 passages."
    Added(String),
    /// Why the file was not added, in plain words.
    Refused(String),
}

/// The running add: the file's name and where its result arrives.
struct Running {
    name: String,
    result: mpsc::Receiver<Result<AddedDocument, DocsError>>,
    thread: JoinHandle<()>,
}

pub struct DocumentsController {
    store: SharedStore,
    adder: Adder,
    notify: Notify,
    rows: Vec<DocumentRow>,
    add: AddState,
    running: Option<Running>,
    /// The document whose removal waits for a confirmation.
    confirming: Option<i64>,
    /// Why the list could not be read or a removal failed.
    status: Option<String>,
}

impl DocumentsController {
    pub fn new(store: SharedStore, adder: Adder, notify: Notify) -> DocumentsController {
        let mut d = DocumentsController {
            store,
            adder,
            notify,
            rows: Vec::new(),
            add: AddState::Idle,
            running: None,
            confirming: None,
            status: None,
        };
        d.refresh();
        d
    }

    pub fn rows(&self) -> &[DocumentRow] {
        &self.rows
    }

    pub fn add_state(&self) -> &AddState {
        &self.add
    }

    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    pub fn is_adding(&self) -> bool {
        self.running.is_some()
    }

    /// Reloads the list from the index.
    pub fn refresh(&mut self) {
        match self.store.borrow().documents() {
            Ok(docs) => {
                self.rows = docs
                    .into_iter()
                    .map(|d| DocumentRow {
                        id: d.id,
                        name: d.name.unwrap_or_else(|_| {
                            format!("Document {} (its name does not open)", d.id)
                        }),
                        size: format_size(d.size_bytes),
                        passages: d.passages,
                        added: crate::history::time::format_utc(d.added_at_ms),
                    })
                    .collect();
                self.status = None;
            }
            Err(e) => {
                self.rows.clear();
                self.status = Some(sentence(&e.to_string()));
            }
        }
    }

    /// Starts adding the file at `path` on a worker thread; [`Self::pump`] takes its result.
    pub fn add(&mut self, path: &str) -> Result<(), AppError> {
        if self.running.is_some() {
            return Err(AppError::Busy);
        }
        let path = PathBuf::from(path.trim());
        if path.as_os_str().is_empty() {
            self.add = AddState::Refused(
                "Type the path of a .txt, .md, .html or .pdf file to add it.".into(),
            );
            return Ok(());
        }
        let name = file_name(&path);
        let (tx, rx) = mpsc::channel();
        let (adder, notify) = (self.adder.clone(), self.notify.clone());
        let thread = std::thread::Builder::new()
            .name("kostant-documents".into())
            .spawn(move || {
                // A closed channel means the screen is gone; nothing left to tell.
                let _ = tx.send(adder(&path));
                notify();
            })
            .map_err(|_| AppError::WorkerGone("documents"))?;
        self.add = AddState::Adding(format!("Adding {name}…"));
        self.running = Some(Running {
            name,
            result: rx,
            thread,
        });
        Ok(())
    }

    /// Applies a finished add. Returns whether anything changed.
    pub fn pump(&mut self) -> bool {
        let Some(run) = &self.running else {
            return false;
        };
        let result = match run.result.try_recv() {
            Ok(r) => r.map_err(|e| refusal(&run.name, &e)),
            Err(mpsc::TryRecvError::Empty) => return false,
            Err(mpsc::TryRecvError::Disconnected) => Err(stopped(&run.name)),
        };
        self.finish(result);
        true
    }

    /// Blocks until a running add has ended, then applies it. For tests.
    pub fn wait_idle(&mut self) {
        if let Some(run) = &self.running {
            let result = match run.result.recv() {
                Ok(r) => r.map_err(|e| refusal(&run.name, &e)),
                Err(_) => Err(stopped(&run.name)),
            };
            self.finish(result);
        }
    }

    fn finish(&mut self, result: Result<AddedDocument, String>) {
        let Some(run) = self.running.take() else {
            return;
        };
        // The thread has sent its result: it ends at once.
        let _ = run.thread.join();
        self.add = match result {
            Ok(d) => AddState::Added(format!(
                "Added {}: {}.",
                d.name,
                plural(d.passages, "passage")
            )),
            Err(why) => AddState::Refused(why),
        };
        self.refresh();
    }

    /// First step of removing: the screen asks "Remove <name>?".
    pub fn request_remove(&mut self, id: i64) {
        self.confirming = self.rows.iter().any(|r| r.id == id).then_some(id);
    }

    pub fn cancel_remove(&mut self) {
        self.confirming = None;
    }

    /// The row waiting for a confirmation of its removal.
    pub fn confirming(&self) -> Option<&DocumentRow> {
        let id = self.confirming?;
        self.rows.iter().find(|r| r.id == id)
    }

    /// Second step: deletes the document and its passages. Without the first, does nothing.
    pub fn confirm_remove(&mut self) -> Result<(), AppError> {
        let Some(id) = self.confirming.take() else {
            return Err(AppError::Nothing("document to remove"));
        };
        let removed = self.store.borrow_mut().remove_document(id);
        self.refresh();
        if let Err(e) = removed {
            self.status = Some(sentence(&e.to_string()));
        }
        Ok(())
    }

    /// Waits for a running add (the file is stored whole or not at all either way).
    pub fn shutdown(&mut self) {
        self.wait_idle();
    }
}

/// Why `name` was not added, as one sentence for the person.
fn refusal(name: &str, e: &DocsError) -> String {
    match e {
        // These say the file's name themselves.
        DocsError::Ingest(_) | DocsError::NoPassages { .. } => sentence(&e.to_string()),
        _ => sentence(&format!("{name} was not added: {e}")),
    }
}

/// The worker ended without a result (it panicked): nothing was stored.
fn stopped(name: &str) -> String {
    format!("{name} was not added: reading it stopped part way, and nothing of it was kept.")
}

/// A message as a sentence: a capital first letter and a full stop. A file name first
/// ("lease.md has no text") keeps its own case.
fn sentence(text: &str) -> String {
    let text = text.trim();
    let first_word = text.split_whitespace().next().unwrap_or("");
    let mut chars = text.chars();
    let mut out: String = match chars.next() {
        Some(c) if !first_word.contains('.') => c.to_uppercase().chain(chars).collect(),
        Some(_) => text.to_string(),
        None => return String::new(),
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A file's size as a person reads it: bytes under 1 KB, whole KB under 1 MB, then MB with one
/// decimal (1 KB = 1024 bytes).
pub fn format_size(bytes: i64) -> String {
    const KB: i64 = 1024;
    match bytes {
        b if b < KB => format!("{b} bytes"),
        b if b < KB * KB => format!("{} KB", (b + KB / 2) / KB),
        b => format!("{:.1} MB", b as f64 / (KB * KB) as f64),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    use super::*;
    use crate::history::documents::{NewPassage, PassagePlace};
    use crate::history::Store;

    fn store(name: &str) -> (PathBuf, SharedStore) {
        let root =
            std::env::temp_dir().join(format!("kostant-docs-ctl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let keys = kostant_platform::keystore::FileKeyStore::new(root.join("keys"));
        let s = Store::open(&root.join("data").join("history.sqlite3"), keys).unwrap();
        (root, Rc::new(RefCell::new(s)))
    }

    fn stored(s: &SharedStore, name: &str, passages: usize) -> i64 {
        let ps: Vec<NewPassage> = (0..passages)
            .map(|i| NewPassage {
                text: format!("passage {i}"),
                place: PassagePlace::default(),
                vector: vec![0.0; 4],
            })
            .collect();
        s.borrow_mut()
            .add_document(name, 2048, "test/4", &ps)
            .unwrap()
    }

    /// An adder that answers without reading anything.
    fn scripted(result: fn(&Path) -> Result<AddedDocument, DocsError>) -> Adder {
        Arc::new(result)
    }

    #[test]
    fn sizes_read_in_bytes_kb_and_mb() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(1023), "1023 bytes");
        assert_eq!(format_size(1024), "1 KB");
        assert_eq!(format_size(12 * 1024 + 700), "13 KB");
        assert_eq!(format_size(3 * 1024 * 1024 + 400 * 1024), "3.4 MB");
    }

    #[test]
    fn the_list_shows_each_document_and_removal_needs_a_confirmation() {
        let (root, s) = store("list");
        let id = stored(&s, "lease.md", 3);
        stored(&s, "notes.txt", 1);
        let mut d =
            DocumentsController::new(s, scripted(|_| unreachable!()), super::super::no_notify());
        assert_eq!(d.rows().len(), 2);
        let row = d.rows().iter().find(|r| r.id == id).unwrap().clone();
        assert_eq!(
            (row.name.as_str(), row.size.as_str(), row.passages),
            ("lease.md", "2 KB", 3)
        );
        assert!(
            d.confirm_remove().is_err(),
            "no removal without asking first"
        );
        d.request_remove(id);
        assert_eq!(d.confirming().map(|r| r.name.as_str()), Some("lease.md"));
        d.cancel_remove();
        assert!(d.confirming().is_none());
        assert_eq!(d.rows().len(), 2);
        d.request_remove(id);
        d.confirm_remove().unwrap();
        assert_eq!(d.rows().len(), 1);
        assert!(d.rows().iter().all(|r| r.id != id));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn adding_runs_off_the_ui_thread_and_says_how_it_went() {
        let (root, s) = store("add");
        let mut d = DocumentsController::new(
            s,
            scripted(|p| {
                Ok(AddedDocument {
                    id: 1,
                    name: p.file_name().unwrap().to_string_lossy().into_owned(),
                    size_bytes: 10,
                    passages: 1,
                })
            }),
            super::super::no_notify(),
        );
        d.add("  /tmp/lease.md ").unwrap();
        assert_eq!(d.add_state(), &AddState::Adding("Adding lease.md…".into()));
        assert!(matches!(d.add("/tmp/other.md"), Err(AppError::Busy)));
        d.wait_idle();
        assert_eq!(
            d.add_state(),
            &AddState::Added("Added lease.md: 1 passage.".into())
        );
        assert!(!d.is_adding());

        d.add("   ").unwrap();
        let AddState::Refused(why) = d.add_state() else {
            panic!("{:?}", d.add_state())
        };
        assert!(why.starts_with("Type the path"), "{why}");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_refused_file_is_explained_in_one_plain_sentence() {
        let (root, s) = store("refused");
        let mut d = DocumentsController::new(
            s,
            scripted(|_| Err(DocsError::NoEmbedder)),
            super::super::no_notify(),
        );
        d.add("/tmp/lease.md").unwrap();
        d.wait_idle();
        let AddState::Refused(why) = d.add_state() else {
            panic!("{:?}", d.add_state())
        };
        assert!(
            why.starts_with("lease.md was not added: the sentence encoder"),
            "{why}"
        );
        assert!(!why.contains("Error") && why.ends_with('.'), "{why}");
        assert_eq!(
            refusal(
                "x.md",
                &DocsError::NoPassages {
                    name: "x.md".into()
                }
            ),
            "x.md has no text to index."
        );
        let _ = std::fs::remove_dir_all(root);
    }
}
