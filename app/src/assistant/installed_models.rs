//! The model files the app can offer: the `.gguf` files of the models directory, each with
//! what it is, or why the app cannot run it: a file the engine does not load (with the
//! engine's reason), or a model the built-in guard cannot screen (its head reads one model's
//! hidden states, and the app never answers unscreened). Settings' model picker lists them;
//! `kostant models` describes the same files in more detail.

use std::path::{Path, PathBuf};

use kostant_engine::gguf::Gguf;
use kostant_engine::Model;
use kostant_safety::head::HeadInfo;

pub use super::model_dirs::search_dirs;

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

/// The directory the picker lists: the given model's own directory (where the app found
/// it), else the first of [`search_dirs`] that exists.
pub fn models_dir(current: Option<&Path>) -> Option<PathBuf> {
    current
        .and_then(Path::parent)
        .filter(|d| d.is_dir())
        .map(Path::to_path_buf)
        .or_else(|| search_dirs().into_iter().find(|d| d.is_dir()))
}

/// The `.gguf` files of `dir`, by name, but sentence encoders (the documents' embedder is no
/// chat model); an unreadable directory lists nothing.
pub fn list(dir: &Path) -> Vec<InstalledModel> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "gguf"))
                .filter(|p| !is_sentence_encoder(p))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    // A damaged head screens nothing: then no model can be used.
    let guard = super::guard_model::builtin_head().ok();
    files
        .into_iter()
        .map(|p| describe(&p, guard.as_ref().map(|h| &h.info)))
        .collect()
}

/// Whether the GGUF at `path` says it is a BERT-family sentence encoder.
fn is_sentence_encoder(path: &Path) -> bool {
    Gguf::read_metadata(path)
        .is_ok_and(|m| m.get("general.architecture").and_then(|v| v.as_str()) == Some("bert"))
}

/// What `path` is, or why the app cannot run it (as the engine would refuse to load it, but
/// without loading it: no weight is read or repacked); `guard` is the built-in guard head's.
pub fn describe(path: &Path, guard: Option<&HeadInfo>) -> InstalledModel {
    describe_with(path, guard, &search_dirs())
}

/// [`describe`], looking for the guard's own model beside `path` and then in `dirs`.
pub fn describe_with(path: &Path, guard: Option<&HeadInfo>, dirs: &[PathBuf]) -> InstalledModel {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let size_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let inspected = Gguf::open(path)
        .and_then(|g| Model::inspect(&g))
        .map_err(|e| e.to_string())
        .and_then(|info| match guard {
            Some(head) if head.reads(&info.name, info.n_embd) => Ok((info, None)),
            Some(head) => match super::guard_model::guard_model_path_in(path, dirs) {
                Some(_) => Ok((info, Some(super::guard_model::guard_model_name(head)))),
                None => Err(super::guard_model::missing_guard_model(head)),
            },
            None => Err("the built-in safety guard is damaged".into()),
        });
    let (detail, supported) = match inspected {
        Ok((info, guard_reads_with)) => {
            let mut detail = format!(
                "{} · {} · {}",
                info.name, info.architecture, info.quantization
            );
            if let Some(other) = guard_reads_with {
                detail.push_str(&format!(" · the safety guard reads with {other}"));
            }
            (detail, true)
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
        let default_file = real.file_name().unwrap();
        std::fs::copy(&real, dir.join(default_file)).unwrap();
        // Gemma 3's states are not the head's, so the guard reads with the default model,
        // which the directory has too.
        std::os::unix::fs::symlink(
            kostant_engine::testing::gemma3_model_path(),
            dir.join("c-gemma.gguf"),
        )
        .unwrap();
        let models = list(&dir);
        // Without the default model beside it (or in a models directory), Gemma cannot be
        // screened, so it is not offered.
        std::fs::remove_file(dir.join(default_file)).unwrap();
        let guard = crate::assistant::guard_model::builtin_head().unwrap().info;
        let alone = describe_with(&dir.join("c-gemma.gguf"), Some(&guard), &[]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            models.iter().map(|m| m.file.as_str()).collect::<Vec<_>>(),
            [
                default_file.to_str().unwrap(),
                "b-broken.gguf",
                "c-gemma.gguf"
            ]
        );
        assert!(models[2].supported, "{}", models[2].detail);
        assert!(
            models[2]
                .detail
                .ends_with(" · the safety guard reads with SmolLM2 135M Instruct"),
            "{}",
            models[2].detail
        );
        assert!(!alone.supported, "{}", alone.detail);
        assert!(
            alone.detail.contains("that model is not installed"),
            "{}",
            alone.detail
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
