//! The shaped features end to end on the real default model: `--feature reply --json` carries
//! exactly three non-empty suggestions, `--feature summarize --length short` writes exactly
//! three bullets, and the shape flags are refused where they do not belong.

use std::path::PathBuf;
use std::process::{Command, Output};

fn kostant(args: &[&str]) -> Output {
    let data = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-choices-data");
    let model = kostant_engine::testing::real_model_path();
    Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(args)
        .env("KOSTANT_MODEL", model)
        .env_remove("KOSTANT_MODELS_DIR")
        .env("KOSTANT_DATA_DIR", data.join("data"))
        .env("KOSTANT_KEY_DIR", data.join("keys"))
        .output()
        .expect("kostant starts")
}

/// `kostant chat` greedy, briefly, without history, on `prompt` with `extra` flags.
fn chat(prompt: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "chat",
        "--no-history",
        "--temperature",
        "0",
        "--max-tokens",
        "90",
        "--prompt",
        prompt,
    ];
    args.extend_from_slice(extra);
    kostant(&args)
}

fn done_line(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().expect("a final line");
    serde_json::from_str(last).expect("the final line is JSON")
}

#[test]
fn reply_json_carries_three_choices() {
    let o = chat(
        "Hi! Are you free for lunch on Friday? I found a new Thai place near the office.",
        &["--feature", "reply", "--json"],
    );
    let done = done_line(&o);
    assert_eq!(done["verdict"], "answered", "{done}");
    let choices = done["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 3, "{done}");
    for c in choices {
        let c = c.as_str().unwrap();
        assert!(!c.trim().is_empty() && !c.contains('\n'), "{done}");
    }
    // The reply as shown is the three, numbered.
    let reply = done["reply"].as_str().unwrap();
    assert!(
        reply.starts_with("1. ") && reply.contains("\n3. "),
        "{reply}"
    );
}

#[test]
fn a_short_summary_has_three_bullets() {
    let text = "The team meeting moved from Tuesday to Friday at 10am because the projector is \
                broken. Please bring the quarterly report. Lunch will be provided, and parking \
                in the north lot is free for visitors this week.";
    let o = chat(text, &["--feature", "summarize", "--length", "short"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = stdout.trim_end().lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines.iter().all(|l| l.starts_with("- ") && l.len() > 2),
        "{stdout}"
    );
    let o = chat(
        text,
        &["--feature", "summarize", "--length", "short", "--json"],
    );
    assert_eq!(done_line(&o)["bullets"].as_array().map(Vec::len), Some(3));
}

#[test]
fn shape_flags_belong_to_their_features() {
    let o = kostant(&["chat", "--prompt", "hi", "--length", "short"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--length goes with --feature summarize"),
        "{err}"
    );
    let o = kostant(&[
        "chat",
        "--prompt",
        "hi",
        "--feature",
        "summarize",
        "--tone",
        "formal",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--tone goes with --feature rewrite"), "{err}");
    let o = kostant(&[
        "chat",
        "--prompt",
        "hi",
        "--feature",
        "rewrite",
        "--tone",
        "louder",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("friendlier, formal, shorter"), "{err}");
}
