//! The Android manifest asks for no network: every network permission element it has is a
//! `tools:node="remove"` marker, and INTERNET's marker is there. A tiny dependency-free scan of
//! the XML (comments stripped, then each element's attributes), checked first against manifests
//! it must reject.

use std::collections::BTreeMap;

const MANIFEST: &str = include_str!("../android/AndroidManifest.xml");

const NETWORK_PERMISSIONS: [&str; 3] = [
    "android.permission.INTERNET",
    "android.permission.ACCESS_NETWORK_STATE",
    "android.permission.CHANGE_NETWORK_STATE",
];

fn strip_comments(xml: &str) -> String {
    let mut out = String::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        rest = match rest[start..].find("-->") {
            Some(end) => &rest[start + end + 3..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// Every element named `tag` (exactly, so `uses-permission-sdk-23` is its own tag), as its
/// attribute map.
fn elements(xml: &str, tag: &str) -> Vec<BTreeMap<String, String>> {
    let xml = strip_comments(xml);
    let open = format!("<{tag}");
    let mut found = Vec::new();
    let mut rest = xml.as_str();
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let end = after.find('>').expect("unterminated element");
        let body = &after[..end];
        rest = &after[end..];
        if !body.starts_with(|c: char| c.is_whitespace() || c == '/') && !body.is_empty() {
            continue; // a longer tag name that starts with `tag`
        }
        found.push(attributes(body.trim_end_matches('/')));
    }
    found
}

fn attributes(body: &str) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    let mut rest = body.trim();
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().to_string();
        let value_part = rest[eq + 1..].trim_start();
        let quote = value_part
            .chars()
            .next()
            .expect("attribute without a value");
        assert!(quote == '"' || quote == '\'', "unquoted attribute {name}");
        let close = value_part[1..].find(quote).expect("unterminated attribute");
        attrs.insert(name, value_part[1..1 + close].to_string());
        rest = value_part[close + 2..].trim_start();
    }
    attrs
}

/// The rule: a network permission may appear only as a removal marker, and INTERNET's marker
/// must be present. Returns what is wrong.
fn network_problems(xml: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut internet_removed = false;
    for tag in ["uses-permission", "uses-permission-sdk-23"] {
        for attrs in elements(xml, tag) {
            let name = attrs.get("android:name").cloned().unwrap_or_default();
            let removed = attrs.get("tools:node").map(String::as_str) == Some("remove");
            if NETWORK_PERMISSIONS.contains(&name.as_str()) && !removed {
                problems.push(format!("<{tag}> requests {name}"));
            }
            if name == "android.permission.INTERNET" && removed {
                internet_removed = true;
            }
        }
    }
    if !internet_removed {
        problems.push("no tools:node=\"remove\" marker for INTERNET".into());
    }
    if !xml.contains("xmlns:tools=\"http://schemas.android.com/tools\"") {
        problems.push("the tools namespace is not declared".into());
    }
    problems
}

#[test]
fn the_manifest_requests_no_network_permission() {
    let problems = network_problems(MANIFEST);
    assert!(problems.is_empty(), "{problems:?}");
    let perms = elements(MANIFEST, "uses-permission");
    for name in [
        "android.permission.INTERNET",
        "android.permission.ACCESS_NETWORK_STATE",
    ] {
        assert!(
            perms
                .iter()
                .any(|a| a.get("android:name").map(String::as_str) == Some(name)
                    && a.get("tools:node").map(String::as_str) == Some("remove")),
            "no remove marker for {name}"
        );
    }
}

#[test]
fn the_manifest_starts_the_native_library() {
    let manifest = elements(MANIFEST, "manifest");
    assert_eq!(manifest.len(), 1);
    assert_eq!(manifest[0]["package"], "app.kostant");
    let activity = elements(MANIFEST, "activity");
    assert_eq!(activity.len(), 1);
    assert_eq!(activity[0]["android:name"], "android.app.NativeActivity");
    let lib = elements(MANIFEST, "meta-data")
        .into_iter()
        .find(|m| m["android:name"] == "android.app.lib_name")
        .expect("no android.app.lib_name");
    // The cdylib of the app crate: libkostant_app.so.
    assert_eq!(lib["android:value"], "kostant_app");
}

#[test]
fn the_check_rejects_network_permissions() {
    let head = r#"<manifest xmlns:android="http://schemas.android.com/apk/res/android" xmlns:tools="http://schemas.android.com/tools">"#;
    let marker =
        r#"<uses-permission android:name="android.permission.INTERNET" tools:node="remove"/>"#;
    let ok = format!("{head}{marker}</manifest>");
    assert!(
        network_problems(&ok).is_empty(),
        "{:?}",
        network_problems(&ok)
    );

    let plain = format!(
        r#"{head}<uses-permission android:name="android.permission.INTERNET" /></manifest>"#
    );
    assert_eq!(
        network_problems(&plain).len(),
        2,
        "{:?}",
        network_problems(&plain)
    );

    let state = format!(
        r#"{head}{marker}<uses-permission android:name='android.permission.ACCESS_NETWORK_STATE'/></manifest>"#
    );
    assert_eq!(
        network_problems(&state),
        ["<uses-permission> requests android.permission.ACCESS_NETWORK_STATE"]
    );

    let sdk23 = format!(
        r#"{head}{marker}<uses-permission-sdk-23 android:name="android.permission.CHANGE_NETWORK_STATE"/></manifest>"#
    );
    assert_eq!(network_problems(&sdk23).len(), 1);

    // A permission hidden in a comment is not a request; a missing marker is still reported.
    let commented = format!(
        r#"{head}<!-- <uses-permission android:name="android.permission.INTERNET" tools:node="remove"/> --></manifest>"#
    );
    assert_eq!(
        network_problems(&commented),
        ["no tools:node=\"remove\" marker for INTERNET"]
    );
}
