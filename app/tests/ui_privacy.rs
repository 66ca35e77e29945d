//! The app, headless, on the real model: Settings' Privacy section shows what is true now (no
//! permissions, desktop-only protections said not to apply, the key file, the temporary chat),
//! and "Erase everything" asks first, naming what goes, then erases keys and files. The card
//! is below the fold of the testing window, so it is driven through the Settings global.
//! One test per process, as every UI test here.

mod ui_support;

use kostant_app::ui::{AppRoot, DesktopApp};
use slint::Model;
use ui_support::*;

#[test]
fn the_privacy_section_reads_the_facts_and_erase_everything_asks_then_erases() {
    kostant_platform::netguard::deny_network().expect("seccomp is available on this machine");
    init_backend();
    let scratch = Scratch::new("ui-privacy");
    let ui = DesktopApp::new().expect("the desktop window builds");
    let (ui, app) = open_greedy(ui, &scratch.data(), 8);
    let db = scratch.data().join("history.sqlite3");
    assert!(db.exists());

    press(&ui, "Temporary chat");
    press(&ui, "Settings");
    // The Privacy card sits below the fold of the testing window, where lookups by label do
    // not reach: its state is read from the Settings global the rows are drawn from.
    let s = ui.settings_state();
    let fact = |what: &str| {
        let facts = s.get_privacy_facts();
        (0..facts.row_count())
            .filter_map(|i| facts.row_data(i))
            .find(|f| f.what == what)
            .map(|f| f.value.to_string())
            .unwrap_or_else(|| panic!("no {what:?} fact"))
    };
    assert!(fact("Network").starts_with("denied"));
    assert_eq!(fact("Permissions"), "none");
    assert!(fact("Backups").starts_with("not applicable on the desktop"));
    assert!(fact("Screenshots").starts_with("not applicable on the desktop"));
    assert!(fact("Key").starts_with("a file: "));
    assert!(
        fact("Temporary chat").starts_with("on"),
        "read as the screen opened"
    );

    s.invoke_request_erase();
    assert!(s.get_erase_confirming());
    let question = s.get_erase_question().to_string();
    assert!(
        question.contains("every saved conversation") && question.contains("cannot be undone"),
        "{question}"
    );
    s.invoke_cancel_erase();
    assert!(!s.get_erase_confirming());
    assert!(db.exists(), "cancel erases nothing");

    s.invoke_request_erase();
    s.invoke_confirm_erase();
    let done = s.get_erased_text().to_string();
    assert!(done.starts_with("Everything is erased."), "{done}");
    assert!(!db.exists());
    assert!(!scratch.root.join("keys").join("history.key").exists());
    app.shutdown();
}
