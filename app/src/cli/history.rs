//! `kostant history`: list, show, search, delete and export the encrypted chat history, and
//! lock it with a passphrase. Every command opens the store with the key from the key
//! directory (and the passphrase from `KOSTANT_PASSPHRASE_FILE` when it is locked); text is
//! decrypted in memory only for printing.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::history::{
    self, store::Conversation, store::Message, time::format_utc, HistoryError, LockParams,
    Passphrase, Store,
};

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(subcommand)]
    pub action: HistoryAction,
    /// Where the history lives.
    ///
    /// Default: $XDG_DATA_HOME/kostant or ~/.local/share/kostant.
    #[arg(long, env = "KOSTANT_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum HistoryAction {
    /// Conversations, most recent first.
    List,
    /// Every message of one conversation.
    Show { id: i64 },
    /// Messages containing TEXT (case-insensitive; decrypted and matched in memory).
    Search { text: String },
    /// Delete one conversation and its messages.
    Delete { id: i64 },
    /// Delete every conversation, replace the data key and compact the file.
    DeleteAll {
        /// Confirm: without it nothing is deleted.
        #[arg(long)]
        yes: bool,
    },
    /// Erase everything Kostant keeps: the keys first, then the history, eval runs, settings.
    ///
    /// The key files are overwritten and removed, so the history cannot be opened from that
    /// moment (no passphrase is needed); then the database, its journals, the app's eval runs
    /// and its settings are removed. Nothing without --yes.
    Wipe {
        /// Confirm: without it nothing is erased.
        #[arg(long)]
        yes: bool,
    },
    /// Safety eval runs stored by `kostant eval`, newest first.
    ///
    /// With an id, that run's report as it was written.
    Evals { id: Option<i64> },
    /// Write the whole history to FILE, encrypted under a passphrase.
    ///
    /// The key is derived by PBKDF2-HMAC-SHA256 (600,000 iterations); the file is sealed with
    /// ChaCha20-Poly1305.
    Export {
        /// The file to write; it must not exist.
        #[arg(long)]
        out: PathBuf,
        /// Read the passphrase from the first line of this file.
        ///
        /// Without it, the passphrase is KOSTANT_EXPORT_PASSPHRASE.
        #[arg(long)]
        passphrase_file: Option<PathBuf>,
    },
    /// Lock the history with a passphrase: it then opens only with the passphrase and the key.
    ///
    /// The data key is sealed once more under a key derived from the passphrase (Argon2id,
    /// about half a second per try); no row is re-encrypted. Other commands then need
    /// KOSTANT_PASSPHRASE_FILE. A forgotten passphrase cannot be recovered.
    Lock {
        /// Read the new passphrase from the first line of this file.
        #[arg(long)]
        passphrase_file: PathBuf,
    },
    /// Remove the lock: the key file alone opens the history again.
    Unlock {
        /// Read the passphrase from the first line of this file.
        #[arg(long)]
        passphrase_file: PathBuf,
    },
    /// Change the lock's passphrase (the data key is rewrapped; no row is re-encrypted).
    Passphrase {
        /// The current passphrase, from the first line of this file.
        #[arg(long)]
        passphrase_file: PathBuf,
        /// The new passphrase, from the first line of this file.
        #[arg(long)]
        new_passphrase_file: PathBuf,
    },
}

pub fn run(args: HistoryArgs) -> Result<()> {
    let dir = history::data_dir(args.data_dir.as_deref())?;
    let out = &mut std::io::stdout().lock();
    let j = args.json;
    // The wipe needs no key or passphrase: it opens nothing.
    if let HistoryAction::Wipe { yes } = args.action {
        return wipe(&dir, out, yes, j);
    }
    // The lock's commands open the store with the passphrase they are given.
    let current = match &args.action {
        HistoryAction::Unlock { passphrase_file }
        | HistoryAction::Passphrase {
            passphrase_file, ..
        } => Some(Passphrase::from_file(passphrase_file)?),
        _ => history::passphrase_from_env()?,
    };
    let mut store = history::open_with_passphrase(&dir, current)?;
    match args.action {
        HistoryAction::List => list(&store, out, &dir, j),
        HistoryAction::Evals { id: Some(id) } => eval_report(&store, out, id),
        HistoryAction::Evals { id: None } => list_evals(&store, out, &dir, j),
        HistoryAction::Show { id } => show(&store, out, id, j),
        HistoryAction::Search { text } => search(&store, out, &text, j),
        HistoryAction::Delete { id } => delete(&mut store, out, id, j),
        HistoryAction::DeleteAll { yes } => delete_all(&mut store, out, yes, j),
        HistoryAction::Export {
            out: file,
            passphrase_file,
        } => export(&store, out, &file, passphrase_file.as_deref(), j),
        HistoryAction::Wipe { .. } => unreachable!("handled above"),
        HistoryAction::Lock { passphrase_file } => {
            store.lock(
                &Passphrase::from_file(&passphrase_file)?,
                LockParams::DEFAULT,
            )?;
            said(out, j, json!({ "locked": true }), LOCKED)
        }
        HistoryAction::Unlock { passphrase_file } => {
            store.unlock(&Passphrase::from_file(&passphrase_file)?)?;
            said(out, j, json!({ "locked": false }), UNLOCKED)
        }
        HistoryAction::Passphrase {
            passphrase_file,
            new_passphrase_file,
        } => {
            let old = Passphrase::from_file(&passphrase_file)?;
            let new = Passphrase::from_file(&new_passphrase_file)?;
            store.change_passphrase(&old, &new, LockParams::DEFAULT)?;
            said(out, j, json!({ "locked": true }), REWRAPPED)
        }
    }
}

const LOCKED: &str = "locked: the history now opens only with its passphrase (give it with \
KOSTANT_PASSPHRASE_FILE). Keep the passphrase safe: without it the history cannot be opened.";
const UNLOCKED: &str = "unlocked: the key file alone opens the history again";
const REWRAPPED: &str = "the passphrase is changed; the old one no longer opens the history";

/// `history wipe --yes`: the keys destroyed, then the files; the time until the history no
/// longer opened is printed.
fn wipe(dir: &Path, out: &mut impl Write, yes: bool, j: bool) -> Result<()> {
    if !yes {
        bail!(
            "wipe erases {}; pass --yes to confirm",
            history::wipe::WHAT_GOES
        );
    }
    let w = history::wipe::wipe(dir)?;
    let ms = w.unreadable_after.as_secs_f64() * 1000.0;
    if j {
        let removed: Vec<_> = w.removed.iter().map(|p| p.display().to_string()).collect();
        let v = json!({ "wiped": true, "key_files": w.key_files, "unreadable_after_ms": ms, "removed": removed });
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(
        out,
        "erased: {} key file(s) destroyed in {ms:.1} ms, and from then on the history could not be opened",
        w.key_files
    )?;
    for p in &w.removed {
        writeln!(out, "removed {}", p.display())?;
    }
    Ok(())
}

/// Prints `value` as JSON or `text` as a line.
fn said(out: &mut impl Write, j: bool, value: serde_json::Value, text: &str) -> Result<()> {
    match j {
        true => writeln!(out, "{value}")?,
        false => writeln!(out, "{text}")?,
    }
    Ok(())
}

/// `history list`: one line (or JSON object) per conversation.
fn list(store: &Store, out: &mut impl Write, dir: &Path, j: bool) -> Result<()> {
    let list = store.list()?;
    if j {
        let items: Vec<_> = list.iter().map(conversation_json).collect();
        writeln!(out, "{}", json!({ "conversations": items }))?;
    } else if list.is_empty() {
        writeln!(out, "(no saved conversations in {})", dir.display())?;
    } else {
        for c in &list {
            writeln!(
                out,
                "{:>5}  {}  {:>3} msgs  {}",
                c.id,
                format_utc(c.updated_at_ms),
                c.messages,
                title_text(c)
            )?;
        }
    }
    Ok(())
}

/// `history evals ID`: that run's stored report, as it was written.
fn eval_report(store: &Store, out: &mut impl Write, id: i64) -> Result<()> {
    let runs = store.eval_runs()?;
    let run = runs
        .iter()
        .find(|r| r.id == id)
        .with_context(|| format!("no eval run {id}"))?;
    match &run.report {
        Ok(r) => writeln!(out, "{r}")?,
        Err(e) => bail!("eval run {id}: {e}"),
    }
    Ok(())
}

/// `history evals`: one line (or JSON object) per stored eval run; an error after the list
/// when any failed its integrity check.
fn list_evals(store: &Store, out: &mut impl Write, dir: &Path, j: bool) -> Result<()> {
    let runs = store.eval_runs()?;
    let bad = runs.iter().filter(|r| r.report.is_err()).count();
    let items: Vec<_> = runs.iter().map(eval_run_json).collect();
    if j {
        writeln!(out, "{}", json!({ "eval_runs": items }))?;
    } else if items.is_empty() {
        writeln!(out, "(no stored eval runs in {})", dir.display())?;
    } else {
        for (r, v) in runs.iter().zip(&items) {
            writeln!(
                out,
                "{:>5}  {}  {} {}  {}",
                r.id,
                format_utc(r.created_at_ms),
                v["model"].as_str().unwrap_or("?"),
                v["quantization"].as_str().unwrap_or("?"),
                v["suites"]
            )?;
        }
    }
    if bad > 0 {
        out.flush()?;
        bail!("{bad} eval run(s) failed their integrity check");
    }
    Ok(())
}

/// `history show ID`: every message of the conversation; an error after them when any failed
/// its integrity check.
fn show(store: &Store, out: &mut impl Write, id: i64, j: bool) -> Result<()> {
    let c = store.conversation(id)?;
    let msgs = store.messages(id)?;
    let bad = msgs.iter().filter(|m| m.text.is_err()).count();
    if j {
        let mut v = conversation_json(&c);
        v["messages"] = msgs.iter().map(message_json).collect();
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "# {} · {}",
            title_text(&c),
            format_utc(c.created_at_ms)
        )?;
        for m in &msgs {
            writeln!(out, "\n[{}] {}", role(m), format_utc(m.created_at_ms))?;
            match &m.text {
                Ok(t) => writeln!(out, "{t}")?,
                Err(e) => writeln!(out, "<unreadable: {e}>")?,
            }
        }
    }
    if bad > 0 {
        out.flush()?;
        bail!("conversation {id}: {bad} message(s) failed their integrity check");
    }
    Ok(())
}

/// `history search TEXT`: the matching messages, then a warning per unreadable one.
fn search(store: &Store, out: &mut impl Write, text: &str, j: bool) -> Result<()> {
    if text.trim().is_empty() {
        bail!("the search text is empty");
    }
    let found = store.search(text)?;
    if j {
        let hits: Vec<_> = found.hits.iter().map(message_json).collect();
        let bad: Vec<_> = found.unreadable.iter().map(|e| e.to_string()).collect();
        writeln!(
            out,
            "{}",
            json!({ "query": text, "hits": hits, "unreadable": bad })
        )?;
    } else {
        for m in &found.hits {
            let t = m.text.as_deref().unwrap_or("");
            writeln!(
                out,
                "{:>5}/{:<5} [{}] {}",
                m.conversation_id,
                m.id,
                role(m),
                snippet(t, text)
            )?;
        }
        writeln!(out, "({} match(es))", found.hits.len())?;
    }
    for e in &found.unreadable {
        eprintln!("kostant: warning: {e}");
    }
    Ok(())
}

/// `history delete ID`.
fn delete(store: &mut Store, out: &mut impl Write, id: i64, j: bool) -> Result<()> {
    store.delete(id)?;
    if j {
        writeln!(out, "{}", json!({ "deleted": id }))?;
    } else {
        writeln!(out, "deleted conversation {id}")?;
    }
    Ok(())
}

/// `history delete-all --yes`: nothing without `--yes`.
fn delete_all(store: &mut Store, out: &mut impl Write, yes: bool, j: bool) -> Result<()> {
    if !yes {
        bail!("delete-all removes every saved conversation; pass --yes to confirm");
    }
    let n = store.delete_all()?;
    if j {
        writeln!(out, "{}", json!({ "deleted_conversations": n }))?;
    } else {
        writeln!(
            out,
            "deleted {n} conversation(s); the history has new keys and its file is compacted"
        )?;
    }
    Ok(())
}

/// `history export --out FILE`: the whole history sealed under a passphrase.
fn export(
    store: &Store,
    out: &mut impl Write,
    file: &Path,
    passphrase_file: Option<&Path>,
    j: bool,
) -> Result<()> {
    let passphrase = match passphrase_file {
        Some(p) => {
            let s = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read passphrase file {}", p.display()))?;
            s.lines().next().unwrap_or("").to_string()
        }
        None => std::env::var("KOSTANT_EXPORT_PASSPHRASE").map_err(|_| {
            anyhow::anyhow!("export needs KOSTANT_EXPORT_PASSPHRASE or --passphrase-file")
        })?,
    };
    let n = history::export::export(store, &passphrase, file)?;
    if j {
        writeln!(
            out,
            "{}",
            json!({ "exported_conversations": n, "file": file.display().to_string() })
        )?;
    } else {
        writeln!(out, "exported {n} conversation(s) to {}", file.display())?;
    }
    Ok(())
}

fn title_text(c: &Conversation) -> String {
    match &c.title {
        Ok(t) => t.clone(),
        Err(e) => format!("<unreadable title: {e}>"),
    }
}

fn role(m: &Message) -> &'static str {
    m.role.map_or("?", |r| r.as_str())
}

fn error_text<T>(r: &Result<T, HistoryError>) -> Option<String> {
    r.as_ref().err().map(|e| e.to_string())
}

fn conversation_json(c: &Conversation) -> serde_json::Value {
    json!({
        "id": c.id,
        "title": c.title.as_ref().ok(),
        "created_at_ms": c.created_at_ms,
        "updated_at_ms": c.updated_at_ms,
        "messages": c.messages,
        "error": error_text(&c.title),
    })
}

fn message_json(m: &Message) -> serde_json::Value {
    json!({
        "id": m.id,
        "conversation_id": m.conversation_id,
        "role": m.role.map(|r| r.as_str()),
        "created_at_ms": m.created_at_ms,
        "text": m.text.as_ref().ok(),
        "error": error_text(&m.text),
    })
}

/// Up to 40 characters either side of the first match, on one line.
fn snippet(text: &str, needle: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let lower = flat.to_lowercase();
    let chars: Vec<char> = flat.chars().collect();
    // Character position of the match (lower-casing can change byte lengths, so count chars).
    let at = lower
        .find(&needle.to_lowercase())
        .map_or(0, |b| lower[..b].chars().count());
    let start = at.saturating_sub(40);
    let end = (at + needle.chars().count() + 40).min(chars.len());
    let mut s: String = chars[start.min(end)..end].iter().collect();
    if start > 0 {
        s.insert(0, '…');
    }
    if end < chars.len() {
        s.push('…');
    }
    s
}

/// What `history evals` lists of a stored report: its id, time, model and suites, or why it
/// cannot be read.
fn eval_run_json(r: &history::store::EvalRun) -> serde_json::Value {
    let parsed = r
        .report
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).map_err(|e| e.to_string()));
    match parsed {
        Ok(v) => json!({
            "id": r.id,
            "created_at_ms": r.created_at_ms,
            "model": v["meta"]["model"],
            "quantization": v["meta"]["quantization"],
            "suites": v["meta"]["suites"],
        }),
        Err(e) => json!({ "id": r.id, "created_at_ms": r.created_at_ms, "error": e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_center_the_match() {
        assert_eq!(snippet("abc Needle def", "needle"), "abc Needle def");
        let long = format!("{}NEEDLE{}", "a".repeat(100), "b".repeat(100));
        let s = snippet(&long, "needle");
        assert!(s.starts_with('…') && s.ends_with('…') && s.contains("NEEDLE"));
        assert_eq!(s.chars().count(), 40 + 6 + 40 + 2);
    }
}
