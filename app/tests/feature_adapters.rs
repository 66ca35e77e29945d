//! The shipped feature adapters on the real default model (issue 21): each loads, leaves the
//! guard riding on the adapted pass, and is what `kostant chat --feature` runs; the proofread
//! adapter corrects sentences the prompt alone does not; on another model a feature runs on its
//! prompt alone and says why; `kostant adapter list` and `adapter eval` report them.
//! The sentences here were written for this test and are in none of the adapters' splits.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kostant_app::assistant::feature_adapters::FeatureAdapters;
use kostant_app::features::Feature;
use kostant_engine::testing::{gemma3_model_path, real_model_path};
use kostant_engine::{Model, Session};
use kostant_safety::head::Head;
use kostant_safety::Guard;

fn kostant(model: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(args)
        .env("KOSTANT_MODEL", model)
        .env_remove("KOSTANT_MODELS_DIR")
        .output()
        .expect("kostant starts");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    out
}

/// The final "done" line of `chat --json`.
fn done(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("a done line");
    serde_json::from_str(last).expect("JSON")
}

/// `chat` on `text`, greedy, as JSON lines, with `extra` arguments.
fn chat(model: &Path, text: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "chat",
        "--no-history",
        "--json",
        "--temperature",
        "0",
        "--max-tokens",
        "40",
        "--prompt",
        text,
    ];
    args.extend_from_slice(extra);
    kostant(model, &args)
}

/// `chat --feature proofread` on `text`.
fn proofread(model: &Path, text: &str, extra: &[&str]) -> Output {
    chat(model, text, &[&["--feature", "proofread"], extra].concat())
}

#[test]
fn every_shipped_adapter_loads_above_the_guards_taps_so_the_guard_rides() {
    let model = Model::load(&real_model_path()).unwrap();
    let head = Head::from_bytes(kostant_assets::GUARD_HEAD).unwrap();
    let guard = Guard::new(model.clone(), head).unwrap();
    let mut adapters = FeatureAdapters::new(model.clone());
    for f in [
        Feature::Chat,
        Feature::Summarize,
        Feature::Proofread,
        Feature::Reply,
        Feature::Rewrite,
    ] {
        let active = adapters.get(f).unwrap().unwrap();
        assert_eq!(active.adapter.name(), f.id());
        assert_eq!(active.adapter.rank(), 16);
        assert_eq!(active.adapter.targets().len(), 9 * 7, "{f:?}");
        let mut session = Session::new(model.clone(), 256).unwrap();
        session.set_adapter(Some(active)).unwrap();
        assert!(guard.rides_on(&session), "{f:?}: the guard must ride");
    }
}

#[test]
fn proofread_runs_its_adapter_and_corrects_what_the_prompt_alone_does_not() {
    let model = real_model_path();
    let mut missed_without = Vec::new();
    for (text, fixed) in [
        (
            "We was planning to visit are grandparents next weekend.",
            "We were planning to visit our grandparents next weekend.",
        ),
        (
            "My brother dont like coffe.",
            "My brother doesn't like coffee.",
        ),
    ] {
        let with = done(&proofread(&model, text, &[]));
        assert_eq!(with["feature"], "proofread");
        assert_eq!(with["adapter"], "proofread");
        assert_eq!(with["reply"], fixed, "{with}");
        let without = done(&proofread(&model, text, &["--no-adapter"]));
        assert!(without["adapter"].is_null(), "{without}");
        if without["reply"] != fixed {
            missed_without.push(without);
        }
    }
    // The prompt alone gets the first right (the repetition penalty does not count the user's
    // words); the adapter still fixes what it does not.
    assert!(
        !missed_without.is_empty(),
        "the prompt alone fixed every sentence: the adapter's part is untested"
    );
}

#[test]
fn plain_chat_runs_the_chats_adapter_and_a_prompt_of_ones_own_does_not() {
    let model = real_model_path();
    let adapter = |extra: &[&str]| {
        done(&chat(
            &model,
            "You useless thing, how many minutes are in an hour?",
            extra,
        ))["adapter"]
            .clone()
    };
    assert_eq!(adapter(&[]), "chat");
    assert!(adapter(&["--no-adapter"]).is_null());
    // The chat's adapter learned under Kostant's system prompt, not under the user's.
    assert!(adapter(&["--system", "You answer in one short sentence."]).is_null());
}

#[test]
fn the_apps_responder_runs_the_chats_adapter_on_a_plain_chat() {
    use kostant_app::assistant::responder::{
        ContextOrigin, GenerationSettings, GuardedResponder, ReplyEvent, ReplyRequest, Responder,
    };
    use kostant_engine::{CancelHandle, Message, Role};
    let (mut r, _) = GuardedResponder::load(&real_model_path(), 0).unwrap();
    let req = ReplyRequest {
        system: Feature::Chat.system_prompt(),
        feature: Feature::Chat,
        shape: None,
        turns: vec![Message::new(
            Role::User,
            "You useless thing, how many minutes are in an hour?",
        )],
        settings: GenerationSettings {
            temperature: 0.0,
            max_tokens: 8,
            ..GenerationSettings::default()
        },
        conversation: None,
        origin: ContextOrigin::Switched(None),
    };
    let mut adapter = None;
    r.respond(&req, &CancelHandle::new(), &mut |ev| match ev {
        ReplyEvent::Done(o) => adapter = Some(o.stats.expect("a generation").adapter),
        ReplyEvent::Failed(e) => panic!("{e}"),
        _ => {}
    });
    assert_eq!(adapter, Some(Some("chat".to_string())));
}

#[test]
fn a_feature_on_another_model_runs_on_its_prompt_alone_and_says_why() {
    let out = proofread(&gemma3_model_path(), "My brother dont like coffe.", &[]);
    let d = done(&out);
    assert!(d["adapter"].is_null(), "{d}");
    assert_eq!(d["feature"], "proofread");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("proofread: its adapter was trained on") && err.contains("prompt alone"),
        "{err}"
    );
}

#[test]
fn adapter_list_and_eval_report_the_shipped_adapters() {
    let model = real_model_path();
    let out = kostant(&model, &["adapter", "list", "--json"]);
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let features: Vec<&str> = rows
        .iter()
        .map(|r| r["feature"].as_str().unwrap())
        .collect();
    assert_eq!(
        features,
        ["chat", "summarize", "reply", "rewrite", "proofread"]
    );
    for r in &rows {
        assert_eq!(r["applies"], true, "{r}");
        assert_eq!(r["layers"], serde_json::json!([21, 29]), "{r}");
        assert_eq!(r["sha256"].as_str().unwrap().len(), 64);
    }

    // Two dev examples, with and without the adapter, end to end.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("adapter-eval");
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.md");
    // Proofread's dev split, `limit` examples of at most `max_tokens`, with `extra` arguments:
    // the JSON report.
    let eval_dev = |limit: &str, max_tokens: &str, extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "adapter",
            "eval",
            "--feature",
            "proofread",
            "--split",
            "dev",
            "--limit",
            limit,
            "--max-tokens",
            max_tokens,
            "--out",
            report.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = kostant(&model, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(&std::fs::read_to_string(report.with_extension("json")).unwrap())
            .unwrap()
    };
    let json = eval_dev("2", "48", &[]);
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(md.contains("| proofread | 2 | exact match |"), "{md}");
    let row = &json["rows"][0];
    assert_eq!(row["adapted"]["adapter"], "proofread");
    assert_eq!(row["base"]["metric"]["n"], 2);
    // A candidate file in place of the shipped adapter: the report names it.
    let candidate =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/adapters/rewrite/rewrite.gguf");
    let json = eval_dev("1", "8", &["--adapter", candidate.to_str().unwrap()]);
    assert_eq!(json["rows"][0]["adapted"]["adapter"], "rewrite");
    let out = kostant(
        &model,
        &["adapter", "eval", "--adapter", candidate.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("name it with --feature"));
    let out = kostant(&model, &["adapter", "eval", "--feature", "chat"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("summarize, proofread, reply and rewrite")
    );
}
