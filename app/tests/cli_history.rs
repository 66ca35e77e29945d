//! `kostant chat` and `kostant history` end to end on the real default model: a chat is saved
//! encrypted (nothing readable on disk), listed, found and shown; `--no-history` saves nothing;
//! delete removes it; a wrong key or a key inside the data directory is a clear error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SECRET: &str = "PLANTED-SECRET-7f3a9";

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

struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli-history-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        Scratch { root }
    }
    fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    fn keys(&self) -> PathBuf {
        self.root.join("keys")
    }

    /// Runs `kostant` with this scratch's key directory; the data directory comes from the
    /// environment for `chat` and from `--data-dir` for `history`, so both paths are used.
    fn run(&self, args: &[&str]) -> Output {
        self.run_with_keys(args, &self.keys())
    }

    fn run_with_keys(&self, args: &[&str], keys: &Path) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kostant"));
        if args[0] == "history" {
            cmd.args(args)
                .arg("--data-dir")
                .arg(self.data())
                .env_remove("KOSTANT_DATA_DIR");
        } else {
            cmd.args(args).env("KOSTANT_DATA_DIR", self.data());
        }
        cmd.env("KOSTANT_MODEL", model())
            .env("KOSTANT_KEY_DIR", keys)
            .env_remove("KOSTANT_MODELS_DIR")
            .env_remove("KOSTANT_EXPORT_PASSPHRASE")
            .output()
            .expect("kostant runs")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn ok_json(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output; {err}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"))
}

fn failed_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
}

/// Whether any file under `dir` holds `needle`.
fn on_disk(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let p = e.unwrap().path();
        if p.is_dir() {
            on_disk(&p, needle)
        } else {
            let bytes = std::fs::read(&p).unwrap();
            bytes.windows(needle.len()).any(|w| w == needle)
        }
    })
}

fn chat(s: &Scratch, prompt: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "chat",
        "--prompt",
        prompt,
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "--json",
    ];
    args.extend_from_slice(extra);
    ok_json(&s.run(&args))
}

/// Runs `kostant chat ARGS` interactively on this scratch's directories with `input` on stdin,
/// and checks it ended well.
fn interactive(s: &Scratch, args: &[&str], input: &str) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kostant"))
        .arg("chat")
        .args(args)
        .env("KOSTANT_MODEL", model())
        .env("KOSTANT_DATA_DIR", s.data())
        .env("KOSTANT_KEY_DIR", s.keys())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn chat_saves_encrypted_and_history_lists_finds_shows_and_deletes() {
    let s = Scratch::new("e2e");
    let prompt = format!("Please remember the code {SECRET}.");
    let done = chat(&s, &prompt, &[]);
    assert_eq!(done["event"], "done");
    let reply = done["reply"].as_str().unwrap().to_string();

    let list = ok_json(&s.run(&["history", "list", "--json"]));
    let convs = list["conversations"].as_array().unwrap();
    assert_eq!(convs.len(), 1, "{list}");
    let id = convs[0]["id"].as_i64().unwrap();
    assert_eq!(convs[0]["messages"], 2);
    assert_eq!(convs[0]["title"], prompt.as_str());

    // The data directory holds only ciphertext; the key lives elsewhere.
    assert!(!on_disk(&s.data(), SECRET.as_bytes()));
    assert!(!on_disk(&s.data(), b"remember the code"));
    assert!(s.keys().join("history.key").is_file());

    let found = ok_json(&s.run(&["history", "search", "planted-secret", "--json"]));
    let hits = found["hits"].as_array().unwrap();
    assert!(!hits.is_empty(), "{found}");
    assert!(hits.iter().all(|h| h["conversation_id"] == id));
    assert_eq!(hits[0]["text"], prompt.as_str());
    let none = ok_json(&s.run(&["history", "search", "no such words here", "--json"]));
    assert_eq!(none["hits"].as_array().unwrap().len(), 0);

    let shown = ok_json(&s.run(&["history", "show", &id.to_string(), "--json"]));
    let msgs = shown["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[0]["text"], prompt.as_str());
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["text"], reply.as_str());
    // Text output too.
    let text = s.run(&["history", "list"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains(SECRET));

    // --no-history saves nothing.
    chat(&s, "Say NOHIST-marker-42 back.", &["--no-history"]);
    let list = ok_json(&s.run(&["history", "list", "--json"]));
    assert_eq!(list["conversations"].as_array().unwrap().len(), 1);
    let found = ok_json(&s.run(&["history", "search", "NOHIST-marker", "--json"]));
    assert_eq!(found["hits"].as_array().unwrap().len(), 0);

    // Export needs a passphrase and writes no plaintext.
    let out = s.root.join("export.json");
    let out_arg = out.to_str().unwrap();
    failed_with(
        &s.run(&["history", "export", "--out", out_arg]),
        "KOSTANT_EXPORT_PASSPHRASE",
    );
    let pass = s.root.join("pass.txt");
    std::fs::write(&pass, "correct horse battery\n").unwrap();
    let exported = ok_json(&s.run(&[
        "history",
        "export",
        "--out",
        out_arg,
        "--passphrase-file",
        pass.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(exported["exported_conversations"], 1);
    let bytes = std::fs::read(&out).unwrap();
    assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));

    // Delete removes it, and a second delete says there is nothing to delete.
    let deleted = ok_json(&s.run(&["history", "delete", &id.to_string(), "--json"]));
    assert_eq!(deleted["deleted"], id);
    let list = ok_json(&s.run(&["history", "list", "--json"]));
    assert_eq!(list["conversations"].as_array().unwrap().len(), 0);
    let found = ok_json(&s.run(&["history", "search", SECRET, "--json"]));
    assert_eq!(found["hits"].as_array().unwrap().len(), 0);
    failed_with(
        &s.run(&["history", "delete", &id.to_string()]),
        &format!("no conversation {id}"),
    );
    failed_with(
        &s.run(&["history", "show", &id.to_string()]),
        "no conversation",
    );
    failed_with(&s.run(&["history", "delete-all"]), "--yes");
    let all = ok_json(&s.run(&["history", "delete-all", "--yes", "--json"]));
    assert_eq!(all["deleted_conversations"], 0);
    assert!(!on_disk(&s.data(), SECRET.as_bytes()));
}

#[test]
fn wrong_key_and_key_inside_the_data_directory_are_clear_errors() {
    let s = Scratch::new("keys");
    chat(&s, "Hello there", &[]);
    // Another (empty) key directory: reported, and chat refuses before loading the model.
    let other = s.root.join("other-keys");
    failed_with(
        &s.run_with_keys(&["history", "list"], &other),
        "does not exist",
    );
    failed_with(
        &s.run_with_keys(&["chat", "--prompt", "hi", "--max-tokens", "1"], &other),
        "does not exist",
    );
    // With --no-history the chat needs no key at all.
    let out = s.run_with_keys(
        &[
            "chat",
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
            "--no-history",
        ],
        &other,
    );
    assert!(out.status.success());
    // A key directory inside the data directory is refused.
    failed_with(
        &s.run_with_keys(&["history", "list"], &s.data().join("keys")),
        "keep the key apart",
    );
    // A damaged database is reported, not a panic.
    std::fs::write(s.data().join("history.sqlite3"), vec![0x42u8; 5000]).unwrap();
    failed_with(
        &s.run(&["history", "list"]),
        "not a readable Kostant history",
    );
}

#[test]
fn interactive_chat_saves_turns_and_reset_starts_a_new_conversation() {
    let s = Scratch::new("interactive");
    interactive(
        &s,
        &["--temperature", "0", "--max-tokens", "4"],
        "first turn\nsecond turn\n/reset\nafter reset\n",
    );
    let list = ok_json(&s.run(&["history", "list", "--json"]));
    let mut convs: Vec<(String, i64)> = list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["title"].as_str().unwrap().to_string(),
                c["messages"].as_i64().unwrap(),
            )
        })
        .collect();
    convs.sort();
    assert_eq!(
        convs,
        vec![
            ("after reset".to_string(), 2),
            ("first turn".to_string(), 4)
        ]
    );
}

/// The assistant's messages of history conversation `id`, in order.
fn assistant_messages(s: &Scratch, id: i64) -> Vec<String> {
    let shown = ok_json(&s.run(&["history", "show", &id.to_string(), "--json"]));
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect()
}

/// The conversation survives the process: `chat --continue ID` restores the saved context
/// (only the new turn goes through a forward pass) and replies exactly as a chat that never
/// closed; a context saved for another cache type is refused with a notice and the
/// conversation is read again, losing nothing.
#[test]
fn continue_restores_the_saved_context_and_replies_as_if_never_closed() {
    let (first, second) = (
        "My name is Ada and I play chess on Sundays.",
        "What game do I play, and when?",
    );
    let args = ["--temperature", "0", "--max-tokens", "12"];
    // One process, two turns: the second reuses the first's cache as it was left.
    let never_closed = Scratch::new("never-closed");
    interactive(&never_closed, &args, &format!("{first}\n{second}\n"));
    let want = assistant_messages(&never_closed, 1);
    assert_eq!(want.len(), 2);

    // Two processes: the second continues from the saved context.
    let s = Scratch::new("continue");
    let one = ok_json(&s.run(&[
        "chat", "--prompt", first, "--json", args[0], args[1], args[2], args[3],
    ]));
    assert_eq!(one["reply"], want[0].as_str());
    let two = ok_json(&s.run(&[
        "chat",
        "--continue",
        "1",
        "--prompt",
        second,
        "--json",
        args[0],
        args[1],
        args[2],
        args[3],
    ]));
    let stats = &two["stats"];
    let (prompt, restored, prefill) = (
        stats["prompt_tokens"].as_u64().unwrap(),
        stats["restored_tokens"].as_u64().unwrap(),
        stats["prefill_tokens"].as_u64().unwrap(),
    );
    assert!(restored > 40, "{stats}");
    assert_eq!(restored + prefill, prompt, "{stats}");
    assert!(prefill < 30, "only the new turn is read: {stats}");
    assert_eq!(two["reply"], want[1].as_str());
    assert_eq!(
        assistant_messages(&s, 1),
        want,
        "appended to the same conversation"
    );
    assert!(
        !on_disk(&s.data(), b"Sundays"),
        "the context reached the disk in the clear"
    );

    // Saved with the f16 cache, asked for with q8_0: a notice, the conversation read again.
    let out = s.run(&[
        "chat",
        "--continue",
        "1",
        "--kv-type",
        "q8_0",
        "--prompt",
        "Thanks!",
        "--json",
        args[0],
        args[1],
        args[2],
        args[3],
    ]);
    let three = ok_json(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("was not restored")
            && err.contains("q8_0")
            && err.contains("reading the conversation again"),
        "{err}"
    );
    assert_eq!(three["stats"]["restored_tokens"], 0);
    assert_eq!(
        three["stats"]["prefill_tokens"],
        three["stats"]["prompt_tokens"]
    );
    assert_eq!(assistant_messages(&s, 1).len(), 3);

    // A conversation that is not there is a clear error.
    failed_with(
        &s.run(&["chat", "--continue", "9", "--prompt", "hi", "--json"]),
        "no conversation 9",
    );
}
