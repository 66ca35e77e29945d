//! The app's life, driven with the events the Android glue sends (`controllers::lifecycle`),
//! on the real model, headless: a reply goes on in the background and is saved; the state the
//! OS keeps names the conversation on screen; a closing app stops the reply it was writing and
//! saves it with its context; a restarted app given that state reopens the conversation under
//! its feature and reads only the new message; the context memory chosen in Settings is kept
//! across a restart, so a context saved under it is restored. One test per process.

mod ui_support;

use kostant_app::controllers::lifecycle::{Lifecycle, SavedState};
use kostant_app::features::Feature;
use kostant_app::ui::{restore_state, App, AppRoot, PhoneApp};
use slint::{ComponentHandle, Model};
use std::rc::Rc;
use ui_support::*;

fn open(scratch: &Scratch) -> (PhoneApp, Rc<App>) {
    let ui = PhoneApp::new().expect("the phone layout builds");
    open_greedy(ui, &scratch.data(), 24)
}

fn until_idle(ui: &PhoneApp) {
    let w = ui.as_weak();
    run_until("the reply ends", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
}

fn messages(ui: &PhoneApp) -> usize {
    ui.chat_state().get_messages().row_count()
}

#[test]
fn the_conversation_survives_background_close_and_restart() {
    init_backend();
    let scratch = Scratch::new("lifecycle");
    let (ui, app) = open(&scratch);
    press(&ui, "Feature: Summarize");
    press(&ui, "Feature: Chat");
    type_into(&ui, "Message", "What is the capital of France?");
    press(&ui, "Send");
    assert!(ui.chat_state().get_busy());
    // Sent to the background mid-reply: nothing stops, nothing is kept yet.
    assert_eq!(app.lifecycle(Lifecycle::Pause), None);
    assert_eq!(app.lifecycle(Lifecycle::Stop), None);
    until_idle(&ui);
    assert!(last_value(&ui, "Assistant reply").contains("Paris"));
    let conversation = app.chat.borrow().conversation();
    assert!(conversation.is_some(), "the reply was saved");

    // A second reply, and the OS closes the app while it is being written.
    type_into(
        &ui,
        "Message",
        "Tell me a long story about a lighthouse keeper.",
    );
    press(&ui, "Send");
    let w = ui.as_weak();
    run_until("the reply has begun", move || {
        w.upgrade().is_some_and(|ui| {
            let m = ui.chat_state().get_messages();
            m.row_count() == 4 && m.row_data(3).is_some_and(|r| !r.text.is_empty())
        })
    });
    assert!(ui.chat_state().get_busy());
    let saved = app.lifecycle(Lifecycle::SaveState).expect("state to keep");
    assert_eq!(
        SavedState::from_bytes(&saved),
        Ok(SavedState {
            conversation,
            feature: Feature::Chat
        })
    );
    assert_eq!(app.lifecycle(Lifecycle::Destroy), None);
    assert!(
        !app.chat.borrow().is_busy(),
        "the reply was stopped and waited for"
    );
    assert_eq!(messages(&ui), 4);
    let turns = app
        .history
        .as_ref()
        .unwrap()
        .borrow()
        .open(conversation.unwrap())
        .unwrap();
    assert_eq!(turns.len(), 4, "the stopped reply was saved too");
    drop(ui);
    drop(app);

    // The process starts again; the OS hands the app what it kept.
    let (ui, app) = open(&scratch);
    assert_eq!(messages(&ui), 0);
    assert!(restore_state(&ui, &app, b"not ours").is_err());
    assert_eq!(
        messages(&ui),
        0,
        "state that does not read leaves a new chat"
    );
    restore_state(&ui, &app, &saved).unwrap();
    assert_eq!(messages(&ui), 4, "the conversation is back on screen");
    assert_eq!(app.chat.borrow().conversation(), conversation);
    // Into a chat that shows something, a restore changes nothing.
    restore_state(
        &ui,
        &app,
        &SavedState {
            conversation: None,
            feature: Feature::Summarize,
        }
        .to_bytes(),
    )
    .unwrap();
    assert_eq!(app.chat.borrow().feature(), Feature::Chat);
    assert_eq!(messages(&ui), 4);

    type_into(&ui, "Message", "And the capital of Italy?");
    press(&ui, "Send");
    until_idle(&ui);
    assert_eq!(messages(&ui), 6);
    // The saved context was restored: most of the prompt was not read again.
    let stats = app.chat.borrow().last_stats().cloned().unwrap();
    assert!(stats.reused_tokens > stats.prompt_tokens / 2, "{stats:?}");

    // Settings: the compact context memory. The next reply reads the conversation again into
    // a cache of that type (the one saved is f16), and the choice is kept for the next start.
    // (On the phone the card is below the first screenful, where the testing backend finds no
    // element: its chip's callback is invoked as a press would; ui_model_switch presses it.)
    ui.settings_state().invoke_set_kv_type(1);
    let chosen: Vec<bool> = ui
        .settings_state()
        .get_kv_types()
        .iter()
        .map(|k| k.chosen)
        .collect();
    assert_eq!(chosen, [false, true, false]);
    assert_eq!(ui.settings_state().get_notice(), "");
    {
        // Settings' own sampling replaced the test's greedy one.
        let mut chat = app.chat.borrow_mut();
        chat.settings.temperature = 0.0;
        chat.settings.max_tokens = 24;
    }
    type_into(&ui, "Message", "And the capital of Spain?");
    press(&ui, "Send");
    until_idle(&ui);
    assert_eq!(messages(&ui), 8);
    let stats = app.chat.borrow().last_stats().cloned().unwrap();
    assert!(stats.reused_tokens < stats.prompt_tokens / 2, "{stats:?}");
    let saved = app.lifecycle(Lifecycle::SaveState).expect("state to keep");
    app.shutdown();
    drop(ui);
    drop(app);

    // Started again: the compact cache is still chosen, so the context saved under it is
    // restored rather than read again.
    let (ui, app) = open(&scratch);
    assert!(
        ui.settings_state()
            .get_kv_types()
            .iter()
            .nth(1)
            .unwrap()
            .chosen
    );
    restore_state(&ui, &app, &saved).unwrap();
    assert_eq!(messages(&ui), 8);
    type_into(&ui, "Message", "And of Portugal?");
    press(&ui, "Send");
    until_idle(&ui);
    let stats = app.chat.borrow().last_stats().cloned().unwrap();
    assert!(stats.reused_tokens > stats.prompt_tokens / 2, "{stats:?}");
    app.shutdown();
}
