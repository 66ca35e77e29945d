//! The user's documents in the history database: each document's name sealed, each passage's
//! text, place and embedding sealed, bound to the document and the passage's number. Nothing of
//! a document is stored in the clear and there is no full-text index: keyword scoring runs in
//! memory over the opened rows (`crate::documents`). Removing a document deletes its rows, which
//! `secure_delete` zeroes in place; `Store::delete_all` removes every document too.

use rusqlite::{params, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::crypto::Slot;
use super::store::{classify, next_id, now_ms, StepError, Store};
use super::HistoryError;

/// The documents' tables. Additive like `eval_runs`: created on open when missing. The clear
/// columns are ids, times, sizes, counts and which embedder wrote the vectors: nothing the
/// user wrote.
pub(super) const DOCUMENTS: &str = "
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    added_at INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL,
    embedder TEXT NOT NULL,
    meta BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS document_chunks (
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (document_id, seq)
) STRICT;
";

/// Where a passage sits in its document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassagePlace {
    /// The PDF page, counted from 1.
    pub page: Option<u32>,
    /// The nearest heading above the passage.
    pub heading: Option<String>,
}

/// A passage to store: its text, place and embedding.
#[derive(Clone, Debug)]
pub struct NewPassage {
    pub text: String,
    pub place: PassagePlace,
    pub vector: Vec<f32>,
}

/// A document as `docs list` shows it; the name may fail its integrity check on its own.
#[derive(Debug)]
pub struct StoredDocument {
    pub id: i64,
    pub added_at_ms: i64,
    pub size_bytes: i64,
    pub passages: i64,
    /// Which embedder wrote the vectors (its file name and dimension).
    pub embedder: String,
    pub name: Result<String, HistoryError>,
}

/// One stored passage, opened.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredPassage {
    pub document: i64,
    pub seq: i64,
    pub text: String,
    pub place: PassagePlace,
    pub vector: Vec<f32>,
}

/// Every passage that opened, and the errors of those that did not (altered rows).
#[derive(Debug, Default)]
pub struct Passages {
    pub passages: Vec<StoredPassage>,
    pub unreadable: Vec<HistoryError>,
}

/// The sealed body of a passage.
#[derive(Serialize, Deserialize)]
struct Body {
    text: String,
    #[serde(flatten)]
    place: PassagePlace,
}

impl Store {
    /// Stores a document and all its passages in one transaction: either all of it is in the
    /// index afterwards, or none (a failure part way leaves the index as it was). Returns the
    /// document's id.
    pub fn add_document(
        &mut self,
        name: &str,
        size_bytes: u64,
        embedder: &str,
        passages: &[NewPassage],
    ) -> Result<i64, HistoryError> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| classify(&path, e))?;
        let cipher = &self.cipher;
        let run = || -> Result<i64, StepError> {
            let id = next_id(&tx, "documents")?;
            let meta = cipher.seal(Slot::DocumentMeta { document: id }, name)?;
            tx.execute(
                "INSERT INTO documents (id, added_at, size_bytes, chunk_count, embedder, meta)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    now_ms(),
                    i64::try_from(size_bytes).unwrap_or(i64::MAX),
                    passages.len() as i64,
                    embedder,
                    meta
                ],
            )?;
            let mut insert = tx.prepare(
                "INSERT INTO document_chunks (document_id, seq, body, vector) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (seq, p) in passages.iter().enumerate() {
                let seq = seq as i64;
                let body = serde_json::to_string(&Body {
                    text: p.text.clone(),
                    place: p.place.clone(),
                })
                .map_err(|e| HistoryError::Integrity(format!("passage {seq}: {e}")))?;
                let body = cipher.seal(Slot::DocumentChunk { document: id, seq }, &body)?;
                let vector = cipher.seal_bytes(
                    Slot::DocumentVector { document: id, seq },
                    &vector_bytes(&p.vector),
                )?;
                insert.execute(params![id, seq, body, vector])?;
            }
            Ok(id)
        };
        let id = run().map_err(|x| x.at(&path))?;
        tx.commit().map_err(|e| classify(&path, e))?;
        Ok(id)
    }

    /// Every document, oldest first.
    pub fn documents(&self) -> Result<Vec<StoredDocument>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, added_at, size_bytes, chunk_count, embedder, meta FROM documents ORDER BY id",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Vec<u8>>(5)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (id, added_at_ms, size_bytes, passages, embedder, meta) =
                row.map_err(self.err())?;
            out.push(StoredDocument {
                id,
                added_at_ms,
                size_bytes,
                passages,
                embedder,
                name: self.cipher.open(Slot::DocumentMeta { document: id }, &meta),
            });
        }
        Ok(out)
    }

    /// Deletes a document and (by cascade) its passages; their bytes are zeroed in place.
    pub fn remove_document(&mut self, document: i64) -> Result<(), HistoryError> {
        let n = self
            .conn
            .execute("DELETE FROM documents WHERE id = ?1", [document])
            .map_err(self.err())?;
        if n == 0 {
            return Err(HistoryError::NoDocument(document));
        }
        Ok(())
    }

    /// Opens every stored passage (for retrieval, which scores them in memory).
    pub fn passages(&self) -> Result<Passages, HistoryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT document_id, seq, body, vector FROM document_chunks ORDER BY document_id, seq")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Passages::default();
        for row in rows {
            let (document, seq, body, vector) = row.map_err(self.err())?;
            match self.open_passage(document, seq, &body, vector) {
                Ok(p) => out.passages.push(p),
                Err(e) => out.unreadable.push(e),
            }
        }
        Ok(out)
    }

    fn open_passage(
        &self,
        document: i64,
        seq: i64,
        body: &[u8],
        vector: Vec<u8>,
    ) -> Result<StoredPassage, HistoryError> {
        let slot = Slot::DocumentChunk { document, seq };
        let body: Body = serde_json::from_str(&self.cipher.open(slot, body)?)
            .map_err(|_| HistoryError::Integrity(slot.to_string()))?;
        let vslot = Slot::DocumentVector { document, seq };
        let raw = self.cipher.open_bytes_owned(vslot, vector)?;
        if raw.len() % 4 != 0 {
            return Err(HistoryError::Integrity(vslot.to_string()));
        }
        Ok(StoredPassage {
            document,
            seq,
            text: body.text,
            place: body.place,
            vector: raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        })
    }
}

fn vector_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
