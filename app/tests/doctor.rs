//! `kostant doctor` on the real default model: the binary denies itself the network at start-up
//! (EPERM on loopback TCP and UDP, v4 and v6), local sockets and files still work, and the
//! model's sha256 matches the manifest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The real default model (`scripts/setup.sh` installs it; the test fails without it).
fn model() -> PathBuf {
    kostant_engine::testing::real_model_path()
}

/// A fresh directory under the system temp dir for one test.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kostant-doctor-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kostant doctor --json` with this model and key directory (never the user's own).
fn doctor(model: &Path, key_dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(["doctor", "--json"])
        .env("KOSTANT_MODEL", model)
        .env("KOSTANT_KEY_DIR", key_dir)
        .env_remove("KOSTANT_MODELS_DIR")
        .output()
        .expect("kostant starts")
}

fn report(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name:?} check in {report}"))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn doctor_finds_the_network_denied_and_the_model_verified() {
    let keys = temp_dir("keys");
    let out = doctor(&model(), &keys);
    std::fs::remove_dir_all(&keys).unwrap();
    let report = report(&out);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["ok"], true, "{report}");

    let guard = check(&report, "netguard");
    assert_eq!(guard["ok"], true, "{guard}");
    assert!(
        guard["detail"].as_str().unwrap().starts_with("enforced"),
        "{guard}"
    );

    let net = check(&report, "network denied");
    assert_eq!(net["ok"], true, "{net}");
    assert_eq!(net["required"], true, "{net}");
    let detail = net["detail"].as_str().unwrap();
    for what in ["tcp 127.0.0.1", "udp 127.0.0.1", "tcp [::1]", "udp [::1]"] {
        assert!(detail.contains(&format!("{what}: EPERM")), "{detail}");
    }

    let local = check(&report, "local io");
    assert_eq!(local["ok"], true, "{local}");
    let detail = local["detail"].as_str().unwrap();
    assert!(
        detail.contains("unix datagram pair") && detail.contains("temp file"),
        "{detail}"
    );

    let model = check(&report, "model");
    assert_eq!(model["ok"], true, "{model}");
    let detail = model["detail"].as_str().unwrap();
    assert!(detail.contains("match the manifest"), "{detail}");
    assert!(detail.contains("smollm2"), "{detail}");

    assert_eq!(check(&report, "cpu")["ok"], true);
    // "N by default: the performance cores of M usable", 1 <= N <= M.
    let threads = check(&report, "threads")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    let numbers: Vec<usize> = threads
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        matches!(numbers[..], [n, m] if 1 <= n && n <= m),
        "{threads}"
    );
    let keys = check(&report, "key storage");
    assert_eq!(keys["ok"], true, "{keys}");
    assert!(
        keys["detail"].as_str().unwrap().contains("no key yet"),
        "{keys}"
    );
}

/// A model file that is named like the manifest's but has other bytes fails the check, and
/// the run exits non-zero.
#[test]
fn doctor_fails_on_a_model_that_does_not_match_the_manifest() {
    let dir = temp_dir("fake-model");
    let fake = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::fs::write(&fake, b"GGUF not really").unwrap();
    let out = doctor(&fake, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let report = report(&out);
    assert!(!out.status.success(), "{report}");
    assert_eq!(report["ok"], false, "{report}");
    let model = check(&report, "model");
    assert_eq!(model["ok"], false, "{model}");
    assert!(
        model["detail"]
            .as_str()
            .unwrap()
            .contains("does not match the manifest"),
        "{model}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("required checks failed: model"), "{stderr}");
}

/// A history key others can read fails the run.
#[cfg(unix)]
#[test]
fn doctor_fails_on_a_key_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let keys = temp_dir("open-key");
    let key = keys.join("history.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = doctor(&model(), &keys);
    std::fs::remove_dir_all(&keys).unwrap();
    let report = report(&out);
    assert!(!out.status.success(), "{report}");
    let check = check(&report, "key storage");
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("readable by other users"),
        "{check}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("required checks failed: key storage"),
        "{stderr}"
    );
}

/// `kostant doctor --json`'s privacy facts: the same network status as the netguard check, no
/// permissions, desktop-only protections said to be not applicable, and the key protection
/// read from the history file itself (none yet, then the file key).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn doctor_json_reports_the_privacy_facts_the_settings_screen_shows() {
    let root = temp_dir("privacy");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kostant"))
            .args(args)
            .env("KOSTANT_MODEL", model())
            .env("KOSTANT_KEY_DIR", root.join("keys"))
            .env("KOSTANT_DATA_DIR", root.join("data"))
            .env_remove("KOSTANT_MODELS_DIR")
            .env_remove("KOSTANT_PASSPHRASE_FILE")
            .output()
            .expect("kostant starts")
    };
    let first = report(&run(&["doctor", "--json"]));
    let p = &first["privacy"];
    assert_eq!(p["network_denied"], true, "{p}");
    assert_eq!(check(&first, "netguard")["ok"], p["network_denied"]);
    assert_eq!(p["permissions"], serde_json::json!([]));
    assert_eq!(p["backups"]["state"], "not_applicable");
    assert_eq!(p["keyboard_learning"]["state"], "not_applicable");
    assert_eq!(p["key_protection"], "none", "{p}");
    assert!(!root.join("data").exists(), "looking creates nothing");

    assert!(run(&["history", "list"]).status.success());
    let second = report(&run(&["doctor", "--json"]));
    let p = &second["privacy"];
    assert_eq!(p["key_protection"], "file", "{p}");
    assert_eq!(p["stored"]["chats_bytes"], 0, "{p}");
    assert_eq!(p["temporary_chat"], serde_json::Value::Null);
    let text = String::from_utf8_lossy(&run(&["doctor"]).stdout).into_owned();
    assert!(
        text.contains("privacy") && text.contains("Permissions"),
        "{text}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
