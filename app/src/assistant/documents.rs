//! Asking the user's documents: adding files to the sealed index (read, cut into passages,
//! embedded, stored), finding the passages for a question (vectors and keywords, fused) and
//! turning them into the cited prompt the guarded responder answers. The CLI's `docs` commands
//! and the app's Documents screen call these; nothing here holds UI state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kostant_documents::{
    chunk, hybrid_search, indexed_text, place_label, read_document, ChunkOptions, Corpus,
    CorpusEntry, IngestError, Place,
};
use kostant_engine::encoder::Encoder;
use kostant_engine::EngineError;
use kostant_safety::{policy, Guard, SafetyError, Verdict};

use crate::features::Feature;

use crate::history::documents::{NewPassage, PassagePlace, StoredPassage};
use crate::history::{HistoryError, Store};

use super::model_dirs::search_dirs;

/// The sentence encoder `scripts/setup.sh` installs.
pub const EMBEDDER_FILE: &str = "all-MiniLM-L6-v2.F16.gguf";

/// Passages handed to the model with a question.
pub const ASK_PASSAGES: usize = 4;

/// Passages embedded per call: bounds the encoder's scratch memory while indexing.
const EMBED_BATCH: usize = 16;

/// What the reply says when no passage is relevant to the question.
pub const NOTHING_FOUND: &str =
    "I couldn't find anything about that in your documents, so I can't answer it from them.";

/// What went wrong while adding or asking documents. Messages are for the person using the app.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error("the sentence encoder could not run: {0}")]
    Encoder(#[from] EngineError),
    #[error(
        "the sentence encoder ({EMBEDDER_FILE}) is not installed; run scripts/setup.sh, which \
         fetches it, or set KOSTANT_EMBEDDER to its file"
    )]
    NoEmbedder,
    #[error("{name} has no text to index")]
    NoPassages { name: String },
    #[error("the question is empty")]
    EmptyQuestion,
}

/// Where the sentence encoder is: `KOSTANT_EMBEDDER`, else the first models directory holding
/// [`EMBEDDER_FILE`].
pub fn embedder_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KOSTANT_EMBEDDER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    search_dirs()
        .into_iter()
        .map(|d| d.join(EMBEDDER_FILE))
        .find(|p| p.is_file())
}

/// The encoder and the name its vectors are stored under.
pub struct Library {
    encoder: Arc<Encoder>,
    embedder_id: String,
}

/// A document once added.
#[derive(Clone, Debug, PartialEq)]
pub struct AddedDocument {
    pub id: i64,
    pub name: String,
    pub size_bytes: u64,
    pub passages: usize,
}

/// One passage found for a question, with the document it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundPassage {
    pub document: i64,
    /// The document's name (or why it could not be read).
    pub document_name: String,
    pub seq: i64,
    pub text: String,
    pub place: PassagePlace,
    /// The fused rank score (higher is better).
    pub score: f32,
    /// Cosine between the question and the passage.
    pub vector_score: f32,
    pub keyword_score: f32,
}

/// The passages found for a question, best first, and whether any is relevant.
#[derive(Clone, Debug, PartialEq)]
pub struct Retrieval {
    pub passages: Vec<FoundPassage>,
    pub relevant: bool,
    /// Stored passages that failed their integrity check and were left out.
    pub unreadable: usize,
}

impl Library {
    /// Loads the encoder from [`embedder_path`].
    pub fn open() -> Result<Library, DocsError> {
        let path = embedder_path().ok_or(DocsError::NoEmbedder)?;
        Library::load(&path)
    }

    pub fn load(path: &Path) -> Result<Library, DocsError> {
        let encoder = Encoder::load(path)?;
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let embedder_id = format!("{file}/{}", encoder.dim());
        Ok(Library {
            encoder: Arc::new(encoder),
            embedder_id,
        })
    }

    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Reads `path`, cuts it into passages, embeds them and stores the document sealed, all
    /// before the one write: a file that cannot be read leaves the index as it was.
    pub fn add(&self, store: &mut Store, path: &Path) -> Result<AddedDocument, DocsError> {
        let doc = read_document(path)?;
        let chunks = chunk(&doc, &ChunkOptions::default());
        if chunks.is_empty() {
            return Err(DocsError::NoPassages { name: doc.name });
        }
        let indexed: Vec<String> = chunks
            .iter()
            .map(|c| indexed_text(&doc.name, &c.place, &c.text))
            .collect();
        let mut vectors = Vec::with_capacity(indexed.len());
        for batch in indexed.chunks(EMBED_BATCH) {
            let batch: Vec<&str> = batch.iter().map(String::as_str).collect();
            vectors.extend(self.encoder.embed(&batch)?);
        }
        let passages: Vec<NewPassage> = chunks
            .into_iter()
            .zip(vectors)
            .map(|(c, vector)| NewPassage {
                text: c.text,
                place: PassagePlace {
                    page: c.place.page,
                    heading: c.place.heading,
                },
                vector,
            })
            .collect();
        let id = store.add_document(&doc.name, doc.size_bytes, &self.embedder_id, &passages)?;
        Ok(AddedDocument {
            id,
            name: doc.name,
            size_bytes: doc.size_bytes,
            passages: passages.len(),
        })
    }

    /// The `k` passages that best match `question`, over every stored passage opened in memory.
    pub fn search(&self, store: &Store, question: &str, k: usize) -> Result<Retrieval, DocsError> {
        let question = question.trim();
        if question.is_empty() {
            return Err(DocsError::EmptyQuestion);
        }
        let stored = store.passages()?;
        let names = document_names(store)?;
        // Vectors another encoder wrote do not compare with this one's: left out.
        let usable: Vec<StoredPassage> = stored
            .passages
            .into_iter()
            .filter(|p| p.vector.len() == self.encoder.dim())
            .collect();
        let query = self.encoder.embed(&[question])?.remove(0);
        let corpus = Corpus::new(
            self.encoder.dim(),
            usable
                .iter()
                .map(|p| {
                    let place = place_of(&p.place);
                    CorpusEntry {
                        doc_id: p.document as u64,
                        text: indexed_text(&name_of(&names, p.document), &place, &p.text),
                        place,
                        vector: p.vector.clone(),
                    }
                })
                .collect(),
        );
        let passages: Vec<FoundPassage> = hybrid_search(question, &query, &corpus, k)
            .iter()
            .map(|h| {
                let p = &usable[h.chunk];
                FoundPassage {
                    document: p.document,
                    document_name: name_of(&names, p.document),
                    seq: p.seq,
                    text: p.text.clone(),
                    place: p.place.clone(),
                    score: h.score,
                    vector_score: h.vector_score,
                    keyword_score: h.bm25_score,
                }
            })
            .collect();
        let seen = corpus.relevance(question, &query);
        let relevant = !passages.is_empty() && seen.is_relevant();
        Ok(Retrieval {
            passages,
            relevant,
            unreadable: stored.unreadable.len(),
        })
    }
}

/// Every document's id and name (a name that fails its check reads as "document N").
fn document_names(store: &Store) -> Result<Vec<(i64, String)>, HistoryError> {
    Ok(store
        .documents()?
        .into_iter()
        .map(|d| {
            let name = d.name.unwrap_or_else(|_| format!("document {}", d.id));
            (d.id, name)
        })
        .collect())
}

/// The reply when no passage is relevant: the guard still reads the question, so a harmful
/// one gets the policy's refusal as it would in chat; any other is told the documents do not
/// say, and the model is not asked to answer from nothing.
pub fn answer_without_passages(
    guard: &mut Guard,
    question: &str,
) -> Result<(String, Verdict), SafetyError> {
    let screening = guard.screen_input(question)?;
    if screening.flagged {
        let category = screening.category;
        return Ok((
            policy::refusal(category).to_string(),
            Verdict::Refused { category },
        ));
    }
    Ok((NOTHING_FOUND.to_string(), Verdict::Answered))
}

fn name_of(names: &[(i64, String)], document: i64) -> String {
    names
        .iter()
        .find(|(id, _)| *id == document)
        .map_or_else(|| format!("document {document}"), |(_, n)| n.clone())
}

fn place_of(p: &PassagePlace) -> Place {
    Place {
        page: p.page,
        heading: p.heading.clone(),
    }
}

/// Where a passage is, as a person reads it: "notes.pdf, page 3, Setup › Install".
pub fn passage_label(p: &FoundPassage) -> String {
    place_label(&p.document_name, &place_of(&p.place))
}

/// The system prompt of a documents question: the feature's instructions, then the numbered
/// passages as context. The passages sit apart from the user's turn, which stays the question
/// as typed: the guard judges that question as the user's message and the reply as every
/// reply, and a document's "ignore previous instructions" is context to answer about, never
/// the user's words. The passages themselves are not screened as messages: the guard, trained
/// on requests, flags most plain document prose (docs/documents.md, "Safety").
pub fn ask_system_prompt(passages: &[FoundPassage]) -> String {
    let mut prompt = Feature::Documents.system_prompt();
    prompt.push_str("\n\nPassages from the user's documents:\n");
    for (i, p) in passages.iter().enumerate() {
        prompt.push_str(&format!("[{}] ({}) {}\n", i + 1, passage_label(p), p.text));
    }
    prompt
}

/// The passage numbers (1-based, in order of first mention) that `reply` cites as `[n]`, of
/// `count` passages given; numbers out of range are ignored.
pub fn cited_numbers(reply: &str, count: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut rest = reply;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        for part in rest[..close].split(',') {
            if let Ok(n) = part.trim().parse::<usize>() {
                if (1..=count).contains(&n) && !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        rest = &rest[close..];
    }
    out
}

/// The passages a reply stands on: those it cites, or when it cites none, the passages it was
/// given (the answer came from them and nothing else), so every answer shows its sources.
pub fn citations<'a>(reply: &str, passages: &'a [FoundPassage]) -> Vec<(usize, &'a FoundPassage)> {
    let cited = cited_numbers(reply, passages.len());
    if cited.is_empty() {
        return passages
            .iter()
            .enumerate()
            .map(|(i, p)| (i + 1, p))
            .collect();
    }
    cited.into_iter().map(|n| (n, &passages[n - 1])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(doc: &str, page: Option<u32>, heading: Option<&str>) -> FoundPassage {
        FoundPassage {
            document: 1,
            document_name: doc.into(),
            seq: 0,
            text: "The deposit is two months' rent.".into(),
            place: PassagePlace {
                page,
                heading: heading.map(str::to_string),
            },
            score: 0.5,
            vector_score: 0.6,
            keyword_score: 1.0,
        }
    }

    #[test]
    fn citations_are_read_from_the_reply_and_bounded() {
        assert_eq!(
            cited_numbers("It is two months [2]. Also [1, 2] [9] [x]", 3),
            vec![2, 1]
        );
        assert_eq!(cited_numbers("no marks", 3), Vec::<usize>::new());
        assert_eq!(cited_numbers("[1", 3), Vec::<usize>::new());
        let ps = vec![passage("a.md", None, None), passage("b.pdf", Some(3), None)];
        let c = citations("See [2].", &ps);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0, 2);
        assert_eq!(citations("No marks here.", &ps).len(), 2);
    }

    #[test]
    fn the_system_prompt_numbers_every_passage_with_its_place() {
        let ps = vec![
            passage("lease.md", None, Some("Money › Deposit")),
            passage("notes.pdf", Some(3), None),
        ];
        let prompt = ask_system_prompt(&ps);
        assert!(
            prompt.starts_with(&Feature::Documents.system_prompt()),
            "{prompt}"
        );
        assert!(
            prompt.contains("[1] (lease.md, Money › Deposit) The deposit"),
            "{prompt}"
        );
        assert!(
            prompt.contains("[2] (notes.pdf, page 3) The deposit"),
            "{prompt}"
        );
    }

    #[test]
    fn errors_read_as_sentences_for_a_person() {
        for e in [
            DocsError::NoEmbedder,
            DocsError::EmptyQuestion,
            DocsError::NoPassages {
                name: "empty.md".into(),
            },
        ] {
            let m = e.to_string();
            assert!(!m.contains("Error") && !m.contains("{"), "{m}");
            assert!(
                m.starts_with(|c: char| c.is_lowercase() || c.is_alphanumeric()),
                "{m}"
            );
        }
    }
}
