//! `kostant history lock / unlock / passphrase` end to end: a locked history refuses every
//! command without its passphrase (a clear message, nothing lost), opens with
//! `KOSTANT_PASSPHRASE_FILE`, and comes back unlocked; `chat` refuses before loading a model.

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

struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli-lock-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        Scratch(root)
    }

    /// A file holding `text`, for --passphrase-file and KOSTANT_PASSPHRASE_FILE.
    fn pass(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, format!("{text}\n")).unwrap();
        p
    }

    /// `kostant ARGS` on this scratch's directories, with the passphrase file `env` if any.
    fn run(&self, args: &[&str], env: Option<&Path>) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kostant"));
        cmd.args(args)
            .env("KOSTANT_MODEL", model())
            .env("KOSTANT_DATA_DIR", self.0.join("data"))
            .env("KOSTANT_KEY_DIR", self.0.join("keys"))
            .env_remove("KOSTANT_MODELS_DIR");
        match env {
            Some(p) => cmd.env("KOSTANT_PASSPHRASE_FILE", p),
            None => cmd.env_remove("KOSTANT_PASSPHRASE_FILE"),
        };
        cmd.output().expect("kostant runs")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(out: &Output, says: &str) {
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(says), "expected {says:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_locked_history_opens_only_with_its_passphrase_and_comes_back_whole() {
    let s = Scratch::new();
    ok(&s.run(&["chat", "--max-tokens", "4", "--prompt", "Say hi."], None));
    let shown = ok(&s.run(&["history", "show", "1", "--json"], None));
    let right = s.pass("right", "correct horse battery");
    let wrong = s.pass("wrong", "incorrect horse");
    let new = s.pass("new", "a new staple");

    let locked = ok(&s.run(
        &[
            "history",
            "lock",
            "--passphrase-file",
            right.to_str().unwrap(),
        ],
        None,
    ));
    assert!(locked.starts_with("locked:"), "{locked}");
    let locked_msg =
        "the history is locked: give its passphrase in a file named by KOSTANT_PASSPHRASE_FILE";
    refused(&s.run(&["history", "list"], None), locked_msg);
    refused(&s.run(&["chat", "--prompt", "x"], None), locked_msg);
    refused(
        &s.run(&["history", "list"], Some(&wrong)),
        "that passphrase does not open the history",
    );
    refused(
        &s.run(
            &[
                "history",
                "lock",
                "--passphrase-file",
                wrong.to_str().unwrap(),
            ],
            Some(&right),
        ),
        "locked already",
    );
    // Nothing lost: the right passphrase shows the conversation as it was.
    assert_eq!(
        ok(&s.run(&["history", "show", "1", "--json"], Some(&right))),
        shown
    );

    // A new passphrase: the old one no longer opens it, the new one does.
    ok(&s.run(
        &[
            "history",
            "passphrase",
            "--passphrase-file",
            right.to_str().unwrap(),
            "--new-passphrase-file",
            new.to_str().unwrap(),
        ],
        None,
    ));
    refused(
        &s.run(&["history", "list"], Some(&right)),
        "that passphrase does not open the history",
    );
    assert_eq!(
        ok(&s.run(&["history", "show", "1", "--json"], Some(&new))),
        shown
    );

    // Unlock: a wrong passphrase changes nothing; the right one makes the key file enough.
    refused(
        &s.run(
            &[
                "history",
                "unlock",
                "--passphrase-file",
                wrong.to_str().unwrap(),
            ],
            None,
        ),
        "that passphrase does not open the history",
    );
    let unlocked = ok(&s.run(
        &[
            "history",
            "unlock",
            "--passphrase-file",
            new.to_str().unwrap(),
        ],
        None,
    ));
    assert!(unlocked.starts_with("unlocked:"), "{unlocked}");
    assert_eq!(ok(&s.run(&["history", "show", "1", "--json"], None)), shown);
    refused(
        &s.run(
            &[
                "history",
                "unlock",
                "--passphrase-file",
                new.to_str().unwrap(),
            ],
            None,
        ),
        "the history is not locked",
    );
}

#[test]
fn wipe_erases_a_locked_history_without_its_passphrase_keys_first() {
    let s = Scratch::new();
    ok(&s.run(&["history", "list"], None));
    let pass = s.pass("pass", "panic button");
    ok(&s.run(
        &[
            "history",
            "lock",
            "--passphrase-file",
            pass.to_str().unwrap(),
        ],
        None,
    ));
    std::fs::create_dir_all(s.0.join("data/evals/run")).unwrap();
    std::fs::write(s.0.join("data/settings.json"), "{}").unwrap();

    refused(&s.run(&["history", "wipe"], None), "pass --yes to confirm");
    assert!(
        s.0.join("data/history.sqlite3").exists(),
        "nothing without --yes"
    );

    let out = ok(&s.run(&["history", "wipe", "--yes", "--json"], None));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["key_files"], 1);
    assert!(v["unreadable_after_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["removed"].as_array().unwrap().len(), 3, "{v}");
    assert!(!s.0.join("data").exists() && !s.0.join("keys").exists());

    let text = ok(&s.run(&["history", "wipe", "--yes"], None));
    assert!(
        text.starts_with("erased: 0 key file(s) destroyed in "),
        "{text}"
    );
}
