//! The model files the app can offer: the `.gguf` files of the models directory, each with
//! what it is, or why the app cannot run it: a file the engine does not load (with the
//! engine's reason), or a model the built-in guard cannot screen (its head reads one model's
//! hidden states, and the app never answers unscreened). Settings' model picker lists them;
//! `kostant models` describes the same files in more detail.

use std::path::{Path, PathBuf};

use kostant_engine::gguf::Gguf;
use kostant_engine::Model;
use kostant_safety::head::Head;

/// One `.gguf` file of the models directory.
#[derive(Clone, Debug, PartialEq)]
pub struct InstalledModel {
    pub path: PathBuf,
    pub file: String,
    pub size_bytes: u64,
    /// "SmolLM2 135M Instruct · llama · Q4_1", or the reason it does not run here.
    pub detail: String,
    pub supported: bool,
}

/// Directories searched for models, in order: `KOSTANT_MODELS_DIR`, ./models, and the
/// repository's models/ next to a `cargo build` binary (target/<profile>/kostant).
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("KOSTANT_MODELS_DIR") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from("models"));
    if let Ok(exe) = std::env::current_exe() {
        for up in exe.ancestors().skip(1).take(3) {
            dirs.push(up.join("models"));
        }
    }
    dirs
}

/// The directory the picker lists: the given model's own directory (where the app found
/// it), else the first of [`search_dirs`] that exists.
pub fn models_dir(current: Option<&Path>) -> Option<PathBuf> {
    current
        .and_then(Path::parent)
        .filter(|d| d.is_dir())
        .map(Path::to_path_buf)
        .or_else(|| search_dirs().into_iter().find(|d| d.is_dir()))
}

/// The `.gguf` files of `dir`, by name; an unreadable directory lists nothing.
pub fn list(dir: &Path) -> Vec<InstalledModel> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "gguf"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    // The backbone the guard head reads (name, width); a damaged head screens nothing.
    let guard = Head::from_bytes(kostant_assets::GUARD_HEAD)
        .ok()
        .map(|h| (h.info.model_name.clone(), h.info.n_embd));
    files
        .into_iter()
        .map(|p| describe(&p, guard.as_ref()))
        .collect()
}

/// What `path` is, or why the app cannot run it; `guard` is the (name, width) of the model the
/// guard head was trained on.
pub fn describe(path: &Path, guard: Option<&(String, usize)>) -> InstalledModel {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let size_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let loaded = Gguf::open(path).map_err(|e| e.to_string()).and_then(|g| {
        let name = g
            .get_str_opt("general.name")
            .ok()
            .flatten()
            .map(str::to_string);
        let arch = g
            .get_str_opt("general.architecture")
            .ok()
            .flatten()
            .map(str::to_string);
        let m = Model::from_gguf(g).map_err(|e| e.to_string())?;
        match guard {
            Some((backbone, width)) if *backbone == m.name() && *width == m.hparams.n_embd => {
                Ok((name, arch, m.quantization().to_string()))
            }
            Some((backbone, _)) => Err(format!(
                "the safety guard reads {backbone}'s states and cannot screen this model's replies"
            )),
            None => Err("the built-in safety guard is damaged".into()),
        }
    });
    let (detail, supported) = match loaded {
        Ok((name, arch, quant)) => {
            let parts: Vec<String> = [name, arch, Some(quant)].into_iter().flatten().collect();
            (parts.join(" · "), true)
        }
        Err(why) => (format!("cannot be used: {why}"), false),
    };
    InstalledModel {
        path: path.to_path_buf(),
        file,
        size_bytes,
        detail,
        supported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_gguf_files_by_name_and_says_why_one_does_not_run() {
        let dir = std::env::temp_dir().join(format!("kostant-installed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b-broken.gguf"), b"GGUF but not really").unwrap();
        std::fs::write(dir.join("notes.txt"), b"not a model").unwrap();
        let real = kostant_engine::testing::real_model_path();
        std::fs::copy(&real, dir.join("a-real.gguf")).unwrap();
        // Gemma 3 loads in the engine, but the guard was trained on SmolLM2's states.
        std::os::unix::fs::symlink(
            kostant_engine::testing::gemma3_model_path(),
            dir.join("c-gemma.gguf"),
        )
        .unwrap();
        let models = list(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            models.iter().map(|m| m.file.as_str()).collect::<Vec<_>>(),
            ["a-real.gguf", "b-broken.gguf", "c-gemma.gguf"]
        );
        assert!(!models[2].supported);
        assert!(
            models[2]
                .detail
                .contains("cannot screen this model's replies"),
            "{}",
            models[2].detail
        );
        assert!(models[0].supported, "{}", models[0].detail);
        assert!(models[0].detail.contains("Q4_1"), "{}", models[0].detail);
        assert!(!models[1].supported);
        assert!(
            models[1].detail.starts_with("cannot be used: "),
            "{}",
            models[1].detail
        );
        assert_eq!(models[1].size_bytes, 19);
    }
}
