//! The retrieval eval of "ask your documents" (issue 59): the documents of
//! assets/evals/retrieval are read and chunked by kostant-documents, every chunk and question is
//! embedded by the sentence encoder, and each question runs the hybrid search over all chunks.
//! The hit rule is the one assets/evals/retrieval/README.md fixed before the first run: an
//! answer is found in a chunk when its whitespace-normalised, lower-cased text is a substring of
//! the chunk's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kostant_documents::{
    chunk, hybrid_search, indexed_text, read_document, ChunkOptions, Corpus, CorpusEntry, Place,
};
use kostant_engine::encoder::Encoder;
use serde::{Deserialize, Serialize};

use crate::error::{io, EvalError, Result};
use crate::stats::Rate;

/// The questions, one JSON object a line, in the eval's directory.
pub const QUESTIONS_FILE: &str = "questions.jsonl";

/// The documents' folder inside the eval's directory.
pub const DOCUMENTS_DIR: &str = "documents";

/// One line of questions.jsonl; `doc` and `answer` are null for a question no document answers.
#[derive(Clone, Debug, Deserialize)]
struct Question {
    /// Its line in the file, from 1 (set after parsing).
    #[serde(skip)]
    line: usize,
    id: String,
    question: String,
    doc: Option<String>,
    answer: Option<String>,
}

/// One question's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionRow {
    pub id: String,
    /// The document that answers it (None: no document does).
    pub doc: Option<String>,
    /// The rank (from 1) of the first of the top k chunks holding the answer; None if none does,
    /// or if the question has no answer.
    pub hit_rank: Option<usize>,
    /// Whether any chunk of its own document holds the answer (chunking lost nothing); true for
    /// a question with no answer.
    pub answer_in_chunks: bool,
    /// Where the top-ranked chunk comes from: "file › heading" (and ", page N" for a PDF).
    pub top_place: Option<String>,
    /// The best cosine of the question with any chunk.
    pub best_cosine: f32,
    /// Whether the retriever's "nothing relevant" signal fired.
    pub nothing_relevant: bool,
}

/// The eval's numbers, with 95% Wilson intervals, and one row per question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetrievalReport {
    /// Chunks read per question (the "5" of recall@5).
    pub k: usize,
    pub documents: usize,
    pub chunks: usize,
    /// Characters (Unicode scalar values) of the documents' text as read.
    pub chars: usize,
    pub answerable: usize,
    pub unanswerable: usize,
    /// Answerable questions with the answer in at least one of the top k chunks.
    pub recall_at_k: Rate,
    /// Answerable questions with the answer in the chunk cited first: the top-ranked one.
    pub citation_holds_answer: Rate,
    /// Unanswerable questions for which the "nothing relevant" signal fired (higher is better).
    pub nothing_relevant_unanswerable: Rate,
    /// Answerable questions for which it fired (lower is better: each is a miss).
    pub nothing_relevant_answerable: Rate,
    /// Answerable questions whose answer some chunk of their own document holds.
    pub answer_in_chunks: Rate,
    pub rows: Vec<QuestionRow>,
}

/// Runs the eval on `dir` (holding [`DOCUMENTS_DIR`] and [`QUESTIONS_FILE`]) with the top `k`
/// chunks per question.
pub fn run_retrieval_eval(dir: &Path, encoder: &Encoder, k: usize) -> Result<RetrievalReport> {
    let questions = read_questions(&dir.join(QUESTIONS_FILE))?;
    let docs_dir = dir.join(DOCUMENTS_DIR);
    let files = document_files(&docs_dir)?;

    // Every chunk of every document, with the index of its document.
    let mut names = Vec::new();
    let mut chars = 0;
    let mut texts: Vec<String> = Vec::new();
    // What each chunk is embedded and keyword-scored by: its place, then its text.
    let mut indexed: Vec<String> = Vec::new();
    let mut places: Vec<Place> = Vec::new();
    let mut doc_of: Vec<usize> = Vec::new();
    for path in &files {
        let doc = read_document(path)?;
        chars += doc
            .sections
            .iter()
            .map(|s| s.text.chars().count())
            .sum::<usize>();
        for c in chunk(&doc, &ChunkOptions::default()) {
            indexed.push(indexed_text(&doc.name, &c.place, &c.text));
            texts.push(c.text);
            places.push(c.place);
            doc_of.push(names.len());
        }
        names.push(doc.name);
    }
    for q in &questions {
        if let Some(d) = &q.doc {
            if !names.contains(d) {
                return Err(bad_question(dir, q, format!("no document {d:?}")));
            }
        }
    }

    let vectors = embed_all(encoder, &indexed)?;
    let entries = indexed
        .iter()
        .zip(places)
        .zip(vectors)
        .zip(&doc_of)
        .map(|(((text, place), vector), &d)| CorpusEntry {
            doc_id: d as u64,
            text: text.clone(),
            place,
            vector,
        })
        .collect();
    let corpus = Corpus::new(encoder.dim(), entries);
    let normalised: Vec<String> = texts.iter().map(|t| normalise(t)).collect();

    let query_texts: Vec<&str> = questions.iter().map(|q| q.question.as_str()).collect();
    let query_vecs = embed_all(encoder, &query_texts)?;
    let rows = questions
        .iter()
        .zip(&query_vecs)
        .map(|(q, v)| {
            let hits = hybrid_search(&q.question, v, &corpus, k);
            let answer = q.answer.as_deref().map(normalise);
            let holds = |chunk: usize| {
                answer
                    .as_ref()
                    .is_some_and(|a| normalised[chunk].contains(a))
            };
            let own_doc = q
                .doc
                .as_ref()
                .and_then(|d| names.iter().position(|n| n == d));
            let relevance = corpus.relevance(&q.question, v);
            let best_cosine = relevance.best_cosine;
            QuestionRow {
                id: q.id.clone(),
                doc: q.doc.clone(),
                hit_rank: hits.iter().position(|h| holds(h.chunk)).map(|r| r + 1),
                answer_in_chunks: own_doc
                    .is_none_or(|d| (0..corpus.len()).any(|c| doc_of[c] == d && holds(c))),
                top_place: hits
                    .first()
                    .map(|h| cited_place(&names[doc_of[h.chunk]], corpus.place(h.chunk))),
                best_cosine: best_cosine.unwrap_or(0.0),
                nothing_relevant: hits.is_empty() || !relevance.is_relevant(),
            }
        })
        .collect();
    Ok(summarise(k, names.len(), corpus.len(), chars, rows))
}

/// The report's rates from its rows.
fn summarise(
    k: usize,
    documents: usize,
    chunks: usize,
    chars: usize,
    rows: Vec<QuestionRow>,
) -> RetrievalReport {
    let (answerable, unanswerable): (Vec<&QuestionRow>, Vec<&QuestionRow>) =
        rows.iter().partition(|r| r.doc.is_some());
    let count = |set: &[&QuestionRow], f: &dyn Fn(&QuestionRow) -> bool| {
        Rate::new(set.iter().filter(|r| f(r)).count(), set.len())
    };
    RetrievalReport {
        k,
        documents,
        chunks,
        chars,
        answerable: answerable.len(),
        unanswerable: unanswerable.len(),
        recall_at_k: count(&answerable, &|r| r.hit_rank.is_some()),
        citation_holds_answer: count(&answerable, &|r| r.hit_rank == Some(1)),
        nothing_relevant_unanswerable: count(&unanswerable, &|r| r.nothing_relevant),
        nothing_relevant_answerable: count(&answerable, &|r| r.nothing_relevant),
        answer_in_chunks: count(&answerable, &|r| r.answer_in_chunks),
        rows,
    }
}

impl RetrievalReport {
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// The report's Markdown section: the rates, the counts, and the questions missed.
    pub fn to_markdown(&self) -> String {
        let mut o = String::new();
        write_retrieval(&mut o, self);
        o
    }
}

/// The retrieval section: rates with intervals, then every answerable question not found in the
/// top k and every unanswerable one the signal missed.
pub fn write_retrieval(o: &mut String, r: &RetrievalReport) {
    let _ = writeln!(o, "## Retrieval (ask your documents)\n");
    let _ = writeln!(
        o,
        "{} documents, {} chunks, {} characters; {} answerable and {} unanswerable questions; \
         hybrid search, top {}.\n",
        r.documents, r.chunks, r.chars, r.answerable, r.unanswerable, r.k
    );
    let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
    let rows = [
        (format!("**recall@{}** (target ≥ 90%)", r.k), &r.recall_at_k),
        (
            "**citation holds the answer** (top chunk; target ≥ 85%)".to_string(),
            &r.citation_holds_answer,
        ),
        (
            "unanswerable: nothing relevant found (higher is better)".to_string(),
            &r.nothing_relevant_unanswerable,
        ),
        (
            "answerable: nothing relevant found (lower is better)".to_string(),
            &r.nothing_relevant_answerable,
        ),
        (
            "answer kept whole by chunking".to_string(),
            &r.answer_in_chunks,
        ),
    ];
    for (name, rate) in rows {
        let _ = writeln!(o, "| {name} | {} |", rate.display());
    }
    o.push('\n');
    let missed: Vec<&QuestionRow> = r
        .rows
        .iter()
        .filter(|q| {
            (q.doc.is_some() && q.hit_rank != Some(1)) || (q.doc.is_none() && !q.nothing_relevant)
        })
        .collect();
    if missed.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Questions whose top chunk does not hold the answer (or, unanswerable, that found \
         something):\n"
    );
    let _ = writeln!(
        o,
        "| id | answer's rank | top chunk from | best cosine |\n|---|---|---|---|"
    );
    for q in missed {
        let rank = match (q.doc.is_some(), q.hit_rank) {
            (false, _) => "no answer".to_string(),
            (true, Some(n)) => n.to_string(),
            (true, None) => format!("not in top {}", r.k),
        };
        let _ = writeln!(
            o,
            "| {} | {rank} | {} | {:.2} |",
            q.id,
            q.top_place.as_deref().unwrap_or("nothing"),
            q.best_cosine
        );
    }
    o.push('\n');
}

/// The rule's text comparison: whitespace runs become one space, ends trimmed, lower case.
pub fn normalise(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// "file › heading" (", page N" added for a PDF), as a citation names a chunk.
fn cited_place(name: &str, place: &Place) -> String {
    let mut s = name.to_string();
    if let Some(h) = &place.heading {
        let _ = write!(s, " › {h}");
    }
    if let Some(p) = place.page {
        let _ = write!(s, ", page {p}");
    }
    s
}

/// Embeds `texts` (the encoder batches them into passes itself).
fn embed_all<S: AsRef<str>>(encoder: &Encoder, texts: &[S]) -> Result<Vec<Vec<f32>>> {
    let refs: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
    Ok(encoder.embed(&refs)?)
}

/// The files of the documents folder, sorted by name (so document ids are stable).
fn document_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.path()).map_err(io(dir)))
        .collect::<Result<_>>()?;
    files.retain(|p| p.is_file());
    files.sort();
    if files.is_empty() {
        return Err(EvalError::EmptySuite {
            path: dir.to_path_buf(),
            skipped: 0,
        });
    }
    Ok(files)
}

fn read_questions(path: &Path) -> Result<Vec<Question>> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut q: Question = serde_json::from_str(line).map_err(|e| EvalError::Questions {
            path: path.to_path_buf(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        q.line = i + 1;
        if q.doc.is_some() != q.answer.is_some() {
            return Err(EvalError::Questions {
                path: path.to_path_buf(),
                line: i + 1,
                reason: "doc and answer must both be set or both be null".into(),
            });
        }
        if q.answer.as_deref().is_some_and(|a| normalise(a).is_empty()) {
            return Err(EvalError::Questions {
                path: path.to_path_buf(),
                line: i + 1,
                reason: "the answer is empty".into(),
            });
        }
        out.push(q);
    }
    if out.is_empty() {
        return Err(EvalError::EmptySuite {
            path: path.to_path_buf(),
            skipped: 0,
        });
    }
    Ok(out)
}

fn bad_question(dir: &Path, q: &Question, reason: String) -> EvalError {
    EvalError::Questions {
        path: dir.join(QUESTIONS_FILE),
        line: q.line,
        reason: format!("{}: {reason}", q.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, doc: Option<&str>, hit_rank: Option<usize>, nothing: bool) -> QuestionRow {
        QuestionRow {
            id: id.into(),
            doc: doc.map(Into::into),
            hit_rank,
            answer_in_chunks: true,
            top_place: Some("a.md › Rent".into()),
            best_cosine: 0.5,
            nothing_relevant: nothing,
        }
    }

    #[test]
    fn normalise_collapses_whitespace_and_case() {
        assert_eq!(
            normalise("  The rent is\n£1,145   per\tMonth "),
            "the rent is £1,145 per month"
        );
    }

    #[test]
    fn rates_follow_the_rule() {
        let rows = vec![
            row("a", Some("a.md"), Some(1), false),
            row("b", Some("a.md"), Some(3), false),
            row("c", Some("b.md"), None, true),
            row("d", None, None, true),
            row("e", None, None, false),
        ];
        let r = summarise(5, 2, 10, 1000, rows);
        assert_eq!((r.answerable, r.unanswerable), (3, 2));
        assert_eq!((r.recall_at_k.k, r.recall_at_k.n), (2, 3));
        assert_eq!(r.citation_holds_answer.k, 1);
        assert_eq!(r.nothing_relevant_unanswerable.k, 1);
        assert_eq!(r.nothing_relevant_answerable.k, 1);
        let md = r.to_markdown();
        assert!(md.contains("recall@5"), "{md}");
        // Rows whose top chunk misses: b (rank 3), c (not found), e (found something).
        assert!(
            md.contains("| b | 3 |") && md.contains("| c | not in top 5 |"),
            "{md}"
        );
        assert!(
            md.contains("| e | no answer |") && !md.contains("| a |"),
            "{md}"
        );
        let back: RetrievalReport = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        // serde_json's float parsing may differ in the last bit, so compare what is exact.
        assert_eq!(back.rows, r.rows);
        assert_eq!(back.recall_at_k.k, 2);
        assert!((back.recall_at_k.hi - r.recall_at_k.hi).abs() < 1e-12);
    }

    #[test]
    fn questions_file_errors_name_the_line() {
        let dir = std::env::temp_dir().join(format!("kostant-retrieval-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(QUESTIONS_FILE);
        let good = r#"{"id":"a","question":"Rent?","doc":"a.md","answer":"£1,145"}"#;
        let half = r#"{"id":"b","question":"Pets?","doc":"a.md","answer":null}"#;
        std::fs::write(&path, format!("{good}\n\n{half}\n")).unwrap();
        let err = read_questions(&path).unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("both"), "{err}");
        std::fs::write(&path, format!("{good}\n")).unwrap();
        let qs = read_questions(&path).unwrap();
        assert_eq!(
            (qs.len(), qs[0].line, qs[0].answer.as_deref()),
            (1, 1, Some("£1,145"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn places_read_like_citations() {
        let p = Place {
            page: Some(3),
            heading: Some("Terms › Deposit".into()),
        };
        assert_eq!(
            cited_place("lease.pdf", &p),
            "lease.pdf › Terms › Deposit, page 3"
        );
        assert_eq!(cited_place("notes.txt", &Place::default()), "notes.txt");
    }
}
