//! The files an APK carries in its assets (the model, the eval suites), installed into the
//! app's private files directory on first start, since the engine maps a model from a file and
//! an asset inside the APK is not one. `platform/android/build-apk.sh` writes the list of them
//! (`bundle.sha256`: sha256, size and path per line); each file is copied beside its place,
//! checked against its line while it is copied, synced and renamed into place, so a start that
//! is killed mid-copy leaves the old file or none, never half of one. A file that does not
//! match is removed and named in the error: nothing unverified is used.
//!
//! Plain `Read`s and paths, so it is tested on the desktop; the activity opens the assets.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256};

/// The list's name among the assets and, once everything is installed, in the files directory.
pub const LIST: &str = "bundle.sha256";

/// One file of the bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative, '/'-separated, no `..`: the asset's name and its place under the files dir.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("this copy of Kostant is damaged: line {line} of its file list is not \"sha256 size path\" ({why}); reinstall the app")]
    List { line: usize, why: &'static str },
    #[error(
        "this copy of Kostant is damaged: {path} does not match its checksum; reinstall the app"
    )]
    Mismatch { path: String },
    #[error("this copy of Kostant is missing {path}; reinstall the app")]
    Missing { path: String },
    #[error("could not install {path} ({source}); if the phone is short of storage, free some and open Kostant again")]
    Io { path: String, source: io::Error },
}

/// Parses the list: one `sha256 size path` per line (blank lines allowed).
pub fn parse(text: &str) -> Result<Vec<Entry>, BundleError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |why| BundleError::List { line: i + 1, why };
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(sha), Some(size), Some(path), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("not three fields"));
        };
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("not a sha256"));
        }
        let size = size.parse().map_err(|_| bad("not a size"))?;
        if !safe_path(path) {
            return Err(bad("not a plain relative path"));
        }
        entries.push(Entry {
            path: path.to_string(),
            size,
            sha256: sha.to_ascii_lowercase(),
        });
    }
    Ok(entries)
}

/// The lines of `list` whose path `keep` accepts (a part of the bundle to install first);
/// a line with no path is kept, so that [`install`] refuses the list as it would whole.
pub fn subset(list: &str, keep: impl Fn(&str) -> bool) -> String {
    list.lines()
        .filter(|line| line.split_whitespace().nth(2).is_none_or(&keep))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// A relative path of plain names (letters, digits, `.`, `_`, `-`), none of them `.` or `..`.
fn safe_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
}

/// The entries verified so far, by path: the list kept in the files directory, one line per
/// file installed and checked (damaged or absent: none).
fn kept(root: &Path) -> BTreeMap<String, Entry> {
    fs::read_to_string(root.join(LIST))
        .ok()
        .and_then(|text| parse(&text).ok())
        .into_iter()
        .flatten()
        .map(|e| (e.path.clone(), e))
        .collect()
}

/// Whether every file of `list` is installed: verified against the same line before (the kept
/// list says so) and still of its size. A later start reads one small file, not the model.
pub fn is_installed(list: &str, root: &Path) -> bool {
    let kept = kept(root);
    parse(list).is_ok_and(|entries| {
        entries.iter().all(|e| {
            kept.get(&e.path) == Some(e)
                && fs::metadata(root.join(&e.path)).is_ok_and(|m| m.is_file() && m.len() == e.size)
        })
    })
}

/// Installs every entry of `list` under `root`, reading each from `open(path)`, then records
/// them in the kept list (beside what an earlier part of the bundle recorded). A file already
/// there that matches is kept.
pub fn install<R: Read>(
    list: &str,
    root: &Path,
    mut open: impl FnMut(&str) -> Option<R>,
) -> Result<(), BundleError> {
    if is_installed(list, root) {
        return Ok(());
    }
    let entries = parse(list)?;
    for e in &entries {
        let dest = root.join(&e.path);
        if matches(&dest, e) {
            continue;
        }
        let src = open(&e.path).ok_or_else(|| BundleError::Missing {
            path: e.path.clone(),
        })?;
        copy_checked(src, &dest, e)?;
    }
    let mut verified = kept(root);
    verified.extend(entries.into_iter().map(|e| (e.path.clone(), e)));
    let text: String = verified
        .values()
        .map(|e| format!("{}  {}  {}\n", e.sha256, e.size, e.path))
        .collect();
    write_atomically(&root.join(LIST), text.as_bytes()).map_err(|source| BundleError::Io {
        path: LIST.into(),
        source,
    })
}

/// Whether `dest` is the entry's file (size, then sha256).
fn matches(dest: &Path, e: &Entry) -> bool {
    fs::metadata(dest).is_ok_and(|m| m.len() == e.size)
        && fs::File::open(dest)
            .and_then(|f| sha256_of(f).map(|(_, sha)| sha))
            .is_ok_and(|sha| sha == e.sha256)
}

fn sha256_of(mut src: impl Read) -> io::Result<(u64, String)> {
    let (n, sha) = copy_hashing(&mut src, &mut io::sink())?;
    Ok((n, sha))
}

fn copy_hashing(src: &mut impl Read, dst: &mut impl Write) -> io::Result<(u64, String)> {
    let mut ctx = Context::new(&SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        ctx.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
        total += n as u64;
    }
    let hex = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((total, hex))
}

/// Copies `src` to `dest` through `dest.part`, checking size and sha256 before the rename.
fn copy_checked(mut src: impl Read, dest: &Path, e: &Entry) -> Result<(), BundleError> {
    let io_err = |source| BundleError::Io {
        path: e.path.clone(),
        source,
    };
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir).map_err(io_err)?;
    }
    let part = part_path(dest);
    let result = (|| {
        let mut out = fs::File::create(&part)?;
        let got = copy_hashing(&mut src, &mut out)?;
        out.sync_all()?;
        Ok(got)
    })();
    let (size, sha) = match result {
        Ok(got) => got,
        Err(source) => {
            let _ = fs::remove_file(&part);
            return Err(io_err(source));
        }
    };
    if size != e.size || sha != e.sha256 {
        let _ = fs::remove_file(&part);
        return Err(BundleError::Mismatch {
            path: e.path.clone(),
        });
    }
    fs::rename(&part, dest).map_err(io_err)
}

fn part_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    dest.with_file_name(name)
}

fn write_atomically(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let part = part_path(dest);
    let mut f = fs::File::create(&part)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&part, dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::Cursor;

    fn sha(bytes: &[u8]) -> String {
        kostant_assets::sha256_hex(bytes)
    }

    fn bundle(files: &[(&str, &[u8])]) -> (String, HashMap<String, Vec<u8>>) {
        let list = files
            .iter()
            .map(|(p, b)| format!("{}  {}  {p}\n", sha(b), b.len()))
            .collect();
        let assets = files
            .iter()
            .map(|(p, b)| (p.to_string(), b.to_vec()))
            .collect();
        (list, assets)
    }

    fn opener(
        assets: &HashMap<String, Vec<u8>>,
    ) -> impl FnMut(&str) -> Option<Cursor<Vec<u8>>> + '_ {
        |p| assets.get(p).cloned().map(Cursor::new)
    }

    #[test]
    fn installs_every_file_once_and_then_reads_only_the_list() {
        let dir = tempfile_dir("installs");
        let (list, assets) = bundle(&[
            ("models/m.gguf", b"GGUF model bytes"),
            ("evals/suites/harmful.jsonl", b"{\"id\":\"a\"}\n"),
        ]);
        install(&list, &dir, opener(&assets)).unwrap();
        assert_eq!(
            fs::read(dir.join("models/m.gguf")).unwrap(),
            b"GGUF model bytes"
        );
        assert_eq!(
            fs::read(dir.join("evals/suites/harmful.jsonl")).unwrap(),
            b"{\"id\":\"a\"}\n"
        );
        assert!(is_installed(&list, &dir));
        assert!(!dir.join("models/m.gguf.part").exists());
        // A second start opens no asset.
        install(&list, &dir, |_| -> Option<&[u8]> {
            panic!("opened an asset")
        })
        .unwrap();
    }

    #[test]
    fn a_damaged_asset_is_refused_and_leaves_nothing_behind() {
        let dir = tempfile_dir("damaged");
        let (list, mut assets) = bundle(&[("models/m.gguf", b"GGUF model bytes")]);
        assets.insert("models/m.gguf".into(), b"GGUF modeL bytes".to_vec());
        let err = install(&list, &dir, opener(&assets)).unwrap_err();
        assert!(matches!(err, BundleError::Mismatch { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("models/m.gguf") && msg.contains("reinstall"),
            "{msg}"
        );
        assert!(!dir.join("models/m.gguf").exists());
        assert!(!dir.join("models/m.gguf.part").exists());
        assert!(!is_installed(&list, &dir));
        // A short asset (a truncated APK) is refused the same way.
        assets.insert("models/m.gguf".into(), b"GGUF".to_vec());
        assert!(matches!(
            install(&list, &dir, opener(&assets)),
            Err(BundleError::Mismatch { .. })
        ));
    }

    #[test]
    fn a_part_installs_first_and_the_whole_after_copies_only_the_rest() {
        let dir = tempfile_dir("parts");
        let (list, assets) = bundle(&[
            ("evals/manifest.json", b"{}"),
            ("models/m.gguf", b"GGUF model bytes"),
        ]);
        let small = subset(&list, |p| !p.starts_with("models/"));
        assert_eq!(small.lines().count(), 1);
        install(&small, &dir, opener(&assets)).unwrap();
        assert!(dir.join("evals/manifest.json").exists());
        assert!(!dir.join("models/m.gguf").exists());
        assert!(!is_installed(&list, &dir));
        let mut opened = Vec::new();
        install(&list, &dir, |p| {
            opened.push(p.to_string());
            assets.get(p).cloned().map(Cursor::new)
        })
        .unwrap();
        assert_eq!(opened, ["models/m.gguf"]);
        assert!(is_installed(&list, &dir));
        // The next start installs the part first again: nothing is opened, and the whole
        // stays installed (no re-reading the model).
        install(&small, &dir, |_| -> Option<&[u8]> {
            panic!("opened an asset")
        })
        .unwrap();
        assert!(is_installed(&list, &dir));
        // A line that does not parse is kept, so `install` refuses it.
        assert_eq!(subset("junk\n", |_| true), "junk\n");
    }

    #[test]
    fn a_missing_asset_is_named() {
        let dir = tempfile_dir("missing");
        let (list, _) = bundle(&[("models/m.gguf", b"x")]);
        let err = install(&list, &dir, |_| -> Option<&[u8]> { None }).unwrap_err();
        assert!(matches!(err, BundleError::Missing { .. }));
        assert!(err.to_string().contains("models/m.gguf"));
    }

    #[test]
    fn an_upgrade_replaces_what_changed_and_keeps_what_did_not() {
        let dir = tempfile_dir("upgrade");
        let (old, assets) = bundle(&[("a.txt", b"one"), ("b.txt", b"two")]);
        install(&old, &dir, opener(&assets)).unwrap();
        let (new, assets) = bundle(&[("a.txt", b"one"), ("b.txt", b"three")]);
        assert!(!is_installed(&new, &dir));
        let mut opened = Vec::new();
        install(&new, &dir, |p| {
            opened.push(p.to_string());
            assets.get(p).cloned().map(Cursor::new)
        })
        .unwrap();
        assert_eq!(opened, ["b.txt"]);
        assert_eq!(fs::read(dir.join("b.txt")).unwrap(), b"three");
        // A file changed behind the list's back (size differs) is noticed.
        fs::write(dir.join("a.txt"), b"o").unwrap();
        assert!(!is_installed(&new, &dir));
    }

    #[test]
    fn hostile_lists_are_refused_before_anything_is_written() {
        let dir = tempfile_dir("hostile");
        let good = sha(b"x");
        for list in [
            format!("{good} 1 ../escape.txt\n"),
            format!("{good} 1 /etc/passwd\n"),
            format!("{good} 1 a//b\n"),
            format!("{good} 1 a/./b\n"),
            format!("{good} one a.txt\n"),
            format!("{good} 1\n"),
            format!("{good} 1 a.txt extra\n"),
            "abc 1 a.txt\n".to_string(),
            format!("{good} 1 a\u{e9}.txt\n"),
        ] {
            let err = install(&list, &dir, |_| -> Option<&[u8]> { Some(b"x") }).unwrap_err();
            assert!(
                matches!(err, BundleError::List { line: 1, .. }),
                "{list:?}: {err}"
            );
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    }

    /// A fresh directory of the system's temp dir, removed with its contents when dropped
    /// (a failed test's included), so test runs leave nothing behind.
    struct TempDir(PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for TempDir {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn tempfile_dir(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "kostant-bundle-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
