//! Compiles the .slint files in app/ui into Rust (`slint::include_modules!` in src/ui/mod.rs).

fn main() {
    // Debug info keeps element ids and types in the generated code: the headless UI tests find
    // controls through it (i-slint-backend-testing's ElementHandle needs it).
    let config = slint_build::CompilerConfiguration::new().with_debug_info(true);
    // Compile-time failure of the UI is a build error with the .slint file and line in it.
    slint_build::compile_with_config("ui/app.slint", config).expect("app/ui/*.slint compile");
}
