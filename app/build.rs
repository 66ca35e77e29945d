//! Compiles the .slint files in app/ui into Rust (`slint::include_modules!` in src/ui/mod.rs).

fn main() {
    // Compile-time failure of the UI is a build error with the .slint file and line in it.
    slint_build::compile("ui/app.slint").expect("app/ui/*.slint compile");
}
