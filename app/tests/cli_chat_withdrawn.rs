//! `kostant chat` never leaves withdrawn text in its output: with the built-in guard head planted
//! to flag every reply at its first judgement (message threshold 1, reply threshold 0), a piped
//! stdout gets only the notice, and `--json` streams no token before the withdrawal and ends
//! with the notice as its reply.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kostant_safety::head::Head;
use kostant_safety::policy;

fn planted_head() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-chat-withdrawn-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let path = root.join("withdraw-all.head");
    let mut head = Head::from_bytes(kostant_assets::GUARD_HEAD).unwrap();
    head.info.threshold = 1.0;
    head.info.output_threshold = Some(0.0);
    head.save(&path).unwrap();
    path
}

fn chat(head: &Path, extra: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args([
            "chat",
            "--no-history",
            "--temperature",
            "0",
            "--max-tokens",
            "40",
        ])
        .args(["--prompt", "Tell me a story about a lighthouse keeper."])
        .args(extra)
        .arg("--model")
        .arg(kostant_engine::testing::real_model_path())
        .arg("--guard-head")
        .arg(head)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_withdrawn_reply_leaves_only_the_notice() {
    let head = planted_head();
    let notice = policy::withdrawn_notice(None);

    // Piped: the reply is written once it has ended, as the user is meant to see it.
    let out = chat(&head, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), notice.trim(), "{text}");

    // JSON: nothing of the reply was judged safe, so no token line precedes the withdrawal,
    // and the final reply is the notice.
    let out = chat(&head, &["--json"]);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tokens: Vec<_> = lines.iter().filter(|l| l["event"] == "token").collect();
    assert!(
        tokens.is_empty(),
        "text streamed before its judgement: {tokens:?}"
    );
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["reply"], notice.as_str());
    assert_eq!(done["stopped_by"], "guard");
    assert!(lines.iter().any(|l| l["event"] == "withdraw"));
}
