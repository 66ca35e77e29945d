//! The crate graph points one way (ARCHITECTURE.md): app -> everything; evals -> safety,
//! engine; safety -> engine, kernels (the SIMD dot product for its head); engine -> kernels;
//! kernels and platform -> none of ours.
//! This test reads `cargo metadata` and fails on any edge that points the wrong way, and on
//! any networking crate anywhere in the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

const OURS: [&str; 7] = [
    "kostant",
    "kostant-kernels",
    "kostant-engine",
    "kostant-safety",
    "kostant-evals",
    "kostant-platform",
    "kostant-assets",
];

fn allowed(krate: &str) -> &'static [&'static str] {
    match krate {
        "kostant" => &[
            "kostant-kernels",
            "kostant-engine",
            "kostant-safety",
            "kostant-evals",
            "kostant-platform",
            "kostant-assets",
        ],
        "kostant-evals" => &["kostant-safety", "kostant-engine"],
        "kostant-safety" => &["kostant-engine", "kostant-kernels"],
        "kostant-engine" => &["kostant-kernels"],
        _ => &[],
    }
}

#[test]
fn workspace_edges_point_one_way() {
    let meta = metadata();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pkg in meta["packages"].as_array().unwrap() {
        let name = pkg["name"].as_str().unwrap();
        if !OURS.contains(&name) {
            continue;
        }
        for dep in pkg["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            if OURS.contains(&dep_name) {
                edges
                    .entry(name.into())
                    .or_default()
                    .insert(dep_name.into());
            }
        }
    }
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            if !allowed(from).contains(&to.as_str()) {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(wrong.is_empty(), "forbidden dependency edges: {wrong:?}");
    // The rule must actually see the graph: the engine uses the kernels.
    assert!(edges["kostant-engine"].contains("kostant-kernels"));
}

#[test]
fn no_networking_crate_in_the_graph() {
    const NETWORKING: [&str; 14] = [
        "reqwest",
        "hyper",
        "ureq",
        "curl",
        "isahc",
        "attohttpc",
        "surf",
        "h2",
        "hf-hub",
        "tungstenite",
        "tokio-tungstenite",
        "native-tls",
        "rustls",
        "socket2",
    ];
    let meta = metadata();
    let resolved: Vec<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    // Only crates actually resolved into the build count (metadata lists optional ones too),
    // so check the resolve graph's node ids.
    let nodes: BTreeSet<String> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    let found: Vec<&str> = resolved
        .into_iter()
        .filter(|name| NETWORKING.contains(name))
        .filter(|name| {
            nodes
                .iter()
                .any(|id| id.contains(&format!("#{name}@")) || id.contains(&format!("/{name}#")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "networking crates in the dependency graph: {found:?}"
    );
}
