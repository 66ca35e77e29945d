//! Where model files are looked for: read by the installed-models list and by the choice of
//! the model the guard reads with, which must find the same files.

use std::path::PathBuf;

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
