//! What the assistant says about its own state in words a person reads: the context memory
//! (cache type) choices as Settings names them, and why a saved context was read again.

use kostant_engine::{KvType, Session, SnapshotHeader};

/// The chip's word for a cache type and what it does to the replies.
pub fn kv_words(kv_type: KvType) -> (&'static str, &'static str) {
    match kv_type {
        KvType::F16 => ("Exact", "replies as the model gives them"),
        // "Slower": the guard then reads on its own session (`Guard::rides_on`), which costs
        // the default model's decode about a sixth (docs/eval-kv-types.md).
        KvType::Q8_0 => (
            "Compact",
            "about half the memory; replies barely change and may come a little slower",
        ),
        KvType::Q4_0 => (
            "Smallest",
            "about a quarter of the memory; replies change noticeably and may come a little slower",
        ),
    }
}

/// What the chat says when a saved context was not restored and the conversation was read
/// again: a Context memory choice changed since it was saved is said in Settings' words (the
/// engine's reason names cache types); anything else with its reason.
pub fn not_restored_notice(
    saved_header: &[u8],
    session: &Session,
    error: &impl std::fmt::Display,
) -> String {
    let now = session.snapshot_header();
    // The saved header with today's cache type: if that one fits, the type is all that differs.
    let saved_type = SnapshotHeader::from_bytes(saved_header)
        .ok()
        .filter(|h| h.kv_type != now.kv_type)
        .filter(|h| {
            let retyped = SnapshotHeader {
                kv_type: now.kv_type,
                ..h.clone()
            };
            retyped.mismatch(&now).is_none()
        })
        .map(|h| h.kv_type);
    match saved_type {
        Some(saved) => format!(
            "This conversation was kept with the {} context memory and Settings now use {}, so it was read again.",
            kv_words(saved).0,
            kv_words(now.kv_type).0
        ),
        _ => format!(
            "This conversation's saved context could not be used ({error}), so it was read again."
        ),
    }
}
