//! The Android entry point: the NativeActivity glue calls `android_main` on the app's thread.
//! It denies the process the network (seccomp, the same filter as on desktop Linux) before
//! anything else, installs what the APK carries (the model, the eval suites: `bundle.rs`) into
//! the private files directory, then runs the phone layout on our own Slint platform
//! (`platform.rs`). The guard head is compiled into the library, as on the desktop; the
//! history's key is wrapped by a key in the Android Keystore (`history::open_default`).

use std::ffi::CString;
use std::io::Read;
use std::path::{Path, PathBuf};

use android_activity::AndroidApp;
use slint::ComponentHandle;

use super::bundle;
use super::log;
use super::platform::{AndroidPlatform, SharedPlatform};
use crate::assistant::responder::guarded_factory;
use crate::error::AppError;
use crate::ui::{attach, restore_state, AppConfig, AppRoot, PhoneApp};

// The symbol the android-activity glue looks up by name, so it cannot be mangled.
#[allow(unsafe_code)]
#[no_mangle]
fn android_main(app: AndroidApp) {
    if let Err(e) = kostant_platform::netguard::deny_network() {
        log::error(&format!(
            "refusing to start without the network denied: {e}"
        ));
        return;
    }
    let Some(files) = app.internal_data_path() else {
        log::error("Android gave the app no private files directory");
        return;
    };
    let platform = AndroidPlatform::new(app.clone());
    if let Err(e) = slint::platform::set_platform(Box::new(SharedPlatform(platform.clone()))) {
        log::error(&format!("cannot start the UI: {e}"));
        return;
    }
    // The small files (the eval suites) before the UI, which lists them; the model (hundreds of
    // megabytes, gigabytes for a 3B model) on the chat's worker while the UI shows it loading,
    // so a first start never leaves the window blank and unresponsive.
    let small = install_bundle(&app, &files, |path| !path.starts_with("models/"));
    let model = small.and_then(|()| default_model_path(&files));
    let mut cfg = AppConfig::new(model.clone());
    cfg.data_dir = Some(files.join("history"));
    cfg.suites_dir = Some(files.join("evals"));
    if let Ok(path) = model {
        let (app, files) = (app.clone(), files.clone());
        cfg.responder = Some(Box::new(move || {
            install_bundle(&app, &files, |_| true)
                .and_then(|()| check_installed(&path))
                .map_err(AppError::ModelNotReady)?;
            guarded_factory(path)()
        }));
    }
    let ui = match PhoneApp::new() {
        Ok(ui) => ui,
        Err(e) => {
            log::error(&format!("cannot create the window: {e}"));
            return;
        }
    };
    let bg = ui.theme().get_background();
    platform.set_background([bg.red(), bg.green(), bg.blue()]);
    let weak = ui.as_weak();
    platform
        .set_keyboard_probe(move || weak.upgrade().is_some_and(|ui| ui.keyboard().get_wanted()));
    let app_state = attach(&ui, cfg);
    // The app's life drives the chat: a reply goes on in the background, the conversation on
    // screen is kept for a restart, and a closing app saves the reply it was writing.
    let a = app_state.clone();
    platform.set_lifecycle_handler(move |event| a.lifecycle(event));
    let (weak, a) = (ui.as_weak(), app_state.clone());
    platform.set_restore_handler(move |saved| {
        if let Some(ui) = weak.upgrade() {
            if let Err(e) = restore_state(&ui, &a, saved) {
                log::error(&format!(
                    "starting with a new chat: the saved state did not read ({e})"
                ));
            }
        }
    });
    if let Err(e) = ui.run() {
        log::error(&format!("{e}"));
    }
    // The loop ended (Destroy already saved a reply in flight): join what is left.
    app_state.shutdown();
}

/// Copies the APK's bundled files whose path `keep` accepts into `files` (on first start or
/// after an update; a later start reads one small file).
fn install_bundle(
    app: &AndroidApp,
    files: &Path,
    keep: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let assets = app.asset_manager();
    let list = CString::new(bundle::LIST)
        .ok()
        .and_then(|name| assets.open(&name))
        .and_then(|mut a| {
            let mut s = String::new();
            a.read_to_string(&mut s).ok().map(|_| s)
        })
        .ok_or("this copy of Kostant carries no file list; reinstall the app")?;
    bundle::install(&bundle::subset(&list, keep), files, |path| {
        CString::new(path).ok().and_then(|name| assets.open(&name))
    })
    .map_err(|e| e.to_string())
}

/// Where the default model of the built-in manifest goes under `files/models/`.
fn default_model_path(files: &Path) -> Result<PathBuf, String> {
    let manifest = kostant_assets::ModelManifest::builtin().map_err(|e| e.to_string())?;
    let entry = manifest.default_model().map_err(|e| e.to_string())?;
    Ok(files.join("models").join(&entry.file))
}

/// The bundle checked the file against the list the build wrote; the list must also name the
/// model this library was built for.
fn check_installed(path: &Path) -> Result<(), String> {
    let manifest = kostant_assets::ModelManifest::builtin().map_err(|e| e.to_string())?;
    let entry = manifest.default_model().map_err(|e| e.to_string())?;
    let installed = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if installed != entry.size {
        return Err(format!(
            "{} is not the model this version of Kostant expects; reinstall the app",
            entry.file
        ));
    }
    Ok(())
}
