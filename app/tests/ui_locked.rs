//! The app, headless, on a history locked with a passphrase and started without it: it does
//! not open the history, says why in Settings (the same words as the command line), keeps the
//! chat usable without saving, and changes nothing on disk. (The app has no passphrase dialog
//! yet; `KOSTANT_PASSPHRASE_FILE` opens a locked history for it as for every command.)
//! One test per process, as every UI test here.

mod ui_support;

use kostant_app::history::{LockParams, Passphrase, Store, DB_FILE};
use kostant_app::ui::{AppRoot, DesktopApp};
use kostant_platform::keystore::FileKeyStore;
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
}
