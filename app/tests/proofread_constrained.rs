//! The proofreader that never invents, on the real default model through
//! `kostant chat --feature proofread --json`: the reply keeps the input's sentences, numbers,
//! names and day, and its "changes" rebuild the reply from the input.

use std::process::Command;

use kostant_app::assistant::proofread::{apply, sentences, Change};
use kostant_engine::testing::real_model_path;

#[test]
fn a_proofread_reply_keeps_the_sentences_numbers_and_names() {
    let text = "Anna will meet Tom at 5 pm on sunday. She have booked a tabel for 4 people.";
    let out = Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(["chat", "--no-history", "--json", "--temperature", "0"])
        .args(["--feature", "proofread", "--prompt", text])
        .env("KOSTANT_MODEL", real_model_path())
        .env_remove("KOSTANT_MODELS_DIR")
        .output()
        .expect("kostant starts");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let done: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a done line")).expect("JSON");
    let reply = done["reply"].as_str().expect("a reply");

    assert_eq!(sentences(reply).len(), 2, "{reply}");
    for kept in ["Anna", "Tom", " 5 ", " 4 "] {
        assert!(reply.contains(kept), "{kept:?} lost: {reply}");
    }
    assert!(reply.to_lowercase().contains("sunday"), "{reply}");

    let changes: Vec<Change> = done["changes"]
        .as_array()
        .expect("the changes")
        .iter()
        .map(|c| Change {
            range_in_original: c["range_in_original"]["start"].as_u64().unwrap() as usize
                ..c["range_in_original"]["end"].as_u64().unwrap() as usize,
            removed: c["removed"].as_str().unwrap().to_string(),
            inserted: c["inserted"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(apply(text, &changes, |_| true), reply);
    assert_eq!(apply(text, &changes, |_| false), text);
}
