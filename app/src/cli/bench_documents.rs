//! `kostant bench --documents DIR` and `--embed-texts FILE`: the speed of asking documents.
//! The first indexes every file of a directory into a fresh sealed history (in a temporary
//! data and key directory, deleted after) with the sentence encoder, then times questions over
//! that index as `docs search` asks them; the second times the encoder alone on a file of
//! texts, batched as llama-embedding batches them, so the two can be compared on one GGUF.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};

use kostant_app::assistant::documents::{embedder_path, Library};
use kostant_app::history::{Store, DB_FILE};
use kostant_documents::{chunk, indexed_text, read_document, ChunkOptions, Document, Format};
use kostant_engine::encoder::batches;
use kostant_platform::keystore::FileKeyStore;

use super::{peak_rss_mb, BenchArgs};

/// Characters of extracted text counted as one page for files that have no pages.
pub const CHARS_PER_PAGE: usize = 2500;
/// Passages each question asks for (`docs search`'s default).
const K: usize = 5;

/// Questions asked of a directory that is not the retrieval eval's documents.
const GENERIC_QUESTIONS: [&str; 12] = [
    "What is the deadline?",
    "How much does it cost?",
    "Who do I contact about a problem?",
    "What are the steps to set it up?",
    "What happens if I cancel early?",
    "Where was the meeting held and who attended?",
    "What is covered and what is excluded?",
    "How long does it take?",
    "What should I do first in an emergency?",
    "Which dates are mentioned for the trip?",
    "What was decided about the budget?",
    "What are the main findings?",
];

#[derive(Args, Debug, Clone, Default)]
pub struct DocumentsBenchArgs {
    /// Instead of the above: index every file of DIR and time it, then time questions.
    ///
    /// The files go into a fresh sealed history in a temporary directory (deleted after) with
    /// the sentence encoder; then each question is searched as `docs search` does (the sealed
    /// rows opened, the question embedded, the hybrid search), and the peak memory with the
    /// index and the encoder resident is reported.
    #[arg(long, value_name = "DIR", conflicts_with = "embed_texts")]
    pub documents: Option<PathBuf>,
    /// The questions for --documents: JSONL with a "question" field, or one per line.
    ///
    /// Default: the retrieval eval's questions when DIR is its documents directory, else a
    /// fixed list of generic questions. --limit keeps the first N.
    #[arg(long, value_name = "FILE")]
    pub questions: Option<PathBuf>,
    /// Instead of the above: the encoder's throughput on the texts of FILE (one per line).
    ///
    /// The texts are tokenized once, then embedded --repetitions times (after one warm-up
    /// round) in passes of up to --embed-batch-tokens tokens, as llama-embedding's -b packs
    /// them.
    #[arg(long, value_name = "FILE")]
    pub embed_texts: Option<PathBuf>,
    /// Most tokens per encoder pass for --embed-texts (llama-embedding's -b).
    #[arg(long, default_value_t = 1024)]
    pub embed_batch_tokens: usize,
    /// With --documents: also write every passage as it was embedded to FILE, one a line.
    ///
    /// Line breaks inside a passage become spaces (the tokenizer reads them alike), so the
    /// file can feed --embed-texts and llama-embedding.
    #[arg(long, value_name = "FILE", requires = "documents")]
    pub dump_texts: Option<PathBuf>,
    /// The sentence encoder's GGUF (default: KOSTANT_EMBEDDER or the installed one).
    #[arg(long, value_name = "FILE")]
    pub embedder: Option<PathBuf>,
}

impl DocumentsBenchArgs {
    pub fn is_set(&self) -> bool {
        self.documents.is_some() || self.embed_texts.is_some()
    }
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let threads = super::init_threads(&args.model)?;
    let d = &args.documents;
    let path = match &d.embedder {
        Some(p) => p.clone(),
        None => embedder_path().context(
            "the sentence encoder is not installed; run scripts/setup.sh or pass --embedder",
        )?,
    };
    let load = Instant::now();
    let library = Library::load(&path)
        .with_context(|| format!("cannot load the sentence encoder {}", path.display()))?;
    let load_ms = load.elapsed().as_secs_f64() * 1e3;
    let mut report = json!({
        "embedder": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "threads": threads,
        "cpu": kostant_kernels::cpu_features().to_string(),
        "load_ms": load_ms,
    });
    let measured = match (&d.documents, &d.embed_texts) {
        (Some(dir), _) => documents(args, &library, dir)?,
        (None, Some(file)) => embed_texts(args, &library, file)?,
        (None, None) => unreachable!("run only with --documents or --embed-texts"),
    };
    merge(&mut report, measured);
    report["peak_rss_mb"] = json!(peak_rss_mb());
    if args.json {
        println!("{report}");
    } else {
        print_text(&report);
    }
    Ok(())
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

/// A temporary directory removed when dropped, even when the benchmark fails midway.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "kostant-bench-documents-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files of `dir` (not its subdirectories), sorted by name.
fn files_of(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the directory {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.is_file());
    files.sort();
    anyhow::ensure!(!files.is_empty(), "{} holds no files", dir.display());
    Ok(files)
}

/// What a document counts as: its PDF pages, or its extracted characters / [`CHARS_PER_PAGE`].
fn pages(doc: &Document) -> (usize, usize) {
    let chars: usize = doc.sections.iter().map(|s| s.text.chars().count()).sum();
    let pdf_pages = match doc.format {
        Format::Pdf => doc
            .sections
            .iter()
            .filter_map(|s| s.place.page)
            .max()
            .unwrap_or(0) as usize,
        _ => 0,
    };
    (pdf_pages, chars)
}

/// `--documents DIR`.
fn documents(args: &BenchArgs, library: &Library, dir: &Path) -> Result<Value> {
    let files = files_of(dir)?;
    let questions = questions(args, dir)?;
    let tmp = TempDir::new()?;
    let (data, keys) = (tmp.0.join("data"), tmp.0.join("keys"));
    std::fs::create_dir_all(&data)?;
    let mut store = Store::open(&data.join(DB_FILE), FileKeyStore::new(&keys))?;

    // Indexing, timed as `docs add` runs it: read, chunk, embed, seal and write each file.
    let t = Instant::now();
    let mut passages = 0;
    for file in &files {
        let added = library
            .add(&mut store, file)
            .with_context(|| format!("cannot add {}", file.display()))?;
        passages += added.passages;
    }
    let index_s = t.elapsed().as_secs_f64();

    // What was indexed, counted afterwards (untimed) from the same reading and chunking.
    let (mut pdf_pages, mut text_chars, mut tokens) = (0, 0, 0);
    let encoder = library.encoder();
    let mut dumped = Vec::new();
    for file in &files {
        let doc = read_document(file)?;
        let (p, c) = pages(&doc);
        pdf_pages += p;
        if doc.format != Format::Pdf {
            text_chars += c;
        }
        for c in chunk(&doc, &ChunkOptions::default()) {
            let text = indexed_text(&doc.name, &c.place, &c.text);
            tokens += encoder.token_ids(&text)?.len();
            dumped.push(text.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    if let Some(f) = &args.documents.dump_texts {
        std::fs::write(f, dumped.join("\n") + "\n")
            .with_context(|| format!("cannot write {}", f.display()))?;
    }
    let pages = pdf_pages as f64 + text_chars as f64 / CHARS_PER_PAGE as f64;
    let db_bytes = std::fs::metadata(data.join(DB_FILE)).map_or(0, |m| m.len());

    // Questions: one warm-up, then each once, as `docs search` answers it.
    library.search(&store, questions[0].as_str(), K)?;
    let mut ms = Vec::with_capacity(questions.len());
    for q in &questions {
        let t = Instant::now();
        let found = library.search(&store, q, K)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(found);
    }
    let (mean, p95) = (mean(&ms), percentile(&mut ms, 0.95));
    Ok(json!({
        "mode": "documents",
        "files": files.len(),
        "pages": pages,
        "pdf_pages": pdf_pages,
        "text_chars": text_chars,
        "pages_rule": format!("PDF pages, plus extracted characters / {CHARS_PER_PAGE} for other files"),
        "index_s": index_s,
        "pages_per_min": pages * 60.0 / index_s,
        "passages": passages,
        "tokens_embedded": tokens,
        "index_tokens_per_s": tokens as f64 / index_s,
        "index_db_mb": db_bytes as f64 / (1024.0 * 1024.0),
        "questions": questions.len(),
        "k": K,
        "query_mean_ms": mean,
        "query_p95_ms": p95,
        "query_max_ms": ms.last().copied(),
    }))
}

/// The questions `--documents` asks (see [`DocumentsBenchArgs::questions`]).
fn questions(args: &BenchArgs, dir: &Path) -> Result<Vec<String>> {
    let eval_dir = super::repo_assets("evals/retrieval", "questions.jsonl");
    let file = args.documents.questions.clone().or_else(|| {
        let eval_dir = eval_dir?;
        let same = dir.canonicalize().ok()? == eval_dir.join("documents").canonicalize().ok()?;
        same.then(|| eval_dir.join("questions.jsonl"))
    });
    let mut qs: Vec<String> = match file {
        Some(f) => std::fs::read_to_string(&f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| match serde_json::from_str::<Value>(l) {
                Ok(v) => v["question"].as_str().map(str::to_string).with_context(|| {
                    format!("{}: a JSON line without a \"question\"", f.display())
                }),
                Err(_) => Ok(l.to_string()),
            })
            .collect::<Result<_>>()?,
        None => GENERIC_QUESTIONS.iter().map(|q| q.to_string()).collect(),
    };
    if let Some(n) = args.limit {
        qs.truncate(n);
    }
    anyhow::ensure!(!qs.is_empty(), "no questions to ask");
    Ok(qs)
}

/// `--embed-texts FILE`.
fn embed_texts(args: &BenchArgs, library: &Library, file: &Path) -> Result<Value> {
    let budget = args.documents.embed_batch_tokens;
    anyhow::ensure!(budget >= 1, "--embed-batch-tokens must be at least 1");
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let texts: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    anyhow::ensure!(!texts.is_empty(), "{} holds no texts", file.display());
    let encoder = library.encoder();

    let t = Instant::now();
    let ids = texts
        .iter()
        .map(|t| encoder.token_ids(t))
        .collect::<kostant_engine::Result<Vec<_>>>()?;
    let tokenize_ms = t.elapsed().as_secs_f64() * 1e3;
    let tokens: usize = ids.iter().map(Vec::len).sum();
    let batches = batches(&ids, budget);

    // One warm-up round (pages the weights in, sizes the scratch), then the timed rounds.
    let round = || -> Result<f64> {
        let t = Instant::now();
        for b in &batches {
            std::hint::black_box(encoder.embed_ids(b)?);
        }
        Ok(t.elapsed().as_secs_f64())
    };
    round()?;
    let secs = (0..args.repetitions.max(1))
        .map(|_| round())
        .collect::<Result<Vec<f64>>>()?;
    let tok_s: Vec<f64> = secs.iter().map(|s| tokens as f64 / s).collect();
    Ok(json!({
        "mode": "embed-texts",
        "texts": texts.len(),
        "tokens": tokens,
        "batch_tokens": budget,
        "passes": batches.len(),
        "rounds": secs.len(),
        "tokenize_ms": tokenize_ms,
        "round_ms": secs.iter().map(|s| s * 1e3).collect::<Vec<_>>(),
        "texts_per_s": texts.len() as f64 / mean(&secs),
        "tokens_per_s": tokens as f64 / mean(&secs),
        "tokens_per_s_rounds": tok_s,
    }))
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The `q` quantile of `v` (nearest rank); sorts `v`.
fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn print_text(r: &Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "encoder {} on {} threads ({}), loaded in {:.0} ms",
        r["embedder"].as_str().unwrap_or("?"),
        r["threads"],
        r["cpu"].as_str().unwrap_or("?"),
        f("load_ms")
    );
    if r["mode"] == "documents" {
        println!(
            "indexed {} files, {:.1} pages ({}) in {:.2} s: {:.1} pages/min",
            r["files"],
            f("pages"),
            r["pages_rule"].as_str().unwrap_or(""),
            f("index_s"),
            f("pages_per_min")
        );
        println!(
            "  {} passages, {} tokens embedded ({:.0} tokens/s); index {:.2} MB on disk",
            r["passages"],
            r["tokens_embedded"],
            f("index_tokens_per_s"),
            f("index_db_mb")
        );
        println!(
            "query (open the sealed rows, embed the question, hybrid search, k={}) over {} questions: mean {:.1} ms, p95 {:.1} ms",
            r["k"],
            r["questions"],
            f("query_mean_ms"),
            f("query_p95_ms")
        );
    } else {
        println!(
            "embedded {} texts ({} tokens) in {} passes of up to {} tokens, {} rounds: {:.1} texts/s, {:.0} tokens/s (tokenizing took {:.1} ms, not counted)",
            r["texts"],
            r["tokens"],
            r["passes"],
            r["batch_tokens"],
            r["rounds"],
            f("texts_per_s"),
            f("tokens_per_s"),
            f("tokenize_ms")
        );
    }
    if let Some(mb) = r["peak_rss_mb"].as_f64() {
        println!("peak RSS {mb:.1} MB");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&mut v, 0.95), 95.0);
        assert_eq!(percentile(&mut [3.0], 0.95), 3.0);
    }
}
