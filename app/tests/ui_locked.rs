//! The app, headless, on a history locked with a passphrase and started without it: it does
//! not open the history, says why in Settings (the same words as the command line), keeps the
//! chat usable without saving, and changes nothing on disk; the passphrase dialog `run_window`
//! shows first decides as `try_unlock` does (tested here without its window).
//! One test per process, as every UI test here.

mod ui_support;

use kostant_app::history::{LockParams, Passphrase, Store, DB_FILE};
use kostant_app::ui::{AppRoot, DesktopApp};
use kostant_platform::keystore::FileKeyStore;
use slint::ComponentHandle;
use ui_support::*;

#[test]
fn a_locked_history_is_refused_with_a_clear_notice_and_left_untouched() {
    init_backend();
    let scratch = Scratch::new("ui-locked");
    std::env::remove_var("KOSTANT_PASSPHRASE_FILE");
    let db = scratch.data().join(DB_FILE);
    let mut store = Store::open(&db, FileKeyStore::new(scratch.root.join("keys"))).unwrap();
    store.append_exchange(None, "kept", "safe").unwrap();
    let cheap = LockParams {
        m_kib: 64,
        t: 1,
        p: 1,
    };
    store.lock(&Passphrase::new("pw").unwrap(), cheap).unwrap();
    drop(store);
    let before = std::fs::read(&db).unwrap();

    let ui = DesktopApp::new().expect("the desktop window builds");
    let (ui, app) = open_greedy(ui, &scratch.data(), 8);
    let status = ui.settings_state().get_key_status().to_string();
    assert_eq!(
        status,
        "off: the history is locked: give its passphrase in a file named by KOSTANT_PASSPHRASE_FILE"
    );
    assert!(app.history.is_none() && app.documents.is_none());
    app.shutdown();
    assert_eq!(std::fs::read(&db).unwrap(), before, "nothing was written");

    // The dialog shown before the window when started for real (`run_window`): a wrong or
    // empty passphrase is said in its words and changes nothing; the right one opens it.
    use kostant_app::ui::{try_unlock, UNLOCK_ASK, UNLOCK_WRONG};
    assert_eq!(
        try_unlock(&scratch.data(), "nope").err().unwrap(),
        UNLOCK_WRONG
    );
    assert_eq!(try_unlock(&scratch.data(), "").err().unwrap(), UNLOCK_ASK);
    assert_eq!(std::fs::read(&db).unwrap(), before);
    let store = try_unlock(&scratch.data(), "pw").unwrap();
    assert_eq!(store.list().unwrap().len(), 1);

    // The dialog itself: its passphrase field and Open hand the typed text to Rust.
    let dialog = kostant_app::ui::UnlockWindow::new().expect("the dialog builds");
    dialog.show().unwrap();
    let typed = std::rc::Rc::new(std::cell::RefCell::new(String::new()));
    let t = typed.clone();
    dialog.on_unlock(move |s| *t.borrow_mut() = s.to_string());
    dialog.set_message(UNLOCK_WRONG.into());
    assert_eq!(last_value(&dialog, "Unlock notice"), UNLOCK_WRONG);
    type_into(&dialog, "Passphrase", "pw");
    press(&dialog, "Open history");
    assert_eq!(*typed.borrow(), "pw");
}
