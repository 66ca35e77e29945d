//! The iOS entry point, called from the Xcode template's `main.m` (platform/ios): runs the
//! phone layout with Slint's winit backend. iOS offers no per-process network switch, so the
//! badge reports it and the promise rests on the app having no network code.

use crate::ui::{attach, AppConfig, PhoneApp};
use slint::ComponentHandle;

/// Runs the app until iOS ends it. `main.m` calls this from `main`.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn kostant_ios_main() {
    // Records "not supported" for the badge; cannot fail on iOS.
    let _ = kostant_platform::netguard::deny_network();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let model = std::env::current_exe().ok().and_then(|exe| {
        let p = exe.parent()?.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        p.is_file().then_some(p)
    });
    let mut cfg =
        AppConfig::new(model.ok_or_else(|| "the model is not in the app bundle".to_string()));
    if let Some(home) = home {
        cfg.data_dir = Some(
            home.join("Library")
                .join("Application Support")
                .join("kostant"),
        );
        std::env::set_var("KOSTANT_KEY_DIR", home.join("Library").join("kostant-keys"));
    }
    let Ok(ui) = PhoneApp::new() else { return };
    let app = attach(&ui, cfg);
    let _ = ui.run();
    app.shutdown();
}
