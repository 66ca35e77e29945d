//! Key storage: a key-encryption key (KEK) that wraps and unwraps the data keys of the app's
//! encrypted stores (today the chat history).
//!
//! The trait is shaped after the platform keystores, where the KEK never leaves the secure
//! hardware and the app only asks it to wrap or unwrap: Android Keystore (an AES-GCM key with
//! `setUserAuthenticationRequired` as policy allows) and the iOS Keychain / Secure Enclave come
//! later behind this same trait. Today there is [`FileKeyStore`] for desktop Linux: 32 random
//! bytes in a 0600 file under the user's config directory, never next to the data it protects
//! (the caller checks that; a stolen copy of the data directory alone must not open).
//!
//! Replacing the KEK is how a store is crypto-erased: see [`KeyStore`] for the two steps and
//! `FileKeyStore::promote` for what overwriting a key file can and cannot promise.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use crate::dirs::create_private_dir;
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
///
/// The KEK can be replaced (a crypto-erase: whatever the old one wrapped, wherever a copy of
/// it lies, opens with nothing the store holds) in two steps, so that a crash between storing
/// the new wrapping and destroying the old KEK loses neither: [`KeyStore::begin_rotation`]
/// stages a new KEK beside the current one, the caller stores the wrapping it returns, and
/// [`KeyStore::finish_rotation`] destroys the old KEK. A wrapping that only a staged KEK
/// opens is taken as stored: [`KeyStore::unwrap`] then finishes the rotation itself.
pub trait KeyStore {
    /// Encrypts `key` so that only this store (with the same `context`) can open it again.
    fn wrap(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError>;
    /// Opens what [`KeyStore::wrap`] produced with the same `context` (or what
    /// [`KeyStore::begin_rotation`] produced, finishing that rotation).
    fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<DataKey, PlatformError>;
    /// Stages a new KEK and returns `key` wrapped under it; the current KEK stays in use.
    /// Other KEKs still staged (from a rotation a crash stopped before its wrapping was
    /// stored) are dropped, so the caller must hold its store's write lock and have unwrapped
    /// its stored key first (which finishes a rotation that did store its wrapping).
    fn begin_rotation(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError>;
    /// Destroys the current KEK and puts the staged one that opens `wrapped` in its place.
    /// Call once `wrapped` (from [`KeyStore::begin_rotation`]) is stored durably. Done already
    /// (the current KEK opens `wrapped`) is success.
    fn finish_rotation(&self, wrapped: &[u8], context: &[u8]) -> Result<(), PlatformError>;
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
        Self::load_from(&self.key_path())
    }

    /// Reads a key file (the KEK or a staged one); `Ok(None)` when it does not exist.
    fn load_from(path: &Path) -> Result<Option<DataKey>, PlatformError> {
        let path = path.to_path_buf();
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
        let key = random_key()?;
        let tmp = self.write_temp(&format!(".{KEY_FILE}.{}.tmp", std::process::id()), &key)?;
        let path = self.key_path();
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                self.sync_dir();
                Ok(key)
            }
            // Another process won the race: use its key.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.load()?.ok_or(PlatformError::KeyMissing(path))
            }
            Err(e) => Err(Self::io(&path)(e)),
        }
    }

    /// Writes `key` to a new owner-only file `name` in the key directory (created 0700 if
    /// needed) and syncs it; returns its path.
    fn write_temp(&self, name: &str, key: &DataKey) -> Result<PathBuf, PlatformError> {
        create_private_dir(&self.dir).map_err(Self::io(&self.dir))?;
        let tmp = self.dir.join(name);
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
        Ok(tmp)
    }

    /// Makes the directory's entries (a new, renamed or removed key file) durable.
    fn sync_dir(&self) {
        // Best effort: not every platform can open a directory for syncing.
        if let Ok(d) = fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
    }

    /// The staged KEKs (`history.key.next-<random>`), unreadable ones skipped: a staged file is
    /// whole once it has its name (written aside, then renamed), so a bad one is not ours.
    fn staged(&self) -> Result<Vec<(PathBuf, DataKey)>, PlatformError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::io(&self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(Self::io(&self.dir))?;
            let name = entry.file_name();
            if !name.to_string_lossy().starts_with(STAGED_PREFIX) {
                continue;
            }
            if let Ok(Some(k)) = Self::load_from(&entry.path()) {
                out.push((entry.path(), k));
            }
        }
        Ok(out)
    }

    /// Destroys the current KEK and gives the staged `next` (in file `staged`) its name.
    ///
    /// The old key's bytes are overwritten in place, through a handle opened on the old file,
    /// before the rename drops its name: a rename alone would leave them in a freed block.
    /// What overwriting cannot promise: on a journaling or copy-on-write file system (ext4
    /// with data journaling, btrfs, f2fs, APFS) and on flash storage, whose controller writes
    /// a rewritten block elsewhere (wear-levelling: every SSD, SD card and phone), the old
    /// bytes can survive in a journal, an old extent or a retired flash block until reused.
    /// Only a key that never left secure hardware (Android Keystore, Secure Enclave) is
    /// erased for certain by deleting it.
    fn promote(&self, staged: &Path, next: &DataKey) -> Result<(), PlatformError> {
        let path = self.key_path();
        match fs::OpenOptions::new().read(true).write(true).open(&path) {
            Ok(mut f) => {
                let mut old = Vec::new();
                f.read_to_end(&mut old).map_err(Self::io(&path))?;
                // Another process may have promoted `next` already; it must not be destroyed.
                if old != next.0 {
                    let mut noise = vec![0u8; old.len()];
                    SystemRandom::new()
                        .fill(&mut noise)
                        .map_err(|_| PlatformError::Random)?;
                    f.seek(SeekFrom::Start(0))
                        .and_then(|_| f.write_all(&noise))
                        .and_then(|_| f.sync_all())
                        .map_err(Self::io(&path))?;
                }
                old.fill(0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Self::io(&path)(e)),
        }
        match fs::rename(staged, &path) {
            Ok(()) => {}
            // Renamed by another process finishing the same rotation.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Self::io(staged)(e)),
        }
        self.sync_dir();
        Ok(())
    }

    /// Promotes the staged KEK that opens `wrapped`, returning the data key; `None` when no
    /// staged KEK opens it.
    fn finish_with(
        &self,
        wrapped: &[u8],
        context: &[u8],
    ) -> Result<Option<DataKey>, PlatformError> {
        for (file, next) in self.staged()? {
            if let Ok(k) = open_key(&next, wrapped, context) {
                self.promote(&file, &next)?;
                return Ok(Some(k));
            }
        }
        Ok(None)
    }
}

impl FileKeyStore {
    /// Destroys every key this store holds (the KEK, staged ones, a creation's leftover
    /// temporary file): each overwritten with random bytes in place and synced, then removed.
    /// Whatever they wrapped then opens with nothing (a crypto-erase; `promote` says what
    /// overwriting cannot promise on flash storage). Returns how many key files went.
    pub fn destroy(&self) -> Result<usize, PlatformError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(Self::io(&self.dir)(e)),
        };
        let mut n = 0;
        for entry in entries {
            let path = entry.map_err(Self::io(&self.dir))?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let ours = name == KEY_FILE
                || name.starts_with(STAGED_PREFIX)
                || (name.starts_with(&format!(".{KEY_FILE}.")) && name.ends_with(".tmp"));
            if ours && path.is_file() {
                overwrite(&path)?;
                fs::remove_file(&path).map_err(Self::io(&path))?;
                n += 1;
            }
        }
        self.sync_dir();
        Ok(n)
    }
}

/// Overwrites the file at `path` with random bytes of its length, through a handle on the
/// file itself, and syncs it.
fn overwrite(path: &Path) -> Result<(), PlatformError> {
    let io = FileKeyStore::io(path);
    let mut f = fs::OpenOptions::new().write(true).open(path).map_err(io)?;
    let len = f.metadata().map_err(FileKeyStore::io(path))?.len() as usize;
    let mut noise = vec![0u8; len];
    SystemRandom::new()
        .fill(&mut noise)
        .map_err(|_| PlatformError::Random)?;
    f.write_all(&noise)
        .and_then(|_| f.sync_all())
        .map_err(FileKeyStore::io(path))
}

/// Name prefix of a staged KEK in the key directory.
const STAGED_PREFIX: &str = "history.key.next-";

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
        let current = self.load()?;
        if let Some(kek) = &current {
            if let Ok(k) = open_key(kek, wrapped, context) {
                return Ok(k);
            }
        }
        // A rotation stopped (a crash) after its wrapping was stored: finish it now.
        if let Some(k) = self.finish_with(wrapped, context)? {
            return Ok(k);
        }
        match current {
            Some(_) => Err(PlatformError::KeyUnwrap),
            None => Err(PlatformError::KeyMissing(self.key_path())),
        }
    }

    fn begin_rotation(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        // Left by a rotation that stopped before its wrapping was stored: they wrap nothing.
        for (file, _) in self.staged()? {
            fs::remove_file(&file).map_err(Self::io(&file))?;
        }
        let next = random_key()?;
        let mut id = [0u8; 8];
        SystemRandom::new()
            .fill(&mut id)
            .map_err(|_| PlatformError::Random)?;
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("{STAGED_PREFIX}{id}");
        // Written aside and renamed, so a staged file is always whole.
        let tmp = self.write_temp(&format!(".{name}.tmp"), &next)?;
        let staged = self.dir.join(&name);
        fs::rename(&tmp, &staged).map_err(Self::io(&staged))?;
        self.sync_dir();
        seal_key(&next, key, context)
    }

    fn finish_rotation(&self, wrapped: &[u8], context: &[u8]) -> Result<(), PlatformError> {
        if self.finish_with(wrapped, context)?.is_some() {
            return Ok(());
        }
        // Finished already (by an `unwrap` in another process, say)?
        match self.load()? {
            Some(kek) if open_key(&kek, wrapped, context).is_ok() => Ok(()),
            Some(_) => Err(PlatformError::KeyUnwrap),
            None => Err(PlatformError::KeyMissing(self.key_path())),
        }
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

    /// Names of the files in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_rotation_replaces_the_kek_and_the_old_wrapping_opens_no_more() {
        let dir = temp_dir("rotate");
        let ks = FileKeyStore::new(&dir);
        let (k1, k2) = (random_key().unwrap(), random_key().unwrap());
        let w1 = ks.wrap(&k1, b"c").unwrap();
        let old_kek = fs::read(ks.key_path()).unwrap();
        let w2 = ks.begin_rotation(&k2, b"c").unwrap();
        // Staged, not in use: the old wrapping still opens, and unwrapping it finishes nothing.
        assert_eq!(ks.unwrap(&w1, b"c").unwrap().0, k1.0);
        assert_eq!(names(&dir).len(), 2, "{:?}", names(&dir));
        assert_eq!(fs::read(ks.key_path()).unwrap(), old_kek);
        ks.finish_rotation(&w2, b"c").unwrap();
        assert_eq!(names(&dir), [KEY_FILE]);
        assert_ne!(fs::read(ks.key_path()).unwrap(), old_kek);
        assert_eq!(ks.unwrap(&w2, b"c").unwrap().0, k2.0);
        assert!(matches!(
            ks.unwrap(&w1, b"c"),
            Err(PlatformError::KeyUnwrap)
        ));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(ks.key_path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Finishing again is done already; a wrapping no key opens is an error.
        ks.finish_rotation(&w2, b"c").unwrap();
        assert!(matches!(
            ks.finish_rotation(&w1, b"c"),
            Err(PlatformError::KeyUnwrap)
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rotation_stopped_at_any_step_loses_neither_key() {
        let dir = temp_dir("rotate-crash");
        let ks = FileKeyStore::new(&dir);
        let k1 = random_key().unwrap();
        let w1 = ks.wrap(&k1, b"c").unwrap();

        // Stopped before the new wrapping was stored: the old key still opens the old one,
        // and the next rotation drops the stale staged key.
        let _lost = ks.begin_rotation(&random_key().unwrap(), b"c").unwrap();
        assert_eq!(ks.unwrap(&w1, b"c").unwrap().0, k1.0);
        let k2 = random_key().unwrap();
        let w2 = ks.begin_rotation(&k2, b"c").unwrap();
        assert_eq!(names(&dir).len(), 2, "one staged key: {:?}", names(&dir));

        // Stopped after it was stored: the next unwrap (the next open) opens it with the staged
        // key and finishes the rotation.
        assert_eq!(ks.unwrap(&w2, b"c").unwrap().0, k2.0);
        assert_eq!(names(&dir), [KEY_FILE]);
        assert!(matches!(
            ks.unwrap(&w1, b"c"),
            Err(PlatformError::KeyUnwrap)
        ));

        // Stopped inside finish_rotation: the old key overwritten, the staged one not yet
        // renamed.
        let k3 = random_key().unwrap();
        let w3 = ks.begin_rotation(&k3, b"c").unwrap();
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(ks.key_path())
            .unwrap();
        f.write_all(&[0x5a; KEY_LEN]).unwrap();
        drop(f);
        assert_eq!(ks.unwrap(&w3, b"c").unwrap().0, k3.0);
        assert_eq!(names(&dir), [KEY_FILE]);
        assert!(matches!(
            ks.unwrap(&w2, b"c"),
            Err(PlatformError::KeyUnwrap)
        ));
        ks.finish_rotation(&w3, b"c").unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn destroy_removes_every_key_and_what_they_wrapped_opens_no_more() {
        let dir = temp_dir("destroy");
        let ks = FileKeyStore::new(&dir);
        let k = random_key().unwrap();
        let w = ks.wrap(&k, b"c").unwrap();
        let staged = ks.begin_rotation(&random_key().unwrap(), b"c").unwrap();
        fs::write(dir.join("notes.txt"), b"not ours").unwrap();
        assert_eq!(ks.destroy().unwrap(), 2);
        assert_eq!(names(&dir), ["notes.txt"]);
        assert!(matches!(
            ks.unwrap(&w, b"c"),
            Err(PlatformError::KeyMissing(_))
        ));
        assert!(ks.unwrap(&staged, b"c").is_err());
        assert_eq!(ks.destroy().unwrap(), 0, "nothing left: done already");
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
