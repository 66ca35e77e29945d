//! The crate graph points one way (ARCHITECTURE.md): app -> everything; evals -> safety,
//! engine, documents; safety -> engine, kernels (the SIMD dot product for its head); engine ->
//! kernels; kernels, platform and documents -> none of ours. And no crate that talks to the
//! network is in it.
//!
//! Both rules read the workspace's Cargo.lock, not `cargo metadata`. The lock file is every
//! platform's graph at once (an Android-only network crate fails here too), and reading it
//! needs no cargo cache: `cargo metadata --offline` wants the manifest of every crate for every
//! platform, which a fresh Linux machine never downloads (issue 20: the README's test command
//! failed on a cold cache at `anstyle-wincon`, a Windows-only crate).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One `[[package]]` of a lock file: its name and the names of the packages it depends on.
struct Package {
    name: String,
    deps: Vec<String>,
}

/// Reads the `[[package]]` tables of a Cargo.lock (format v3/v4). A dependency entry is
/// `"name"`, `"name version"` or `"name version (source)"`; only the name matters here.
fn parse_lock(text: &str) -> Vec<Package> {
    let mut packages: Vec<Package> = Vec::new();
    let mut in_deps = false;
    for line in text.lines().map(str::trim) {
        if line == "[[package]]" {
            packages.push(Package {
                name: String::new(),
                deps: Vec::new(),
            });
            in_deps = false;
        } else if let Some(pkg) = packages.last_mut() {
            if in_deps {
                if line == "]" {
                    in_deps = false;
                } else if let Some(dep) = line.trim_end_matches(',').strip_prefix('"') {
                    let dep = dep.trim_end_matches('"');
                    pkg.deps
                        .push(dep.split(' ').next().unwrap_or(dep).to_string());
                }
            } else if let Some(name) = line.strip_prefix("name = \"") {
                pkg.name = name.trim_end_matches('"').to_string();
            } else if line == "dependencies = [" {
                in_deps = true;
            }
        }
    }
    packages
}

fn read_lock(path: &Path) -> Vec<Package> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let packages = parse_lock(&text);
    assert!(
        packages.iter().all(|p| !p.name.is_empty()),
        "{}: a [[package]] without a name",
        path.display()
    );
    packages
}

fn workspace_lock() -> Vec<Package> {
    read_lock(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"))
}

const OURS: [&str; 8] = [
    "kostant",
    "kostant-kernels",
    "kostant-engine",
    "kostant-safety",
    "kostant-evals",
    "kostant-platform",
    "kostant-assets",
    "kostant-documents",
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
            "kostant-documents",
        ],
        "kostant-evals" => &["kostant-safety", "kostant-engine", "kostant-documents"],
        "kostant-safety" => &["kostant-engine", "kostant-kernels"],
        "kostant-engine" => &["kostant-kernels"],
        _ => &[],
    }
}

#[test]
fn workspace_edges_point_one_way() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pkg in workspace_lock() {
        if !OURS.contains(&pkg.name.as_str()) {
            continue;
        }
        for dep in &pkg.deps {
            // A crate's dev-dependency on itself only turns on its own test feature (the
            // engine's `testing`): not an edge between crates.
            if OURS.contains(&dep.as_str()) && *dep != pkg.name {
                edges
                    .entry(pkg.name.clone())
                    .or_default()
                    .insert(dep.clone());
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
    // The rule must actually see the graph: the engine uses the kernels, the app everything.
    assert!(edges["kostant-engine"].contains("kostant-kernels"));
    assert_eq!(edges["kostant"].len(), 7, "{:?}", edges["kostant"]);
}

/// Crates whose job is the network: they open internet sockets, or speak a protocol that only
/// runs over one. Kostant answers on the device and downloads nothing at run time, so the
/// list of these allowed in the graph is [`NETWORK_ALLOWED`], and it is empty.
const NETWORK: &[(&str, &str)] = &[
    ("hyper", "HTTP client and server"),
    ("reqwest", "HTTP client"),
    ("ureq", "HTTP client"),
    ("curl", "libcurl bindings"),
    ("curl-sys", "libcurl bindings"),
    ("isahc", "HTTP client over libcurl"),
    ("attohttpc", "HTTP client"),
    ("surf", "HTTP client"),
    ("h2", "HTTP/2"),
    ("h3", "HTTP/3"),
    ("quinn", "QUIC"),
    ("hf-hub", "downloads models from Hugging Face"),
    ("tungstenite", "WebSocket"),
    ("tokio-tungstenite", "WebSocket"),
    ("native-tls", "TLS, which only runs over a connection"),
    ("rustls", "TLS, which only runs over a connection"),
    ("openssl", "TLS, which only runs over a connection"),
    ("trust-dns-resolver", "DNS"),
    ("hickory-resolver", "DNS"),
    ("socket2", "builds raw sockets of any family"),
    ("mio", "non-blocking TCP and UDP (tokio's `net` runs on it)"),
    ("async-net", "async TCP and UDP"),
];

/// Crates of [`NETWORK`] allowed in the graph anyway, each with the reason. None.
const NETWORK_ALLOWED: &[(&str, &str)] = &[];

/// Crates in the graph that open sockets, though not to the network: the desktop's own
/// servers on this machine, over Unix-domain sockets. Listed so a reader of this test sees
/// every socket in the app; each must still be in the lock file (a stale entry fails). On Linux
/// netguard's filter refuses every socket family but AF_UNIX (ARCHITECTURE.md), so an address
/// that points off the machine (DISPLAY=host:0, a `tcp:` D-Bus address) fails to connect.
const LOCAL_SOCKETS: &[(&str, &str)] = &[
    (
        "zbus",
        "D-Bus to the session bus; Slint's winit backend reads the desktop's colour scheme, \
         accent and font settings from the XDG portal (Linux and BSD only)",
    ),
    (
        "async-io",
        "the reactor zbus runs on (Slint picks zbus's async-io feature)",
    ),
    (
        "x11rb",
        "the X server's socket (winit's X11 backend, arboard's clipboard)",
    ),
    ("wayland-backend", "the Wayland compositor's socket (winit)"),
    (
        "wl-clipboard-rs",
        "the clipboard through the Wayland compositor (arboard)",
    ),
];

/// Crates in the graph that hand something to another program, which may then use the
/// network outside netguard's filter. Each must still be in the lock file.
const OTHER_PROGRAMS: &[(&str, &str)] = &[(
    "webbrowser",
    "opens a URL in the user's browser. Slint's winit backend depends on it with no feature to \
     turn it off; its one caller is Slint's `Platform.open-url`, which our UI reaches only \
     through the AboutSlint badge on the Settings screen (the attribution Slint's royalty-free \
     licence asks for): a click on it asks the desktop to open https://slint.dev",
)];

/// The names of `packages` that are on the [`NETWORK`] list and not allowed, sorted.
fn network_crates(packages: &[Package]) -> Vec<String> {
    let allowed: BTreeSet<&str> = NETWORK_ALLOWED.iter().map(|(name, _)| *name).collect();
    let found: BTreeSet<String> = packages
        .iter()
        .map(|p| p.name.as_str())
        .filter(|name| NETWORK.iter().any(|(n, _)| n == name) && !allowed.contains(name))
        .map(str::to_string)
        .collect();
    found.into_iter().collect()
}

#[test]
fn no_networking_crate_in_the_graph() {
    let packages = workspace_lock();
    // The rule must see the whole graph, not an empty or half-read file.
    assert!(packages.len() > 100, "{} packages", packages.len());
    assert!(packages.iter().any(|p| p.name == "kostant"));
    let found = network_crates(&packages);
    assert!(
        found.is_empty(),
        "networking crates in the dependency graph: {found:?}"
    );
}

#[test]
fn the_network_rule_catches_a_planted_http_client() {
    // A lock file of an app that pulls in hyper through reqwest: the same check must name
    // both, and nothing else.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/network.Cargo.lock");
    let found = network_crates(&read_lock(&fixture));
    assert_eq!(found, ["hyper", "reqwest"]);
}

#[test]
fn every_socket_and_hand_off_crate_listed_is_in_the_graph() {
    let names: BTreeSet<String> = workspace_lock().into_iter().map(|p| p.name).collect();
    for (name, why) in LOCAL_SOCKETS.iter().chain(OTHER_PROGRAMS) {
        assert!(
            names.contains(*name),
            "{name} is listed here ({why}) but is no longer in Cargo.lock: take it off the list"
        );
    }
}
