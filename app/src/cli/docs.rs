//! `kostant docs`: add files to the sealed document index, list and remove them, search them,
//! and ask them a question answered from cited passages through the guarded pipeline.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use kostant_app::assistant::ask::{AskDocuments, SharedLibrary, Source};
use kostant_app::assistant::documents::{passage_label, FoundPassage, Library, Retrieval};
use kostant_app::assistant::responder::{
    ContextOrigin, GenerationSettings, GuardedResponder, ReplyEvent, ReplyRequest, Responder,
};
use kostant_app::features::Feature;
use kostant_app::history::{self, time::format_utc, Store};
use kostant_engine::{CancelHandle, Message, Role};
use kostant_safety::Verdict;

use super::{ModelArgs, SamplingArgs};

#[derive(Args, Debug)]
pub struct DocsArgs {
    #[command(subcommand)]
    pub action: DocsAction,
    /// Where the index lives (it is stored, sealed, in the history database).
    ///
    /// Default: $XDG_DATA_HOME/kostant or ~/.local/share/kostant.
    #[arg(long, env = "KOSTANT_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Print JSON: one object (the last line) with the result.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum DocsAction {
    /// Add .txt, .md, .html or .pdf files to the index.
    Add {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// The documents in the index.
    List,
    /// Remove one document and its passages.
    Remove { id: i64 },
    /// The passages that best match a query.
    Search {
        /// What to look for: a question or a few words.
        #[arg(long)]
        query: String,
        /// How many passages.
        #[arg(long, default_value_t = 5)]
        k: usize,
    },
    /// Answer a question from the documents, citing the passages used.
    Ask(AskArgs),
}

#[derive(Args, Debug)]
pub struct AskArgs {
    /// The question.
    #[arg(long)]
    pub prompt: String,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

pub fn run(args: DocsArgs) -> Result<()> {
    let dir = history::data_dir(args.data_dir.as_deref())?;
    let mut store = history::open_default(&dir)?;
    let out = &mut std::io::stdout().lock();
    let j = args.json;
    match args.action {
        DocsAction::List => list(&store, out, j),
        DocsAction::Remove { id } => {
            store.remove_document(id)?;
            if j {
                writeln!(out, "{}", json!({ "removed": id }))?;
            } else {
                writeln!(out, "removed document {id}")?;
            }
            Ok(())
        }
        DocsAction::Add { files } => add(&mut store, out, &files, j),
        DocsAction::Search { query, k } => search(&store, out, &query, k, j),
        DocsAction::Ask(ask_args) => {
            // The responder opens the history on its own connection, as the app's worker does.
            drop(store);
            ask(&dir, out, &ask_args, j)
        }
    }
}

/// `docs add`: each file read, embedded and stored on its own; one that fails is reported and
/// the others still go in. Fails at the end if any did.
fn add(store: &mut Store, out: &mut impl Write, files: &[PathBuf], j: bool) -> Result<()> {
    let library = Library::open()?;
    let mut added = Vec::new();
    let mut failed = Vec::new();
    for file in files {
        match library.add(store, file) {
            Ok(d) => {
                if !j {
                    writeln!(
                        out,
                        "added {} as document {} ({} passages)",
                        d.name, d.id, d.passages
                    )?;
                }
                added.push(
                    json!({"id": d.id, "name": d.name, "size": d.size_bytes, "chunks": d.passages}),
                );
            }
            Err(e) => {
                eprintln!("could not add {}: {e}", file.display());
                failed.push(json!({"file": file.display().to_string(), "error": e.to_string()}));
            }
        }
    }
    if j {
        writeln!(out, "{}", json!({ "added": added, "failed": failed }))?;
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} files could not be added",
            failed.len(),
            files.len()
        );
    }
    Ok(())
}

/// `docs list`: id, name, size and passage count of each document.
fn list(store: &Store, out: &mut impl Write, j: bool) -> Result<()> {
    let docs = store.documents()?;
    if j {
        let items: Vec<Value> = docs
            .iter()
            .map(|d| {
                json!({
                    "id": d.id,
                    "name": d.name.as_ref().map_err(|e| e.to_string()).ok(),
                    "size": d.size_bytes,
                    "chunks": d.passages,
                    "added_at": format_utc(d.added_at_ms),
                })
            })
            .collect();
        writeln!(out, "{}", json!({ "documents": items }))?;
    } else if docs.is_empty() {
        writeln!(out, "(no documents yet: kostant docs add FILE…)")?;
    } else {
        for d in &docs {
            let name = match &d.name {
                Ok(n) => n.clone(),
                Err(e) => format!("[unreadable: {e}]"),
            };
            writeln!(
                out,
                "{:>5}  {}  {:>9} bytes  {:>4} passages  {name}",
                d.id,
                format_utc(d.added_at_ms),
                d.size_bytes,
                d.passages
            )?;
        }
    }
    Ok(())
}

fn passage_json(n: Option<usize>, p: &FoundPassage) -> Value {
    json!({
        "n": n,
        "doc": p.document_name,
        "doc_id": p.document,
        "page": p.place.page,
        "heading": p.place.heading,
        "text": p.text,
        "score": p.score,
        "vector_score": p.vector_score,
        "keyword_score": p.keyword_score,
    })
}

/// `docs search`: the best passages, with their scores.
fn search(store: &Store, out: &mut impl Write, query: &str, k: usize, j: bool) -> Result<()> {
    let library = Library::open()?;
    let found = library.search(store, query, k)?;
    warn_unreadable(&found);
    if j {
        let items: Vec<Value> = found
            .passages
            .iter()
            .map(|p| passage_json(None, p))
            .collect();
        writeln!(
            out,
            "{}",
            json!({ "passages": items, "relevant": found.relevant })
        )?;
        return Ok(());
    }
    if found.passages.is_empty() {
        writeln!(out, "(no documents to search)")?;
    }
    for (i, p) in found.passages.iter().enumerate() {
        writeln!(
            out,
            "{}. {} (score {:.3})",
            i + 1,
            passage_label(p),
            p.score
        )?;
        writeln!(out, "   {}", p.text)?;
    }
    Ok(())
}

fn warn_unreadable(found: &Retrieval) {
    if found.unreadable > 0 {
        eprintln!(
            "{} stored passages failed their integrity check and were left out",
            found.unreadable
        );
    }
}

/// `docs ask`: the app's flow ([`AskDocuments`] around the guarded responder): the passages
/// found, each read by the guard, the question answered from those it lets through, and the
/// passages the reply stands on.
fn ask(data_dir: &Path, out: &mut impl Write, args: &AskArgs, j: bool) -> Result<()> {
    let model_path = crate::model_path::resolve(args.model.model.as_deref())?;
    let threads = args
        .model
        .threads
        .unwrap_or_else(kostant_platform::cpu::performance_cores);
    let (guarded, _) = GuardedResponder::load(&model_path, threads)?;
    let mut responder = AskDocuments::new(
        Box::new(guarded),
        Some(data_dir.to_path_buf()),
        SharedLibrary::default(),
    );
    let req = ReplyRequest {
        system: Feature::Documents.system_prompt(),
        feature: Feature::Documents,
        shape: None,
        turns: vec![Message {
            role: Role::User,
            content: args.prompt.clone(),
        }],
        settings: GenerationSettings {
            temperature: args.sampling.temperature,
            top_k: args.sampling.top_k,
            top_p: args.sampling.top_p,
            min_p: args.sampling.min_p,
            repeat_penalty: args.sampling.repeat_penalty,
            max_tokens: args.max_tokens,
            n_ctx: args.model.ctx,
            seed: args.sampling.seed,
            ..GenerationSettings::default()
        },
        conversation: None,
        origin: ContextOrigin::Continued,
    };
    let (mut outcome, mut failure, mut sources) = (None, None, Vec::new());
    responder.respond(&req, &CancelHandle::new(), &mut |ev| match ev {
        ReplyEvent::Done(o) => outcome = Some(o),
        ReplyEvent::Failed(e) => failure = Some(e),
        ReplyEvent::Sources(s) => sources = s,
        _ => {}
    });
    if let Some(e) = failure {
        bail!("{e}");
    }
    let Some(o) = outcome else {
        bail!("the reply ended without a result")
    };
    print_answer(out, j, &o.text, &sources, o.verdict)
}

fn print_answer(
    out: &mut impl Write,
    j: bool,
    reply: &str,
    sources: &[Source],
    verdict: Verdict,
) -> Result<()> {
    if j {
        let items: Vec<Value> = sources
            .iter()
            .map(|s| passage_json(Some(s.n), &s.passage))
            .collect();
        writeln!(
            out,
            "{}",
            json!({
                "reply": reply,
                "citations": items,
                "verdict": verdict,
                "category": verdict.category(),
            })
        )?;
        return Ok(());
    }
    writeln!(out, "{reply}")?;
    if !sources.is_empty() {
        writeln!(out)?;
        for s in sources {
            writeln!(out, "[{}] {}", s.n, s.label)?;
        }
    }
    Ok(())
}
