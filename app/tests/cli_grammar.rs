//! `--grammar-file` and `--json-schema` end to end: a malformed file is refused before any model
//! loads (its name, line and column in the message), the two flags exclude each other, and on
//! the real default model `complete` gives llama.cpp's constrained text and `chat` a reply that
//! parses as the schema's JSON, through the guard.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("engine/tests/fixtures/grammars").join(name);
    path.to_str().unwrap().to_string()
}

fn scratch(name: &str, text: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-grammar");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn kostant(model: &str, args: &[&str]) -> Output {
    let data = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-grammar-data");
    Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(args)
        .env("KOSTANT_MODEL", model)
        .env_remove("KOSTANT_MODELS_DIR")
        .env("KOSTANT_DATA_DIR", data.join("data"))
        .env("KOSTANT_KEY_DIR", data.join("keys"))
        .output()
        .expect("kostant starts")
}

fn real_model() -> String {
    let p = kostant_engine::testing::real_model_path();
    p.to_str().unwrap().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_malformed_grammar_or_schema_is_refused_before_the_model_loads() {
    // No model at this path: the grammar's error must come first.
    let missing = "/nonexistent/model.gguf";
    let bad = scratch(
        "bad.gbnf",
        "root ::= item+\n# a comment\nitem ::= \"x\" [abc\n",
    );
    let o = kostant(
        missing,
        &["complete", "--prompt", "hi", "--grammar-file", &bad],
    );
    let err = stderr(&o);
    assert!(!o.status.success() && !err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!(
            "{bad}: grammar line 3, column 18: expected ']' to close the character class"
        )),
        "{err}"
    );
    let schema = scratch(
        "bad.json",
        "{\n  \"type\": \"object\",\n  \"properties\": {\"a\" {}}\n}\n",
    );
    let o = kostant(
        missing,
        &[
            "chat",
            "--no-history",
            "--prompt",
            "hi",
            "--json-schema",
            &schema,
        ],
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{schema}: json schema: line 3, column 22: expected ':'"
        )),
        "{err}"
    );
    let unsupported = scratch("format.json", r#"{"type": "string", "format": "email"}"#);
    let o = kostant(
        missing,
        &["complete", "--prompt", "hi", "--json-schema", &unsupported],
    );
    assert!(
        stderr(&o).contains("the keyword 'format' is not supported"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn grammar_file_and_json_schema_exclude_each_other() {
    let o = kostant(
        &real_model(),
        &[
            "complete",
            "--prompt",
            "hi",
            "--grammar-file",
            &fixture("date.gbnf"),
            "--json-schema",
            &fixture("person.schema.json"),
        ],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn constrained_completion_and_chat_on_the_real_model() {
    let model = real_model();
    // The same text as llama.cpp's (engine/tests/fixtures/grammar_golden.json).
    let o = kostant(
        &model,
        &[
            "complete",
            "--prompt",
            "The first human landing on the Moon, as a date in YYYY-MM-DD form:",
            "--grammar-file",
            &fixture("date.gbnf"),
            "--max-tokens",
            "48",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), " 2029-01-01\n");
    let o = kostant(
        &model,
        &[
            "chat",
            "--no-history",
            "--prompt",
            "Write a short profile of a software engineer named Ada.",
            "--json-schema",
            &fixture("person.schema.json"),
            "--temperature",
            "0",
            "--max-tokens",
            "200",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let done: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["verdict"], "answered", "{done}");
    let reply: serde_json::Value = serde_json::from_str(done["reply"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {done}"));
    assert!(
        reply["name"].is_string() && reply["age"].is_i64(),
        "{reply}"
    );
    assert!(
        done["guard"]["output_checks"].as_u64().unwrap() > 0,
        "{done}"
    );
}
