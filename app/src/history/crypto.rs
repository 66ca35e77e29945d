//! Row encryption for the history: ChaCha20-Poly1305 under the data key, a fresh random 96-bit
//! nonce per sealed value, and associated data that names where the value lives (table,
//! conversation id, message id, role), so a ciphertext copied to another row does not open.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use kostant_platform::keystore::DataKey;

use super::{HistoryError, Role};

/// First byte of every sealed value: the format (1 = ChaCha20-Poly1305, nonce || ct || tag).
const VERSION: u8 = 1;
/// Bytes a sealed value adds to its plaintext: version, nonce and tag.
pub const OVERHEAD: usize = 1 + NONCE_LEN + 16;

/// Where a sealed value lives; its bytes are the AEAD's associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// `conversations.title` of a conversation.
    Title { conversation: i64 },
    /// `messages.body` of a message.
    Message {
        conversation: i64,
        message: i64,
        role: Role,
    },
    /// `eval_runs.report` of a safety eval run.
    EvalRun { run: i64 },
    /// `snapshots.context` of a conversation: the model's view of it when its context was
    /// saved. `header` is the sha256 of the snapshot's (clear) header, so a header swapped
    /// in the row opens nothing.
    SnapshotContext { conversation: i64, header: [u8; 32] },
    /// `snapshot_pieces.body` number `seq` of a conversation's context snapshot.
    SnapshotPiece {
        conversation: i64,
        seq: i64,
        header: [u8; 32],
    },
    /// `documents.meta` of a document the user added: its name and format.
    DocumentMeta { document: i64 },
    /// `document_chunks.body` number `seq` of a document: the passage's text and place.
    DocumentChunk { document: i64, seq: i64 },
    /// `document_chunks.vector` number `seq` of a document: the passage's embedding.
    DocumentVector { document: i64, seq: i64 },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Slot {
    fn aad(&self) -> String {
        // Every field is an integer or a fixed word, so joining with NUL is unambiguous.
        match self {
            Slot::Title { conversation } => {
                format!("kostant-history/v1\0conversations.title\0{conversation}")
            }
            Slot::Message {
                conversation,
                message,
                role,
            } => format!(
                "kostant-history/v1\0messages.body\0{conversation}\0{message}\0{}",
                role.as_str()
            ),
            Slot::EvalRun { run } => format!("kostant-history/v1\0eval_runs.report\0{run}"),
            Slot::SnapshotContext {
                conversation,
                header,
            } => format!(
                "kostant-history/v1\0snapshots.context\0{conversation}\0{}",
                hex(header)
            ),
            Slot::SnapshotPiece {
                conversation,
                seq,
                header,
            } => format!(
                "kostant-history/v1\0snapshot_pieces.body\0{conversation}\0{seq}\0{}",
                hex(header)
            ),
            Slot::DocumentMeta { document } => {
                format!("kostant-history/v1\0documents.meta\0{document}")
            }
            Slot::DocumentChunk { document, seq } => {
                format!("kostant-history/v1\0document_chunks.body\0{document}\0{seq}")
            }
            Slot::DocumentVector { document, seq } => {
                format!("kostant-history/v1\0document_chunks.vector\0{document}\0{seq}")
            }
        }
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Title { conversation } => write!(f, "title of conversation {conversation}"),
            Slot::Message {
                conversation,
                message,
                ..
            } => write!(f, "message {message} of conversation {conversation}"),
            Slot::EvalRun { run } => write!(f, "report of eval run {run}"),
            Slot::SnapshotContext { conversation, .. } => {
                write!(f, "saved context of conversation {conversation}")
            }
            Slot::SnapshotPiece {
                conversation, seq, ..
            } => write!(
                f,
                "piece {seq} of the saved context of conversation {conversation}"
            ),
            Slot::DocumentMeta { document } => write!(f, "name of document {document}"),
            Slot::DocumentChunk { document, seq } => {
                write!(f, "passage {seq} of document {document}")
            }
            Slot::DocumentVector { document, seq } => {
                write!(f, "embedding of passage {seq} of document {document}")
            }
        }
    }
}

/// The data key, ready to seal and open rows.
pub struct Cipher {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl Cipher {
    pub fn new(key: &DataKey) -> Cipher {
        // The data key is 32 bytes by type, ChaCha20-Poly1305's key length: this cannot fail.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &key.0).expect("32-byte key");
        Cipher {
            key: LessSafeKey::new(unbound),
            rng: SystemRandom::new(),
        }
    }

    /// `version || nonce || ciphertext || tag` of `plain`, bound to `slot`.
    pub fn seal(&self, slot: Slot, plain: &str) -> Result<Vec<u8>, HistoryError> {
        self.seal_bytes(slot, plain.as_bytes())
    }

    /// Opens a value sealed for `slot`; fails if any byte changed or it was sealed elsewhere.
    pub fn open(&self, slot: Slot, sealed: &[u8]) -> Result<String, HistoryError> {
        let plain = self.open_bytes(slot, sealed)?;
        String::from_utf8(plain).map_err(|_| HistoryError::Integrity(slot.to_string()))
    }

    /// [`Cipher::seal`] for bytes that are not text (a context snapshot's rows). Sealed in
    /// the one buffer it returns: a 3B model's snapshot is hundreds of MB, and every fresh
    /// page costs (BENCHMARKS.md, issue 23: restoring at the 3B shape).
    pub fn seal_bytes(&self, slot: Slot, plain: &[u8]) -> Result<Vec<u8>, HistoryError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| HistoryError::Random)?;
        let mut out = Vec::with_capacity(plain.len() + OVERHEAD);
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let aad = slot.aad();
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut out[1 + NONCE_LEN..],
            )
            .map_err(|_| HistoryError::Random)?;
        out.extend_from_slice(tag.as_ref());
        Ok(out)
    }

    /// [`Cipher::open`] for bytes that are not text.
    pub fn open_bytes(&self, slot: Slot, sealed: &[u8]) -> Result<Vec<u8>, HistoryError> {
        self.open_bytes_owned(slot, sealed.to_vec())
    }

    /// [`Cipher::open_bytes`] in the buffer it is given (as read from the database): the
    /// plaintext takes its place, with no second buffer.
    pub fn open_bytes_owned(
        &self,
        slot: Slot,
        mut sealed: Vec<u8>,
    ) -> Result<Vec<u8>, HistoryError> {
        let integrity = || HistoryError::Integrity(slot.to_string());
        if sealed.len() < OVERHEAD || sealed[0] != VERSION {
            return Err(integrity());
        }
        let nonce =
            Nonce::try_assume_unique_for_key(&sealed[1..1 + NONCE_LEN]).map_err(|_| integrity())?;
        let aad = slot.aad();
        let plain_len = self
            .key
            .open_within(
                nonce,
                Aad::from(aad.as_bytes()),
                &mut sealed,
                1 + NONCE_LEN..,
            )
            .map_err(|_| integrity())?
            .len();
        sealed.truncate(plain_len);
        Ok(sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cipher() -> Cipher {
        Cipher::new(&kostant_platform::keystore::random_key().unwrap())
    }

    #[test]
    fn seals_with_fresh_nonces_and_opens_only_in_its_slot() {
        let c = cipher();
        let slot = Slot::Message {
            conversation: 1,
            message: 2,
            role: Role::User,
        };
        let a = c.seal(slot, "hello").unwrap();
        let b = c.seal(slot, "hello").unwrap();
        assert_ne!(a, b, "same text, same slot: nonces must differ");
        assert_eq!(a.len(), "hello".len() + OVERHEAD);
        assert_eq!(c.open(slot, &a).unwrap(), "hello");
        for other in [
            Slot::Message {
                conversation: 2,
                message: 2,
                role: Role::User,
            },
            Slot::Message {
                conversation: 1,
                message: 3,
                role: Role::User,
            },
            Slot::Message {
                conversation: 1,
                message: 2,
                role: Role::Assistant,
            },
            Slot::Title { conversation: 1 },
        ] {
            assert!(matches!(c.open(other, &a), Err(HistoryError::Integrity(_))));
        }
        for i in 0..a.len() {
            let mut t = a.clone();
            t[i] ^= 0x20;
            assert!(c.open(slot, &t).is_err(), "flipped byte {i} went unnoticed");
        }
        assert!(c.open(slot, &a[..a.len() - 1]).is_err());
        assert!(cipher().open(slot, &a).is_err(), "another key opened it");
    }

    #[test]
    fn snapshot_bytes_open_in_place_and_keep_the_stored_layout() {
        let c = cipher();
        let slot = Slot::SnapshotPiece {
            conversation: 3,
            seq: 1,
            header: [7; 32],
        };
        let plain: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let sealed = c.seal_bytes(slot, &plain).unwrap();
        assert_eq!(sealed.len(), plain.len() + OVERHEAD);
        assert_eq!(c.open_bytes_owned(slot, sealed.clone()).unwrap(), plain);
        // The layout written before sealing went in place: version, nonce, ciphertext with
        // the tag appended, sealed by ring in one call. Such rows still open.
        let nonce = [9u8; NONCE_LEN];
        let mut body = plain.clone();
        c.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(slot.aad().as_bytes()),
                &mut body,
            )
            .unwrap();
        let old = [&[VERSION][..], &nonce, &body].concat();
        assert_eq!(c.open_bytes(slot, &old).unwrap(), plain);
        let mut tampered = sealed;
        tampered[OVERHEAD + 500] ^= 1;
        assert!(matches!(
            c.open_bytes_owned(slot, tampered),
            Err(HistoryError::Integrity(_))
        ));
    }
}
