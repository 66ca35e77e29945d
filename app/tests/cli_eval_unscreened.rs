//! `kostant eval` keeps no unscreened text unless asked: on the real default model, with the
//! built-in guard head planted to withdraw every reply (message threshold 1, reply threshold
//! 0), the results hold the withdrawal notice and not the model's words; `--keep-unscreened`
//! adds them as `generated`. Suite runs (results.jsonl) and `--prompts` both.

use std::path::{Path, PathBuf};
use std::process::Command;

use kostant_safety::head::Head;

fn scratch() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-eval-unscreened-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// Runs `kostant eval ARGS` on the default model with the planted head; panics on failure.
fn eval(root: &Path, head: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_kostant"))
        .arg("eval")
        .args(args)
        .arg("--model")
        .arg(kostant_engine::testing::real_model_path())
        .arg("--guard-head")
        .arg(head)
        .arg("--suites-dir")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/evals"))
        .args(["--max-tokens", "12", "--no-history"])
        .env("KOSTANT_DATA_DIR", root.join("data"))
        .env("KOSTANT_KEY_DIR", root.join("keys"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn rows(p: &Path) -> (String, Vec<serde_json::Value>) {
    let text = std::fs::read_to_string(p).unwrap();
    let rows = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (text, rows)
}

#[test]
fn withdrawn_text_is_written_only_with_keep_unscreened() {
    let root = scratch();
    let head_path = root.join("withdraw-all.head");
    let mut head = Head::from_bytes(kostant_assets::GUARD_HEAD).unwrap();
    head.info.threshold = 1.0;
    head.info.output_threshold = Some(0.0);
    head.save(&head_path).unwrap();
    let prompts = root.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"id\":\"p1\",\"prompt\":\"Tell me a story about a lighthouse keeper.\"}\n",
    )
    .unwrap();

    // The same greedy run twice: screened only, then with the model's words kept.
    let mut files = Vec::new();
    for (name, extra) in [("screened", None), ("kept", Some("--keep-unscreened"))] {
        let run = root.join(name);
        let mut suite = vec![
            "--suite",
            "benign_everyday",
            "--limit",
            "2",
            "--out",
            run.to_str().unwrap(),
        ];
        suite.extend(extra);
        eval(&root, &head_path, &suite);
        let out = root.join(format!("{name}-prompts.jsonl"));
        let mut listed = vec![
            "--prompts",
            prompts.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        listed.extend(extra);
        eval(&root, &head_path, &listed);
        files.push((rows(&run.join("results.jsonl")), rows(&out)));
    }
    let [(screened, screened_prompts), (kept, kept_prompts)] = &files[..] else {
        unreachable!()
    };
    assert_eq!(screened.1.len(), 2);
    assert_eq!(kept.1.len(), 2);

    let mut words = Vec::new();
    for (file, kept_file) in [(screened, kept), (screened_prompts, kept_prompts)] {
        for (s, k) in file.1.iter().zip(&kept_file.1) {
            // Withdrawn by the guard: the user saw the notice.
            assert_eq!(s["verdict"], "stopped", "{s}");
            assert_eq!(s["stopped_by"], "guard", "{s}");
            assert!(s.get("generated").is_none(), "{s}");
            assert_eq!(s["reply"], k["reply"], "the same notice both times");
            let raw = k["generated"].as_str().unwrap_or_else(|| panic!("{k}"));
            // Long enough that finding it in a file means it was written there.
            assert!(raw.trim().len() >= 20 && k["reply"] != raw, "{k}");
            words.push(raw.to_string());
        }
    }
    // The model's words (as JSON writes them) are in the kept files only.
    for raw in &words {
        let escaped = serde_json::to_string(raw).unwrap();
        let escaped = &escaped[1..escaped.len() - 1];
        assert!(
            kept.0.contains(escaped) || kept_prompts.0.contains(escaped),
            "control: {raw:?} in a kept file"
        );
        assert!(!screened.0.contains(escaped), "{raw:?} written unasked");
        assert!(
            !screened_prompts.0.contains(escaped),
            "{raw:?} written unasked"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
