//! Context snapshots: a session's tokens and the filled rows of its kv cache as bytes, so a
//! conversation's context outlives the process (restoring is a copy; re-reading the
//! conversation is a forward pass over every token).
//!
//! A snapshot is a header and one or more pieces. The header says what the rows belong to
//! (the model file's fingerprint, architecture, kv cache type and shape, adapter); a piece
//! holds positions `start..start + count`: their token ids, then every layer's keys and values
//! of those positions ([`super::store::Store::copy_rows`]). A sliding-window layer holds only
//! its last positions, so in a model that has them (pieces marked `KSNAPPC2`; other models'
//! pieces are as in v1, `KSNAPPC1`) each windowed layer's rows start with the position they
//! begin at: from the piece's start, but at least the window the next query sees, so every
//! piece restores its windows by itself (`KvCache::copy_positions`). Pieces are applied in order, each
//! after truncating to its start, so a conversation is saved by appending only the rows added
//! since the last piece, and a turn that rewrote the end of the context appends a piece that
//! starts earlier.
//!
//! Both are read as hostile input, like a GGUF file: every length, count and value is checked
//! before use, and a snapshot made for another model, cache type, shape or adapter is refused
//! with the reason. Sealing (the rows are derived from the user's text) is the history's job.

use super::{KvType, LayerRows};
use crate::{EngineError, Result};

/// The format's name, for associated data and reports.
pub const SNAPSHOT_FORMAT: &str = "kostant-context/v2";

const HEADER_MAGIC: &[u8; 8] = b"KSNAPHD1";
const PIECE_MAGIC: &[u8; 8] = b"KSNAPPC1";
/// A piece of a model with sliding-window layers: each of those layers' rows say where they
/// start.
const PIECE_MAGIC_WINDOWED: &[u8; 8] = b"KSNAPPC2";
/// Longest architecture or adapter name a header may carry, in bytes.
const MAX_NAME: usize = 256;

/// What a snapshot's rows belong to. Rows restore only into a session for which every field
/// but `n_ctx` is equal; `n_ctx` (the context the snapshot was taken in) is informative, as
/// the rows fit any context that holds their tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// [`crate::Model::fingerprint`] of the model file.
    pub fingerprint: [u8; 32],
    pub architecture: String,
    pub kv_type: KvType,
    /// The adapter applied to the model, if any (by its id).
    pub adapter: Option<String>,
    pub n_ctx: usize,
    pub n_layer: usize,
    pub kv_dim: usize,
    pub head_dim: usize,
}

/// A cursor over untrusted bytes: every read checks there is enough left.
struct Bytes<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(bad(format!("the {} ends early", self.what)));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    fn u32(&mut self) -> Result<usize> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn name(&mut self) -> Result<String> {
        let b = self.take(2)?;
        let n = u16::from_le_bytes([b[0], b[1]]) as usize;
        if n > MAX_NAME {
            return Err(bad(format!(
                "a name in the {} is {n} bytes long",
                self.what
            )));
        }
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| bad(format!("a name in the {} is not UTF-8", self.what)))
    }
}

fn bad(msg: String) -> EngineError {
    EngineError::Snapshot(msg)
}

fn put_u32(out: &mut Vec<u8>, x: usize) {
    // Invariant: every count written here is at most a context length, far below 2^32.
    out.extend_from_slice(&u32::try_from(x).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_name(out: &mut Vec<u8>, s: &str) {
    let s = &s.as_bytes()[..s.len().min(MAX_NAME)];
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s);
}

fn kv_type_code(t: KvType) -> u8 {
    match t {
        KvType::F16 => 1,
        KvType::Q8_0 => 2,
        // 3 is an older Q4_0 layout whose blocks were not stored rotated: its rows would
        // restore without error and attend wrongly, so it is refused below.
        KvType::Q4_0 => 4,
    }
}

impl SnapshotHeader {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(96);
        out.extend_from_slice(HEADER_MAGIC);
        out.extend_from_slice(&self.fingerprint);
        out.push(kv_type_code(self.kv_type));
        for x in [self.n_ctx, self.n_layer, self.kv_dim, self.head_dim] {
            put_u32(&mut out, x);
        }
        put_name(&mut out, &self.architecture);
        put_name(&mut out, self.adapter.as_deref().unwrap_or(""));
        out
    }

    /// Reads a header, refusing anything that is not exactly one well-formed header.
    pub fn from_bytes(bytes: &[u8]) -> Result<SnapshotHeader> {
        let mut b = Bytes {
            rest: bytes,
            what: "snapshot header",
        };
        if b.take(HEADER_MAGIC.len())? != HEADER_MAGIC {
            return Err(bad(
                "this is not a Kostant context snapshot (or another version of one)".into(),
            ));
        }
        let fingerprint: [u8; 32] = b.take(32)?.try_into().unwrap_or([0; 32]);
        let kv_type = match b.take(1)?[0] {
            1 => KvType::F16,
            2 => KvType::Q8_0,
            4 => KvType::Q4_0,
            3 => {
                return Err(bad(
                    "its q4_0 cache was saved by an older version, which stored it differently"
                        .into(),
                ))
            }
            other => return Err(bad(format!("unknown kv cache type code {other}"))),
        };
        let (n_ctx, n_layer, kv_dim, head_dim) = (b.u32()?, b.u32()?, b.u32()?, b.u32()?);
        let architecture = b.name()?;
        let adapter = Some(b.name()?).filter(|a| !a.is_empty());
        if !b.rest.is_empty() {
            return Err(bad(format!(
                "{} bytes follow the snapshot header",
                b.rest.len()
            )));
        }
        Ok(SnapshotHeader {
            fingerprint,
            architecture,
            kv_type,
            adapter,
            n_ctx,
            n_layer,
            kv_dim,
            head_dim,
        })
    }

    /// Why rows under this header cannot go into a session whose header is `session`, in
    /// words for a person; None when they can.
    pub fn mismatch(&self, session: &SnapshotHeader) -> Option<String> {
        if self.fingerprint != session.fingerprint || self.architecture != session.architecture {
            return Some(format!(
                "it was saved with another model file ({} model), not the {} model loaded now",
                self.architecture, session.architecture
            ));
        }
        if (self.n_layer, self.kv_dim, self.head_dim)
            != (session.n_layer, session.kv_dim, session.head_dim)
        {
            return Some("its cache shape differs from this model's".into());
        }
        if self.kv_type != session.kv_type {
            return Some(format!(
                "it was saved with the {} kv cache and this session uses {}",
                self.kv_type, session.kv_type
            ));
        }
        if self.adapter != session.adapter {
            let name = |a: &Option<String>| a.clone().unwrap_or_else(|| "no adapter".into());
            return Some(format!(
                "it was saved under {} and this session runs {}",
                name(&self.adapter),
                name(&session.adapter)
            ));
        }
        None
    }

    /// Bytes of one position's keys and values in one layer.
    pub(crate) fn row_bytes(&self) -> usize {
        2 * self.kv_type.bytes_for(self.kv_dim)
    }
}

/// One piece, checked against the header it belongs to.
pub(crate) struct Piece<'a> {
    pub start: usize,
    pub tokens: Vec<u32>,
    /// Each layer's rows, as `copy_rows` lays them out: positions `start..` of a global layer,
    /// `first..` of a windowed one, to the piece's end.
    pub layers: Vec<LayerRows<'a>>,
}

/// Writes a piece: positions `start..` with these tokens and rows (as
/// `KvCache::copy_positions` writes them; `windowed` when the model has windowed layers).
pub(crate) fn piece_bytes(start: usize, tokens: &[u32], rows: &[u8], windowed: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 4 * tokens.len() + rows.len());
    out.extend_from_slice(if windowed {
        PIECE_MAGIC_WINDOWED
    } else {
        PIECE_MAGIC
    });
    put_u32(&mut out, start);
    put_u32(&mut out, tokens.len());
    for t in tokens {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out.extend_from_slice(rows);
    out
}

/// Reads a piece made under `header`, for a context of `n_ctx` tokens, a vocabulary of
/// `n_vocab` and layers windowed as `windows` says: its counts must add up to exactly its
/// length, its positions fit the context, its token ids the vocabulary, and a windowed layer's
/// rows start within the piece's positions.
pub(crate) fn read_piece<'a>(
    bytes: &'a [u8],
    header: &SnapshotHeader,
    n_ctx: usize,
    n_vocab: usize,
    windows: &[Option<usize>],
) -> Result<Piece<'a>> {
    let mut b = Bytes {
        rest: bytes,
        what: "snapshot piece",
    };
    let windowed = windows.iter().any(Option::is_some);
    let magic = b.take(PIECE_MAGIC.len())?;
    match (windowed, magic) {
        (true, m) if m == PIECE_MAGIC_WINDOWED => {}
        (false, m) if m == PIECE_MAGIC => {}
        (true, m) if m == PIECE_MAGIC => {
            return Err(bad(
                "it was saved by an earlier version that kept sliding-window layers whole".into(),
            ))
        }
        _ => return Err(bad("a piece of the snapshot is not one".into())),
    }
    let (start, count) = (b.u32()?, b.u32()?);
    if count == 0 {
        return Err(bad("a piece of the snapshot holds no positions".into()));
    }
    if start.saturating_add(count) > n_ctx {
        return Err(bad(format!(
            "the snapshot holds {} tokens and this session's context holds {n_ctx}",
            start.saturating_add(count)
        )));
    }
    let ids = b.take(count * 4)?;
    let tokens: Vec<u32> = ids
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(t) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(bad(format!(
            "token id {t} is outside the vocabulary of {n_vocab}"
        )));
    }
    if windows.len() != header.n_layer {
        return Err(bad("its cache shape differs from this model's".into()));
    }
    let end = start + count;
    let row_bytes = header.row_bytes();
    let mut layers = Vec::with_capacity(windows.len());
    for (l, w) in windows.iter().enumerate() {
        let first = match w {
            None => start,
            Some(_) => {
                let first = b.u32()?;
                if first > end {
                    return Err(bad(format!(
                        "layer {l}'s rows start at position {first}, past the piece's end {end}"
                    )));
                }
                first
            }
        };
        // At most a context of rows (checked above), so the product does not overflow.
        let bytes = b.take((end - first) * row_bytes)?;
        layers.push(LayerRows { first, bytes });
    }
    if !b.rest.is_empty() {
        return Err(bad(format!(
            "a piece of {count} positions carries {} bytes of keys and values too many",
            b.rest.len()
        )));
    }
    Ok(Piece {
        start,
        tokens,
        layers,
    })
}
