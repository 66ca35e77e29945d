//! The Settings screen's choices kept between runs: a small JSON file in the data directory,
//! rewritten whole (a temporary file renamed over it) after each change. Nothing in it comes
//! from the user's text, so it is not sealed like the history.
//!
//! A conversation's saved context is only restored under the cache type it was saved with, so
//! the cache type must survive a restart (or every conversation would be read again).
//!
//! The file is read as untrusted: a missing, damaged or partly understood file gives the
//! defaults for what it does not say, and values go through the same clamps as the screen's
//! steppers.

use std::path::{Path, PathBuf};

use kostant_engine::KvType;
use serde::{Deserialize, Serialize};

use crate::controllers::settings::SettingsController;

const FILE: &str = "settings.json";

/// What is kept. Every field is optional: an older or damaged file says less, never wrong.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Preferences {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_tokens: Option<usize>,
    pub memory_budget_mb: Option<u32>,
    /// The cache type's name (`f16`, `q8_0`, `q4_0`).
    pub kv_type: Option<String>,
}

/// Why the preferences could not be written (the choices still apply for this run).
#[derive(Debug, thiserror::Error)]
#[error("Settings could not be saved for the next start ({path}): {source}")]
pub struct SaveError {
    path: PathBuf,
    source: std::io::Error,
}

impl Preferences {
    /// What `settings` holds now.
    pub fn of(settings: &SettingsController) -> Preferences {
        let g = settings.generation();
        Preferences {
            temperature: Some(g.temperature),
            top_p: Some(g.top_p),
            max_tokens: Some(g.max_tokens),
            memory_budget_mb: Some(settings.memory_budget_mb()),
            kv_type: Some(g.kv_type.name().to_string()),
        }
    }

    /// Applies what the file says to `settings`, through its clamps; a cache type this
    /// build does not know is left at the default.
    pub fn apply(&self, settings: &mut SettingsController) {
        if let Some(t) = self.temperature {
            settings.set_temperature(t);
        }
        if let Some(p) = self.top_p {
            settings.set_top_p(p);
        }
        if let Some(n) = self.max_tokens {
            settings.set_max_tokens(n);
        }
        if let Some(mb) = self.memory_budget_mb {
            settings.set_memory_budget_mb(mb);
        }
        if let Some(kv) = self
            .kv_type
            .as_deref()
            .and_then(|s| s.parse::<KvType>().ok())
        {
            settings.set_kv_type(kv);
        }
    }

    /// The preferences kept in `dir`: the defaults when there is no file or it does not read.
    pub fn load(dir: &Path) -> Preferences {
        std::fs::read(dir.join(FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Keeps these preferences in `dir`. A crash mid-write leaves the previous file whole.
    pub fn save(&self, dir: &Path) -> Result<(), SaveError> {
        let path = dir.join(FILE);
        let tmp = dir.join(format!("{FILE}.tmp"));
        let error = |source| SaveError {
            path: path.clone(),
            source,
        };
        // Plain data with string keys: serialising it cannot fail.
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        std::fs::create_dir_all(dir).map_err(error)?;
        std::fs::write(&tmp, json).map_err(error)?;
        std::fs::rename(&tmp, &path).map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assistant::responder::GenerationSettings;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kostant-prefs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn settings() -> SettingsController {
        SettingsController::new(GenerationSettings::default(), Ok("k".into()))
    }

    #[test]
    fn choices_survive_a_restart() {
        let dir = scratch("roundtrip");
        let mut s = settings();
        s.set_temperature(0.3);
        s.set_max_tokens(128);
        s.set_memory_budget_mb(2048);
        s.set_kv_type(KvType::Q4_0);
        Preferences::of(&s).save(&dir).unwrap();

        let mut again = settings();
        Preferences::load(&dir).apply(&mut again);
        assert_eq!(again.generation().kv_type, KvType::Q4_0);
        assert_eq!(again.generation().max_tokens, 128);
        assert_eq!(again.memory_budget_mb(), 2048);
        assert!((again.generation().temperature - 0.3).abs() < 1e-6);
        assert!(!dir.join("settings.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_or_hostile_file_gives_defaults_and_clamped_values() {
        let dir = scratch("hostile");
        let defaults = settings();
        for bad in [
            &b"\xff\xfe not json"[..],
            b"[1, 2, 3]",
            b"{\"kv_type\": 7}",
            b"{\"kv_type\": \"q2_k\"}",
        ] {
            std::fs::write(dir.join("settings.json"), bad).unwrap();
            let mut s = settings();
            Preferences::load(&dir).apply(&mut s);
            assert_eq!(s.generation(), defaults.generation(), "{bad:?}");
        }
        std::fs::write(
            dir.join("settings.json"),
            br#"{"temperature": 1e30, "max_tokens": 99999999, "memory_budget_mb": 1}"#,
        )
        .unwrap();
        let mut s = settings();
        Preferences::load(&dir).apply(&mut s);
        assert_eq!(s.generation().temperature, 2.0);
        assert_eq!(s.generation().max_tokens, 4096);
        assert_eq!(
            s.memory_budget_mb(),
            crate::controllers::settings::BUDGET_MIN_MB
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_that_cannot_be_written_is_a_clear_error() {
        let dir = scratch("unwritable");
        let file = dir.join("a-file");
        std::fs::write(&file, b"").unwrap();
        let e = Preferences::default().save(&file).unwrap_err().to_string();
        assert!(
            e.starts_with("Settings could not be saved for the next start"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
