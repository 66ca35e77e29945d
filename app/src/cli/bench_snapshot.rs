//! `kostant bench --snapshot`: what a saved context buys. At each depth, the time to read a
//! conversation of that many tokens again (a prefill) against the time to restore its saved
//! context (open the sealed piece, as the history stores it, and copy its rows into a session),
//! the snapshot's bytes per token, and the time a reply adds: sealing and writing the piece of
//! its new rows into a real history database.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use rand::{Rng, SeedableRng};
use serde_json::json;

use kostant_engine::{Batch, KvType, Model, Outputs, Session};

use crate::history::crypto::{Cipher, Slot};

/// Depths measured, in tokens (those that fit the context).
pub const DEPTHS: [usize; 3] = [512, 2000, 4000];
/// New tokens of a typical exchange (a short message and its reply) for the after-reply cost.
const REPLY_POSITIONS: usize = 128;

fn best_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

pub fn measure(
    model: &Arc<Model>,
    n_ctx: usize,
    kv_type: KvType,
    reps: usize,
) -> Result<serde_json::Value> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(99);
    let n_vocab = model.hparams.n_vocab as u32;
    let cipher = Cipher::new(&kostant_platform::keystore::random_key()?);
    let slot = Slot::SnapshotPiece {
        conversation: 1,
        seq: 0,
        header: [0; 32],
    };
    let mut rows = Vec::new();
    let mut out = Outputs::new();
    for depth in DEPTHS {
        if depth + 1 > n_ctx.min(model.hparams.n_ctx_train) {
            continue;
        }
        let tokens: Vec<u32> = (0..depth).map(|_| rng.gen_range(0..n_vocab)).collect();
        let mut session = Session::with_kv_type(model.clone(), depth + 1, kv_type)?;
        // A re-read ends with the last token's logits: the reply starts from them.
        let prefill_ms = best_ms(reps, || {
            session.reset();
            session.decode(&Batch::prompt(&tokens), &mut out)?;
            Ok(())
        })?;
        let header = session.snapshot_header().to_bytes();
        let piece = session.snapshot_piece(0).unwrap_or_default();
        let sealed = cipher.seal_bytes(slot, &piece)?;
        let mut restored = Session::with_kv_type(model.clone(), depth + 1, kv_type)?;
        let restore_ms = best_ms(reps, || {
            let piece = cipher.open_bytes(slot, &sealed)?;
            restored.restore(&header, &[&piece])?;
            Ok(())
        })?;
        anyhow::ensure!(restored.tokens() == session.tokens(), "restore lost tokens");
        rows.push(json!({
            "depth": depth,
            "prefill_ms": prefill_ms,
            "restore_ms": restore_ms,
            "speedup": prefill_ms / restore_ms,
            "snapshot_bytes": sealed.len(),
            "bytes_per_token": piece.len() as f64 / depth as f64,
        }));
    }
    let after_reply = after_reply_ms(model, kv_type, reps)?;
    Ok(json!({
        "kv_type": kv_type.name(),
        "depths": rows,
        "after_reply": after_reply,
    }))
}

/// Sealing and writing the piece of one exchange's new rows into a real history database, as
/// `ContextKeeper::save` does after a reply (SQLite with `synchronous = FULL`).
fn after_reply_ms(model: &Arc<Model>, kv_type: KvType, reps: usize) -> Result<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("kostant-bench-snapshot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let keys = kostant_platform::keystore::FileKeyStore::new(dir.join("keys"));
    let mut store = crate::history::Store::open(&dir.join("data").join("h.sqlite3"), keys)?;
    let conversation = store.append_exchange(None, "bench", "bench")?;
    let mut session = Session::with_kv_type(model.clone(), REPLY_POSITIONS + 1, kv_type)?;
    let tokens: Vec<u32> = (0..REPLY_POSITIONS as u32).collect();
    session.decode(&Batch::hidden(&tokens, &[]), &mut Outputs::new())?;
    let header = session.snapshot_header().to_bytes();
    let mut bytes = 0;
    let ms = best_ms(reps, || {
        let piece = session.snapshot_piece(0).unwrap_or_default();
        bytes = piece.len();
        store.save_context(conversation, &header, "[]", Some(&piece), false)?;
        Ok(())
    })?;
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({"positions": REPLY_POSITIONS, "piece_bytes": bytes, "ms": ms}))
}
