//! The app, headless, on the real model: the Temporary chat toggle shows its banner, a reply
//! in that mode is not saved (History stays empty), and turning it off clears the chat.
//! One test per process, as every UI test here.

mod ui_support;

use kostant_app::ui::{AppRoot, ChatMode, DesktopApp};
use slint::{ComponentHandle, Model};
use ui_support::*;

#[test]
fn a_temporary_chat_is_marked_not_saved_and_cleared_on_leaving() {
    init_backend();
    let scratch = Scratch::new("ui-temporary");
    let ui = DesktopApp::new().expect("the desktop window builds");
    let (ui, app) = open_greedy(ui, &scratch.data(), 8);
    assert!(!exists(&ui, "Temporary chat notice"));

    press(&ui, "Temporary chat");
    assert_eq!(ui.chat_state().get_mode(), ChatMode::Temporary);
    assert_eq!(
        last_value(&ui, "Temporary chat notice"),
        "Temporary: this chat is not saved and is cleared when you leave it"
    );
    type_into(&ui, "Message", "Name a colour.");
    press(&ui, "Send");
    let w = ui.as_weak();
    run_until("the reply finishes", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
    assert_eq!(ui.chat_state().get_messages().row_count(), 2);

    press(&ui, "History");
    assert!(exists(&ui, "History empty"), "nothing was saved");
    assert_eq!(app.chat.borrow().conversation(), None);

    // Still temporary when coming back; leaving the mode leaves the chat: the screen is
    // empty and the banner gone.
    press(&ui, "Chat");
    assert!(exists(&ui, "Temporary chat notice"));
    press(&ui, "Temporary chat");
    assert_eq!(ui.chat_state().get_mode(), ChatMode::Saved);
    assert_eq!(ui.chat_state().get_messages().row_count(), 0);
    assert!(!exists(&ui, "Temporary chat notice"));
    app.shutdown();
}
