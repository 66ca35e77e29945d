//! `history export`: the whole history as one passphrase-encrypted, self-describing JSON file.
//!
//! The key is PBKDF2-HMAC-SHA256 of the passphrase (600,000 iterations, OWASP's 2023 figure,
//! random 128-bit salt); the body is ChaCha20-Poly1305 over a JSON document of every
//! conversation. The header fields are the associated data, so changing the iteration count,
//! salt or cipher name makes the file fail to open rather than quietly weakening it.

use std::io::Write;
use std::num::NonZeroU32;
use std::path::Path;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::json;

use super::store::Store;
use super::HistoryError;

pub const FORMAT: &str = "kostant-history-export";
pub const ITERATIONS: u32 = 600_000;
const SALT_LEN: usize = 16;
/// Shortest passphrase accepted: PBKDF2 slows guessing, it cannot save a three-letter word.
pub const MIN_PASSPHRASE_CHARS: usize = 8;

/// The associated data: every header field that decides how the body is opened.
fn header_aad(iterations: u32, salt_hex: &str, nonce_hex: &str) -> String {
    format!("{FORMAT}\0v1\0pbkdf2-hmac-sha256\0{iterations}\0{salt_hex}\0chacha20-poly1305\0{nonce_hex}")
}

fn derive(passphrase: &str, salt: &[u8], iterations: u32) -> Result<LessSafeKey, HistoryError> {
    let iters = NonZeroU32::new(iterations)
        .ok_or_else(|| HistoryError::Export("iteration count is zero".into()))?;
    let mut key = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iters,
        salt,
        passphrase.as_bytes(),
        &mut key,
    );
    let unbound = UnboundKey::new(&CHACHA20_POLY1305, &key).expect("32-byte key");
    key.fill(0);
    Ok(LessSafeKey::new(unbound))
}

/// The plaintext document: every conversation with its messages.
fn document(store: &Store) -> Result<serde_json::Value, HistoryError> {
    let conversations: Vec<_> = store
        .everything()?
        .into_iter()
        .map(|(c, msgs)| {
            json!({
                "id": c.id,
                "created_at_ms": c.created_at_ms,
                "updated_at_ms": c.updated_at_ms,
                "title": c.title.ok(),
                "messages": msgs.into_iter().map(|m| json!({
                    "id": m.id,
                    "role": m.role.map(|r| r.as_str()),
                    "created_at_ms": m.created_at_ms,
                    "text": m.text.ok(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({ "conversations": conversations }))
}

/// Writes the encrypted export to `out` (owner-only, replacing nothing: the file must not
/// exist). Returns how many conversations it holds.
pub fn export(store: &Store, passphrase: &str, out: &Path) -> Result<usize, HistoryError> {
    if passphrase.chars().count() < MIN_PASSPHRASE_CHARS {
        return Err(HistoryError::Export(format!(
            "the passphrase must have at least {MIN_PASSPHRASE_CHARS} characters"
        )));
    }
    let doc = document(store)?;
    let n = doc["conversations"].as_array().map_or(0, |a| a.len());
    let rng = SystemRandom::new();
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut salt).map_err(|_| HistoryError::Random)?;
    rng.fill(&mut nonce).map_err(|_| HistoryError::Random)?;
    let (salt_hex, nonce_hex) = (hex(&salt), hex(&nonce));
    let mut body = serde_json::to_vec(&doc).expect("JSON values serialize");
    let aad = header_aad(ITERATIONS, &salt_hex, &nonce_hex);
    derive(passphrase, &salt, ITERATIONS)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut body,
        )
        .map_err(|_| HistoryError::Random)?;
    let file = json!({
        "format": FORMAT,
        "version": 1,
        "kdf": {"name": "pbkdf2-hmac-sha256", "iterations": ITERATIONS, "salt": salt_hex},
        "cipher": "chacha20-poly1305",
        "nonce": nonce_hex,
        "ciphertext": hex(&body),
    });
    let io = |source| HistoryError::Io {
        path: out.to_path_buf(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(out).map_err(io)?;
    writeln!(f, "{file}")
        .and_then(|_| f.sync_all())
        .map_err(io)?;
    Ok(n)
}

/// Opens an export (the reader that a future `history import` will use).
#[cfg(test)]
pub fn open(bytes: &[u8], passphrase: &str) -> Result<serde_json::Value, HistoryError> {
    let bad = |what: &str| HistoryError::Export(format!("not a Kostant export: {what}"));
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| bad("not JSON"))?;
    if v["format"] != FORMAT || v["version"] != 1 || v["cipher"] != "chacha20-poly1305" {
        return Err(bad("unknown format, version or cipher"));
    }
    let iterations = v["kdf"]["iterations"]
        .as_u64()
        .and_then(|i| u32::try_from(i).ok())
        .filter(|i| (ITERATIONS..=10_000_000).contains(i))
        .ok_or_else(|| bad("iteration count out of range"))?;
    let field = |k: &str| v[k].as_str().or(v["kdf"][k].as_str()).unwrap_or("");
    let (salt_hex, nonce_hex) = (field("salt"), field("nonce"));
    let salt = unhex(salt_hex).ok_or_else(|| bad("salt"))?;
    let nonce = unhex(nonce_hex).ok_or_else(|| bad("nonce"))?;
    let mut body = unhex(field("ciphertext")).ok_or_else(|| bad("ciphertext"))?;
    let nonce = Nonce::try_assume_unique_for_key(&nonce).map_err(|_| bad("nonce length"))?;
    let aad = header_aad(iterations, salt_hex, nonce_hex);
    let plain = derive(passphrase, &salt, iterations)?
        .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut body)
        .map_err(|_| HistoryError::Export("wrong passphrase, or the file was altered".into()))?;
    serde_json::from_slice(plain).map_err(|_| bad("body is not JSON"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
fn unhex(s: &str) -> Option<Vec<u8>> {
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).ok().filter(|p| p.len() == 2)?;
            u8::from_str_radix(pair, 16).ok()
        })
        .collect()
}
