//! The app, headless, on the real model: a Reply reply ends with its three suggestions as chips
//! under it, and tapping one puts it in the composer without sending it; the Summarize and
//! Rewrite chips offer a length and a tone. One test per process, as every UI test here.

mod ui_support;

use kostant_app::assistant::choices::{SummaryLength, Tone};
use kostant_app::ui::{AppRoot, DesktopApp};
use slint::{ComponentHandle, Model};
use ui_support::*;

#[test]
fn a_suggestion_fills_the_composer_and_is_not_sent() {
    init_backend();
    let scratch = Scratch::new("ui-choices");
    let ui = DesktopApp::new().expect("the desktop window builds");
    let (ui, app) = open_greedy(ui, &scratch.data(), 90);

    press(&ui, "Feature: Reply");
    type_into(&ui, "Message", "Are you free for lunch on Friday?");
    press(&ui, "Send");
    let w = ui.as_weak();
    run_until("the reply finishes", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
    let choices = app.chat.borrow().messages()[1].choices.clone();
    assert_eq!(choices.len(), 3, "{:?}", app.chat.borrow().messages()[1]);
    assert_eq!(all(&ui, "Suggestion 1").len(), 1);
    assert_eq!(last_value(&ui, "Suggestion 3"), choices[2]);

    press(&ui, "Suggestion 2");
    assert_eq!(last_value(&ui, "Message"), choices[1]);
    assert_eq!(
        ui.chat_state().get_messages().row_count(),
        2,
        "nothing was sent"
    );
    assert!(!ui.chat_state().get_busy());

    // Summarize and Rewrite show a length and a tone to choose; other chips show none.
    assert!(!exists(&ui, "Length: Short"));
    press(&ui, "Feature: Summarize");
    press(&ui, "Length: Short");
    assert_eq!(app.chat.borrow().length(), Some(SummaryLength::Short));
    press(&ui, "Feature: Rewrite");
    assert!(!exists(&ui, "Length: Short"));
    press(&ui, "Tone: Shorter");
    assert_eq!(app.chat.borrow().tone(), Some(Tone::Shorter));
    press(&ui, "Feature: Chat");
    assert!(!exists(&ui, "Tone: Shorter"));
}
