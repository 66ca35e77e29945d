//! Key storage: a key-encryption key (KEK) that wraps and unwraps the data keys of the app's
//! encrypted stores (today the chat history).
//!
//! The trait is shaped after the platform keystores, where the KEK never leaves the secure
//! hardware and the app only asks it to wrap or unwrap: Android Keystore (an AES-GCM key with
//! `setUserAuthenticationRequired` as policy allows) and the iOS Keychain / Secure Enclave come
//! later behind this same trait. Today there is [`FileKeyStore`] for desktop Linux: 32 random
//! bytes in a 0600 file under the user's config directory, never next to the data it protects
//! (the caller checks that; a stolen copy of the data directory alone must not open).

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use crate::PlatformError;

/// Length in bytes of the keys this module wraps and of the file-backed KEK (256 bits).
pub const KEY_LEN: usize = 32;

/// A data key in memory; overwritten when dropped (best effort: no `unsafe` volatile writes).
pub struct DataKey(pub [u8; KEY_LEN]);

impl Drop for DataKey {
    fn drop(&mut self) {
        self.0 = [0; KEY_LEN];
    }
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

/// Wraps and unwraps data keys under a key-encryption key that the store keeps to itself.
pub trait KeyStore {
    /// Encrypts `key` so that only this store (with the same `context`) can open it again.
    fn wrap(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError>;
    /// Opens what [`KeyStore::wrap`] produced with the same `context`.
    fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<DataKey, PlatformError>;
    /// Where the key lives, for error messages ("key file /home/a/.config/kostant/history.key").
    fn describe(&self) -> String;
}

/// Fills a fresh random data key from the system generator.
pub fn random_key() -> Result<DataKey, PlatformError> {
    let mut k = DataKey([0; KEY_LEN]);
    SystemRandom::new()
        .fill(&mut k.0)
        .map_err(|_| PlatformError::Random)?;
    Ok(k)
}

/// The desktop key store: a KEK in `<dir>/history.key`, created on the first `wrap`.
/// `unwrap` never creates it, so pointing at the wrong directory fails instead of silently
/// making a new key.
#[derive(Debug, Clone)]
pub struct FileKeyStore {
    dir: PathBuf,
}

const KEY_FILE: &str = "history.key";

impl FileKeyStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileKeyStore { dir: dir.into() }
    }

    /// `KOSTANT_KEY_DIR`, else `$XDG_CONFIG_HOME/kostant`, else `~/.config/kostant`.
    pub fn default_dir() -> Result<PathBuf, PlatformError> {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(d) = env("KOSTANT_KEY_DIR") {
            return Ok(d);
        }
        if let Some(d) = env("XDG_CONFIG_HOME") {
            return Ok(d.join("kostant"));
        }
        env("HOME")
            .map(|h| h.join(".config").join("kostant"))
            .ok_or(PlatformError::NoKeyDir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PlatformError + '_ {
        move |source| PlatformError::KeyIo {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Reads the KEK; `Ok(None)` when the file does not exist.
    fn load(&self) -> Result<Option<DataKey>, PlatformError> {
        let path = self.key_path();
        let mut file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io(&path)(e)),
        };
        let meta = file.metadata().map_err(Self::io(&path))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(PlatformError::KeyPermissions(path));
            }
        }
        if meta.len() != KEY_LEN as u64 {
            return Err(PlatformError::KeyBadLength {
                path,
                len: meta.len(),
            });
        }
        let mut k = DataKey([0; KEY_LEN]);
        file.read_exact(&mut k.0).map_err(Self::io(&path))?;
        Ok(Some(k))
    }

    /// Reads the KEK, creating it first if absent. Creation is atomic: the key is written and
    /// synced to a private temporary file, then hard-linked into place, so a crash never leaves
    /// a short key file and two processes racing agree on one key.
    fn load_or_create(&self) -> Result<DataKey, PlatformError> {
        if let Some(k) = self.load()? {
            return Ok(k);
        }
        create_private_dir(&self.dir).map_err(Self::io(&self.dir))?;
        let key = random_key()?;
        let tmp = self
            .dir
            .join(format!(".{KEY_FILE}.{}.tmp", std::process::id()));
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let _ = fs::remove_file(&tmp);
        let mut f = opts.open(&tmp).map_err(Self::io(&tmp))?;
        f.write_all(&key.0)
            .and_then(|_| f.sync_all())
            .map_err(Self::io(&tmp))?;
        drop(f);
        let path = self.key_path();
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                // Make the new directory entry durable too.
                if let Ok(d) = fs::File::open(&self.dir) {
                    let _ = d.sync_all();
                }
                Ok(key)
            }
            // Another process won the race: use its key.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.load()?.ok_or(PlatformError::KeyMissing(path))
            }
            Err(e) => Err(Self::io(&path)(e)),
        }
    }
}

/// Creates `dir` (and parents) readable by the owner only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

fn aead_key(k: &DataKey) -> LessSafeKey {
    // The key length is a constant equal to CHACHA20_POLY1305's, so this cannot fail.
    LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &k.0).expect("32-byte key"))
}

/// `nonce || ciphertext || tag` of `key` under `kek`.
fn seal_key(kek: &DataKey, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| PlatformError::Random)?;
    let mut buf = key.0.to_vec();
    aead_key(kek)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(context),
            &mut buf,
        )
        .map_err(|_| PlatformError::Random)?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&buf);
    Ok(out)
}

fn open_key(kek: &DataKey, wrapped: &[u8], context: &[u8]) -> Result<DataKey, PlatformError> {
    if wrapped.len() != NONCE_LEN + KEY_LEN + CHACHA20_POLY1305.tag_len() {
        return Err(PlatformError::KeyUnwrap);
    }
    let (nonce, ct) = wrapped.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| PlatformError::KeyUnwrap)?;
    let mut buf = ct.to_vec();
    let plain = aead_key(kek)
        .open_in_place(nonce, Aad::from(context), &mut buf)
        .map_err(|_| PlatformError::KeyUnwrap)?;
    let mut k = DataKey([0; KEY_LEN]);
    k.0.copy_from_slice(plain);
    buf.fill(0);
    Ok(k)
}

impl KeyStore for FileKeyStore {
    fn wrap(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        seal_key(&self.load_or_create()?, key, context)
    }

    fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<DataKey, PlatformError> {
        let kek = self
            .load()?
            .ok_or_else(|| PlatformError::KeyMissing(self.key_path()))?;
        open_key(&kek, wrapped, context)
    }

    fn describe(&self) -> String {
        format!("key file {}", self.key_path().display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kostant-keystore-{name}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn wraps_and_unwraps_with_a_private_key_file() {
        let dir = temp_dir("roundtrip");
        let ks = FileKeyStore::new(dir.join("nested"));
        let key = random_key().unwrap();
        let wrapped = ks.wrap(&key, b"ctx").unwrap();
        assert_eq!(ks.unwrap(&wrapped, b"ctx").unwrap().0, key.0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(ks.key_path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dmode = fs::metadata(ks.dir()).unwrap().permissions().mode();
            assert_eq!(dmode & 0o777, 0o700);
        }
        // The key file is reused, not replaced, on the next wrap.
        let again = ks.wrap(&key, b"ctx").unwrap();
        assert_eq!(ks.unwrap(&again, b"ctx").unwrap().0, key.0);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn wrong_context_tamper_and_other_key_fail() {
        let dir = temp_dir("faults");
        let a = FileKeyStore::new(dir.join("a"));
        let b = FileKeyStore::new(dir.join("b"));
        let key = random_key().unwrap();
        let wrapped = a.wrap(&key, b"ctx").unwrap();
        assert!(matches!(
            a.unwrap(&wrapped, b"other"),
            Err(PlatformError::KeyUnwrap)
        ));
        let mut bad = wrapped.clone();
        bad[20] ^= 1;
        assert!(matches!(
            a.unwrap(&bad, b"ctx"),
            Err(PlatformError::KeyUnwrap)
        ));
        // b has no key yet: unwrap must not create one.
        assert!(matches!(
            b.unwrap(&wrapped, b"ctx"),
            Err(PlatformError::KeyMissing(_))
        ));
        assert!(!b.key_path().exists());
        b.wrap(&random_key().unwrap(), b"ctx").unwrap();
        assert!(matches!(
            b.unwrap(&wrapped, b"ctx"),
            Err(PlatformError::KeyUnwrap)
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn refuses_a_key_file_others_can_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("perms");
        let ks = FileKeyStore::new(&dir);
        let wrapped = ks.wrap(&random_key().unwrap(), b"c").unwrap();
        fs::set_permissions(ks.key_path(), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            ks.unwrap(&wrapped, b"c"),
            Err(PlatformError::KeyPermissions(_))
        ));
        let _ = fs::remove_dir_all(&dir);
    }
}
