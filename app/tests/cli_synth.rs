//! `kostant synth` end to end at the tiny shape: the file it writes loads and runs under
//! `kostant bench` (a valid GGUF, tokenizer and all), and a memory budget below the planned
//! footprint is refused with the numbers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kostant-synth-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn kostant(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kostant"))
        .args(args)
        .env_remove("KOSTANT_MODEL")
        .env_remove("KOSTANT_MEMORY_BUDGET_MB")
        .output()
        .expect("kostant starts")
}

fn synth(dir: &Path, quant: &str) -> PathBuf {
    let out = dir.join(format!("tiny-{quant}.gguf"));
    let o = kostant(&[
        "synth",
        "--shape",
        "tiny",
        "--quant",
        quant,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "synth failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn a_synthetic_model_loads_and_runs_for_every_quant() {
    let dir = temp_dir("run");
    for quant in ["Q4_0", "Q4_1", "Q4_K"] {
        let model = synth(&dir, quant);
        let o = kostant(&[
            "bench",
            "--model",
            model.to_str().unwrap(),
            "--threads",
            "1",
            "--ctx",
            "64",
            "--prompt-tokens",
            "8",
            "--gen-tokens",
            "4",
            "--repetitions",
            "1",
            "--json",
        ]);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "bench failed on {quant}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(report["quantization"], quant);
        assert_eq!(report["n_ctx"], 64);
        assert!(report["decode_tok_s"].as_f64().unwrap() > 0.0);
        assert!(report["planned_mb"].as_f64().unwrap() > 0.0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_model_over_the_memory_budget_is_refused() {
    let dir = temp_dir("budget");
    let model = synth(&dir, "Q4_0");
    let o = kostant(&[
        "bench",
        "--model",
        model.to_str().unwrap(),
        "--ctx",
        "4096",
        "--memory-budget",
        "1",
    ]);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("memory budget is 1 MB"), "{stderr}");
    assert!(stderr.contains("kv cache"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--kv-type q8_0` reaches the session and the plan: the cache it reports is 34/64 of the f16
/// one (Q8_0 keeps 32 values in 34 bytes), the plan counts the same, and an unknown type is
/// refused by name.
#[test]
fn bench_reports_the_q8_0_kv_cache() {
    let dir = temp_dir("kv");
    let model = synth(&dir, "Q4_0");
    let bench = |kv: &str| {
        let o = kostant(&[
            "bench",
            "--model",
            model.to_str().unwrap(),
            "--threads",
            "1",
            "--ctx",
            "256",
            "--prompt-tokens",
            "8",
            "--gen-tokens",
            "4",
            "--repetitions",
            "1",
            "--kv-type",
            kv,
            "--json",
        ]);
        assert!(
            o.status.success(),
            "bench --kv-type {kv} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let (f16, q8) = (bench("f16"), bench("q8_0"));
    assert_eq!(f16["kv_type"], "f16");
    assert_eq!(q8["kv_type"], "q8_0");
    for key in ["kv_cache_mb", "planned_kv_mb"] {
        let (a, b) = (f16[key].as_f64().unwrap(), q8[key].as_f64().unwrap());
        assert!(a > 0.0, "{key}: {f16}");
        assert!(
            (b / a - 34.0 / 64.0).abs() < 1e-9,
            "{key}: q8_0 {b} MiB vs f16 {a} MiB"
        );
    }
    assert_eq!(q8["kv_cache_mb"], q8["planned_kv_mb"]);
    assert!(q8["decode_tok_s"].as_f64().unwrap() > 0.0);

    let o = kostant(&[
        "bench",
        "--model",
        model.to_str().unwrap(),
        "--kv-type",
        "q3_k",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("q3_k") && err.contains("f16, q8_0 or q4_0"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
