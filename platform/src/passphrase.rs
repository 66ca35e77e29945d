//! The passphrase lock: a wrapped data key sealed once more under a key derived from a
//! passphrase with Argon2id, so that the key file alone (which sits in the user's config
//! directory, readable by anyone who can read their files) no longer opens the data.
//!
//! A lock is a layer, not a replacement: the data key stays wrapped by the [`KeyStore`] (the
//! file key on the desktop), and that wrapping is sealed under the passphrase. Opening needs
//! both; replacing the key store's KEK (delete-all) still crypto-erases a locked history, and
//! changing the passphrase rewraps a few dozen bytes, never the rows.
//!
//! A lock's bytes: `MAGIC || m_kib || t || p` (u32 little-endian each) `|| salt (16) || nonce
//! (12) || ciphertext || tag`, the header bound into the AEAD's associated data. The Argon2id
//! parameters travel with the lock, so a lock made on another machine (or with other
//! constants) still opens; they are capped, as the file is read as hostile input.

use std::path::Path;
use std::sync::Mutex;

use argon2::{Algorithm, Argon2, Params, Version};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use crate::keystore::{DataKey, KeyStore, KEY_LEN};
use crate::PlatformError;

/// The first bytes of a lock; a wrapped key without them is not locked.
const MAGIC: &[u8; 8] = b"KSTLOCK1";
const SALT_LEN: usize = 16;
const HEADER_LEN: usize = MAGIC.len() + 12 + SALT_LEN;
/// Caps on the parameters read from a lock: 4 GiB of memory, 64 passes, 16 lanes.
const MAX_M_KIB: u32 = 4 << 20;
const MAX_T: u32 = 64;
const MAX_P: u32 = 16;

/// Argon2id's costs: memory in KiB, passes, lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockParams {
    pub m_kib: u32,
    pub t: u32,
    pub p: u32,
}

impl LockParams {
    /// The parameters new locks use: 192 MiB, 3 passes, 1 lane, measured once to take about
    /// half a second of CPU on the development machine (docs/cli.md's History section has the
    /// figures; `examples/lock_cost.rs` measures). Fixed constants rather than a calibration
    /// at lock time, so that a lock made at a busy moment is not made weaker; the costs are
    /// stored with each lock.
    pub const DEFAULT: LockParams = LockParams {
        m_kib: 192 * 1024,
        t: 3,
        p: 1,
    };

    fn argon2(&self) -> Result<Argon2<'static>, PlatformError> {
        if self.m_kib > MAX_M_KIB || self.t > MAX_T || self.p > MAX_P {
            return Err(PlatformError::LockDamaged(format!(
                "its costs ({self:?}) are past the caps"
            )));
        }
        let params = Params::new(self.m_kib, self.t, self.p, Some(KEY_LEN))
            .map_err(|e| PlatformError::LockDamaged(format!("its costs: {e}")))?;
        Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
    }
}

/// A passphrase in memory; overwritten when dropped (best effort, as [`DataKey`]).
pub struct Passphrase(Vec<u8>);

impl Drop for Passphrase {
    fn drop(&mut self) {
        self.0.fill(0);
    }
}

impl std::fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Passphrase(..)")
    }
}

impl Passphrase {
    /// A passphrase as typed (the app's dialog); an empty one is refused.
    pub fn new(text: &str) -> Result<Passphrase, PlatformError> {
        if text.is_empty() {
            return Err(PlatformError::EmptyPassphrase);
        }
        Ok(Passphrase(text.as_bytes().to_vec()))
    }

    /// The first line of `path` (one trailing newline is not part of it, so `echo pass >
    /// file` works); an empty one is refused.
    pub fn from_file(path: &Path) -> Result<Passphrase, PlatformError> {
        let mut bytes = std::fs::read(path).map_err(|source| PlatformError::PassphraseFile {
            path: path.to_path_buf(),
            source,
        })?;
        if bytes.ends_with(b"\n") {
            bytes.pop();
            if bytes.ends_with(b"\r") {
                bytes.pop();
            }
        }
        let p = Passphrase(bytes);
        match p.0.is_empty() {
            true => Err(PlatformError::EmptyPassphrase),
            false => Ok(p),
        }
    }
}

/// Whether `wrapped` is a lock (else a key store's plain wrapping).
pub fn is_locked(wrapped: &[u8]) -> bool {
    wrapped.starts_with(MAGIC)
}

/// The key Argon2id derives from `pass` with `params` and `salt`.
fn derive(pass: &Passphrase, params: LockParams, salt: &[u8]) -> Result<DataKey, PlatformError> {
    let mut k = DataKey([0; KEY_LEN]);
    params
        .argon2()?
        .hash_password_into(&pass.0, salt, &mut k.0)
        .map_err(|e| PlatformError::LockDamaged(format!("key derivation: {e}")))?;
    Ok(k)
}

/// A derived key with the header (costs and salt) it was derived for: reused to seal again
/// without another half-second derivation.
struct Derived {
    header: Vec<u8>,
    key: DataKey,
}

fn header(params: LockParams, salt: &[u8]) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    for v in [params.m_kib, params.t, params.p] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(salt);
    h
}

fn aead(k: &DataKey) -> LessSafeKey {
    // The key length is a constant equal to CHACHA20_POLY1305's, so this cannot fail.
    LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &k.0).expect("32-byte key"))
}

/// Associated data: the caller's context, then the header (so costs and salt cannot be
/// swapped without the tag failing).
fn aad(context: &[u8], header: &[u8]) -> Vec<u8> {
    [context, b"\0", header].concat()
}

fn seal(d: &Derived, inner: &[u8], context: &[u8]) -> Result<Vec<u8>, PlatformError> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| PlatformError::Random)?;
    let mut buf = inner.to_vec();
    aead(&d.key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(context, &d.header)),
            &mut buf,
        )
        .map_err(|_| PlatformError::Random)?;
    Ok([d.header.as_slice(), &nonce, &buf].concat())
}

/// The costs and salt of a lock, checked.
fn parse_header(wrapped: &[u8]) -> Result<(LockParams, &[u8]), PlatformError> {
    if !is_locked(wrapped) || wrapped.len() < HEADER_LEN + NONCE_LEN + CHACHA20_POLY1305.tag_len() {
        return Err(PlatformError::LockDamaged("it is too short".into()));
    }
    let word = |i: usize| {
        let at = MAGIC.len() + 4 * i;
        u32::from_le_bytes(wrapped[at..at + 4].try_into().expect("4 bytes"))
    };
    let params = LockParams {
        m_kib: word(0),
        t: word(1),
        p: word(2),
    };
    Ok((params, &wrapped[MAGIC.len() + 12..HEADER_LEN]))
}

/// Opens a lock with an already derived key; `WrongPassphrase` when the tag fails.
fn open(d: &Derived, wrapped: &[u8], context: &[u8]) -> Result<Vec<u8>, PlatformError> {
    let rest = &wrapped[HEADER_LEN..];
    let (nonce, ct) = rest.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| PlatformError::KeyUnwrap)?;
    let mut buf = ct.to_vec();
    let plain = aead(&d.key)
        .open_in_place(nonce, Aad::from(aad(context, &d.header)), &mut buf)
        .map_err(|_| PlatformError::WrongPassphrase)?;
    Ok(plain.to_vec())
}

/// Seals `inner` (a key store's wrapping) under `pass` with `params` and a fresh salt.
pub fn lock(
    inner: &[u8],
    pass: &Passphrase,
    params: LockParams,
    context: &[u8],
) -> Result<Vec<u8>, PlatformError> {
    let mut salt = [0u8; SALT_LEN];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| PlatformError::Random)?;
    let d = Derived {
        header: header(params, &salt),
        key: derive(pass, params, &salt)?,
    };
    seal(&d, inner, context)
}

/// Opens a lock with `pass`, returning the key store's wrapping it sealed.
pub fn unlock(wrapped: &[u8], pass: &Passphrase, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
    let (params, salt) = parse_header(wrapped)?;
    let d = Derived {
        header: wrapped[..HEADER_LEN].to_vec(),
        key: derive(pass, params, salt)?,
    };
    open(&d, wrapped, context)
}

/// A key store with the lock on top: what `inner` wraps is sealed under the passphrase when
/// the stored wrapping is locked, and passed through when it is not. Without a passphrase a
/// locked wrapping is [`PlatformError::Locked`]; with a wrong one, `WrongPassphrase`.
pub struct LockedKeyStore<K> {
    inner: K,
    passphrase: Option<Passphrase>,
    /// Set once a locked wrapping opened: new wrappings (a rotation) are locked the same way.
    derived: Mutex<Option<Derived>>,
}

impl<K: KeyStore> LockedKeyStore<K> {
    pub fn new(inner: K, passphrase: Option<Passphrase>) -> Self {
        LockedKeyStore {
            inner,
            passphrase,
            derived: Mutex::new(None),
        }
    }

    /// The key store's wrapping inside `wrapped` (itself when not locked).
    fn open_layer(&self, wrapped: &[u8], context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        if !is_locked(wrapped) {
            return Ok(wrapped.to_vec());
        }
        let pass = self.passphrase.as_ref().ok_or(PlatformError::Locked)?;
        let (params, salt) = parse_header(wrapped)?;
        let mut cached = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if cached.as_ref().map(|d| d.header.as_slice()) != Some(&wrapped[..HEADER_LEN]) {
            *cached = Some(Derived {
                header: wrapped[..HEADER_LEN].to_vec(),
                key: derive(pass, params, salt)?,
            });
        }
        open(cached.as_ref().expect("set above"), wrapped, context)
    }

    /// `inner` sealed as the last opened lock was, or as is when none was.
    fn close_layer(&self, inner: Vec<u8>, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        match &*self.derived.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(d) => seal(d, &inner, context),
            None => Ok(inner),
        }
    }
}

impl<K: KeyStore> KeyStore for LockedKeyStore<K> {
    fn wrap(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        let inner = self.inner.wrap(key, context)?;
        self.close_layer(inner, context)
    }

    fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<DataKey, PlatformError> {
        self.inner
            .unwrap(&self.open_layer(wrapped, context)?, context)
    }

    fn begin_rotation(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        let inner = self.inner.begin_rotation(key, context)?;
        self.close_layer(inner, context)
    }

    fn finish_rotation(&self, wrapped: &[u8], context: &[u8]) -> Result<(), PlatformError> {
        self.inner
            .finish_rotation(&self.open_layer(wrapped, context)?, context)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keystore::{random_key, FileKeyStore};

    /// Cheap costs: the tests check the format, not the cost.
    const FAST: LockParams = LockParams {
        m_kib: 64,
        t: 1,
        p: 1,
    };

    fn pass(s: &str) -> Passphrase {
        Passphrase::new(s).unwrap()
    }

    #[test]
    fn a_lock_opens_with_its_passphrase_only() {
        let inner = b"a key store's wrapping".to_vec();
        let l = lock(&inner, &pass("right"), FAST, b"ctx").unwrap();
        assert!(is_locked(&l) && !is_locked(&inner));
        assert_eq!(unlock(&l, &pass("right"), b"ctx").unwrap(), inner);
        assert!(matches!(
            unlock(&l, &pass("wrong"), b"ctx"),
            Err(PlatformError::WrongPassphrase)
        ));
        assert!(matches!(
            unlock(&l, &pass("right"), b"other"),
            Err(PlatformError::WrongPassphrase)
        ));
        // Costs are bound to the tag: lowering them is noticed.
        let mut cheaper = l.clone();
        cheaper[MAGIC.len() + 4] = 0;
        assert!(unlock(&cheaper, &pass("right"), b"ctx").is_err());
        // Hostile costs are refused before any work.
        let mut huge = l.clone();
        huge[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            unlock(&huge, &pass("right"), b"ctx"),
            Err(PlatformError::LockDamaged(_))
        ));
        assert!(unlock(&l[..20], &pass("right"), b"ctx").is_err());
    }

    #[test]
    fn a_passphrase_file_loses_one_trailing_newline_and_must_not_be_empty() {
        let dir = std::env::temp_dir().join(format!("kostant-pass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p");
        std::fs::write(&f, "correct horse\r\n").unwrap();
        assert_eq!(Passphrase::from_file(&f).unwrap().0, b"correct horse");
        std::fs::write(&f, "\n").unwrap();
        assert!(matches!(
            Passphrase::from_file(&f),
            Err(PlatformError::EmptyPassphrase)
        ));
        assert!(matches!(
            Passphrase::from_file(&dir.join("none")),
            Err(PlatformError::PassphraseFile { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_locked_store_needs_both_the_key_file_and_the_passphrase() {
        let dir = std::env::temp_dir().join(format!("kostant-locked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = random_key().unwrap();
        let inner = FileKeyStore::new(&dir).wrap(&key, b"c").unwrap();
        let locked = lock(&inner, &pass("pw"), FAST, b"c").unwrap();
        let none = LockedKeyStore::new(FileKeyStore::new(&dir), None);
        assert!(matches!(
            none.unwrap(&locked, b"c"),
            Err(PlatformError::Locked)
        ));
        // Unlocked wrappings pass through.
        assert_eq!(none.unwrap(&inner, b"c").unwrap().0, key.0);
        let ks = LockedKeyStore::new(FileKeyStore::new(&dir), Some(pass("pw")));
        assert_eq!(ks.unwrap(&locked, b"c").unwrap().0, key.0);
        // A rotation's wrapping is locked as the store's was, and finishing it works.
        let k2 = random_key().unwrap();
        let w2 = ks.begin_rotation(&k2, b"c").unwrap();
        assert!(is_locked(&w2));
        ks.finish_rotation(&w2, b"c").unwrap();
        assert_eq!(ks.unwrap(&w2, b"c").unwrap().0, k2.0);
        // The old lock's inner wrapping died with the old KEK, passphrase or not.
        assert!(ks.unwrap(&locked, b"c").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
