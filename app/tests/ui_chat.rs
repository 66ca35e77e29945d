//! The app, headless, on the real model: a prompt's reply streams into the chat; Stop stops a
//! long reply; the conversation appears in History, survives a restart, reopens into the chat;
//! delete removes it. Every control is found and pressed by its accessible label. One test per
//! process: Slint's platform is set once and its event loop belongs to one thread.

mod ui_support;

use std::cell::RefCell;
use std::rc::Rc;

use kostant_app::ui::{AppRoot, DesktopApp, MessageRole, Page};
use slint::{ComponentHandle, Model};
use ui_support::*;

const QUESTION: &str = "What is the capital of France?";

/// Opens a desktop window on the app with greedy, short replies.
fn open(scratch: &Scratch) -> (DesktopApp, Rc<kostant_app::ui::App>) {
    let ui = DesktopApp::new().expect("the desktop window builds");
    open_greedy(ui, &scratch.data(), 24)
}

fn replies(ui: &DesktopApp) -> Vec<(MessageRole, String)> {
    let m = ui.chat_state().get_messages();
    (0..m.row_count())
        .filter_map(|i| m.row_data(i))
        .map(|r| (r.role, r.text.to_string()))
        .collect()
}

#[test]
fn chat_streams_stops_saves_survives_a_restart_and_deletes() {
    // The badge reflects the real enforcement: deny the network as `main` does.
    kostant_platform::netguard::deny_network().expect("seccomp is available on this machine");
    init_backend();
    let scratch = Scratch::new("ui-chat");
    let (ui, app) = open(&scratch);
    assert_eq!(last_value(&ui, "Network status"), "on-device · radio off");

    // Send: the reply streams into an "Assistant reply" bubble and ends answered.
    type_into(&ui, "Message", QUESTION);
    press(&ui, "Send");
    assert!(ui.chat_state().get_busy(), "sending starts a reply");
    assert!(exists(&ui, "Stop"), "Stop replaces Send while replying");
    let w = ui.as_weak();
    run_until("the reply finishes", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
    let reply = last_value(&ui, "Assistant reply");
    assert!(reply.contains("Paris"), "{reply:?}");
    assert_eq!(
        find(&ui, "Assistant reply")
            .accessible_description()
            .unwrap(),
        "done"
    );
    assert!(last_value(&ui, "Speed").contains("tok/s"));
    assert_eq!(last_value(&ui, "Message"), "", "the composer is cleared");

    // A long reply: watch it grow token by token, then Stop it.
    app.chat.borrow_mut().settings.max_tokens = 400;
    type_into(
        &ui,
        "Message",
        "Write a long story about a lighthouse keeper.",
    );
    press(&ui, "Send");
    let seen: Rc<RefCell<Vec<usize>>> = Rc::default();
    let (w, s) = (ui.as_weak(), seen.clone());
    run_until("the reply has streamed a few pieces", move || {
        let Some(ui) = w.upgrade() else { return false };
        let text = last_value(&ui, "Assistant reply");
        let mut s = s.borrow_mut();
        if s.last() != Some(&text.len()) {
            s.push(text.len());
        }
        ui.chat_state().get_busy() && s.iter().filter(|n| **n > 0).count() >= 3
    });
    assert!(
        seen.borrow().windows(2).all(|w| w[0] <= w[1]),
        "the reply only grows while streaming: {:?}",
        seen.borrow()
    );
    press(&ui, "Stop");
    let w = ui.as_weak();
    run_until("Stop ends the reply", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
    let stopped = all(&ui, "Assistant reply");
    let last = stopped.last().unwrap();
    assert_eq!(last.accessible_description().unwrap(), "stopped");
    let generated = app.chat.borrow().last_stats().unwrap().generated_tokens;
    assert!(generated < 400, "stopped early: {generated} tokens");
    assert_eq!(replies(&ui).len(), 4);

    // History lists the conversation, titled by its first message.
    press(&ui, "History");
    let title = format!("Conversation: {QUESTION}");
    assert!(exists(&ui, &title), "history lists the conversation");
    assert_eq!(ui.history_state().get_items().row_count(), 1);

    // Restart: a new window over the same directories finds it again and reopens it.
    app.shutdown();
    drop((ui, app));
    let (ui, app) = open(&scratch);
    press(&ui, "History");
    assert!(exists(&ui, &title), "the conversation survives a restart");
    press(&ui, &format!("Open {QUESTION}"));
    assert_eq!(ui.nav().get_page(), Page::Chat, "opening shows the chat");
    let reopened = replies(&ui);
    assert_eq!(reopened.len(), 4);
    assert_eq!(reopened[0], (MessageRole::User, QUESTION.to_string()));
    assert!(reopened[1].1.contains("Paris"));

    // Continue it, then delete it.
    type_into(&ui, "Message", "And of Italy?");
    press(&ui, "Send");
    let w = ui.as_weak();
    run_until("the follow-up finishes", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
    // The restart restored the conversation's saved context: a new process, yet the
    // follow-up read only its new turn, not the two exchanges before it.
    let stats = app.chat.borrow().last_stats().cloned().unwrap();
    assert!(
        stats.reused_tokens > 40 && stats.prompt_tokens - stats.reused_tokens < 40,
        "{stats:?}"
    );
    press(&ui, "History");
    let items = ui.history_state().get_items();
    assert_eq!(
        items.row_count(),
        1,
        "continuing appends to the same conversation"
    );
    assert_eq!(items.row_data(0).unwrap().count, 6);
    press(&ui, &format!("Delete {QUESTION}"));
    assert!(!exists(&ui, &title));
    assert!(exists(&ui, "History empty"));

    // Gone for good: another restart lists nothing.
    app.shutdown();
    drop((ui, app));
    let (ui, _app) = open(&scratch);
    press(&ui, "History");
    assert!(exists(&ui, "History empty"));
}
