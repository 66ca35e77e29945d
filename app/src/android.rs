//! The Android entry point: the activity calls `android_main`, which denies the process the
//! network (seccomp, as on desktop Linux), then runs the phone layout with the
//! android-activity backend. The model and history live in the app's private files directory.

use std::path::PathBuf;

use crate::ui::{attach, AppConfig, PhoneApp};
use slint::ComponentHandle;

// The symbol the android-activity glue looks up by name, so it cannot be mangled.
#[allow(unsafe_code)]
#[no_mangle]
fn android_main(app: slint::android::AndroidApp) {
    if let Err(e) = kostant_platform::netguard::deny_network() {
        eprintln!("kostant: refusing to start without the network denied: {e}");
        return;
    }
    let files = app
        .internal_data_path()
        .unwrap_or_else(|| PathBuf::from("."));
    if let Err(e) = slint::android::init(app) {
        eprintln!("kostant: cannot start the UI: {e}");
        return;
    }
    // The key store's directory: inside the private files dir but apart from the data.
    std::env::set_var("KOSTANT_KEY_DIR", files.join("keys"));
    let model = files.join("models").join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut cfg = AppConfig::new(if model.is_file() {
        Ok(model)
    } else {
        Err(format!("{} is not installed", model.display()))
    });
    cfg.data_dir = Some(files.join("history"));
    let ui = match PhoneApp::new() {
        Ok(ui) => ui,
        Err(e) => {
            eprintln!("kostant: cannot create the window: {e}");
            return;
        }
    };
    let app = attach(&ui, cfg);
    if let Err(e) = ui.run() {
        eprintln!("kostant: {e}");
    }
    app.shutdown();
}
