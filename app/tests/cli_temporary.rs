//! `kostant chat --temporary` on the real default model leaves no byte behind: every file under
//! the scratch home (data directory, key directory, config and cache) is hashed before and after
//! a temporary chat, and none changed, appeared or went away.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `KOSTANT_MODEL`, else the default model under this workspace's `models/`.
fn model() -> PathBuf {
    let p = std::env::var_os("KOSTANT_MODEL").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        PathBuf::from,
    );
    assert!(
        p.is_file(),
        "{} is missing: run scripts/setup.sh first",
        p.display()
    );
    p
}

fn scratch() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-temporary-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// `kostant chat` with every place it could write inside `root`.
fn chat(root: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(["chat", "--max-tokens", "8", "--temperature", "0"])
        .args(extra)
        .env("KOSTANT_MODEL", model())
        .env("HOME", root)
        .env("XDG_DATA_HOME", root.join("xdg-data"))
        .env("XDG_CONFIG_HOME", root.join("xdg-config"))
        .env("XDG_CACHE_HOME", root.join("xdg-cache"))
        .env("KOSTANT_DATA_DIR", root.join("data"))
        .env("KOSTANT_KEY_DIR", root.join("keys"))
        .env_remove("KOSTANT_MODELS_DIR")
        .env_remove("KOSTANT_PASSPHRASE_FILE")
        .output()
        .expect("kostant runs")
}

/// Every file under `dir` with the sha256 of its bytes (directories listed too, as empty).
fn fingerprint(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.insert(path.clone(), "dir".into());
            fingerprint(&path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
            out.insert(path, format!("{:?}", digest.as_ref()));
        }
    }
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut m = BTreeMap::new();
    fingerprint(root, &mut m);
    m
}

#[test]
fn a_temporary_chat_leaves_the_data_and_key_directories_byte_for_byte_unchanged() {
    let root = scratch();
    // A saved chat first, so there is a history, a key and a saved context to leave alone.
    let saved = chat(&root, &["--prompt", "Say hello."]);
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let before = snapshot(&root);
    assert!(before.keys().any(|p| p.ends_with("history.sqlite3")));
    assert!(before.keys().any(|p| p.ends_with("history.key")));

    let one_shot = chat(&root, &["--temporary", "--prompt", "Name a colour."]);
    let err = String::from_utf8_lossy(&one_shot.stderr);
    assert!(one_shot.status.success(), "{err}");
    assert!(!one_shot.stdout.is_empty(), "a reply was written");
    assert_eq!(snapshot(&root), before, "a one-shot temporary chat wrote");

    let interactive = Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(["chat", "--temporary", "--max-tokens", "8"])
        .env("KOSTANT_MODEL", model())
        .env("HOME", &root)
        .env("XDG_DATA_HOME", root.join("xdg-data"))
        .env("XDG_CONFIG_HOME", root.join("xdg-config"))
        .env("XDG_CACHE_HOME", root.join("xdg-cache"))
        .env("KOSTANT_DATA_DIR", root.join("data"))
        .env("KOSTANT_KEY_DIR", root.join("keys"))
        .env_remove("KOSTANT_MODELS_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"Hi there.\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let err = String::from_utf8_lossy(&interactive.stderr);
    assert!(interactive.status.success(), "{err}");
    assert!(
        err.contains("Temporary: this chat is not saved"),
        "the banner says so: {err}"
    );
    assert_eq!(
        snapshot(&root),
        before,
        "an interactive temporary chat wrote"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn temporary_and_continue_do_not_go_together() {
    let root = scratch();
    let out = chat(&root, &["--temporary", "--continue", "1", "--prompt", "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--continue"), "{err}");
    assert!(!root.join("data").exists() && !root.join("keys").exists());
    let _ = std::fs::remove_dir_all(&root);
}
