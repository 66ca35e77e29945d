//! The phone layout on the real model, driven only by the window events the Android platform
//! makes of a NativeActivity's input (`kostant_app::android::events`): a phone-sized content
//! rectangle at 420 dpi, a finger tapping the composer (which asks for the soft keyboard), keys
//! typing into it, Backspace, and Enter sending; the reply streams. Nothing of the activity can
//! run here; this covers everything after the NDK's event structs. One test per process.

mod ui_support;

use i_slint_backend_testing::ElementHandle;
use kostant_app::android::events::{
    keycode, KeyChar, KeyMapper, Touch, TouchPhase, TouchTracker, Viewport,
};
use kostant_app::ui::{attach, AppRoot, Page, PhoneApp};
use slint::platform::WindowEvent;
use slint::ComponentHandle;
use ui_support::*;

/// A finger's tap at the centre of `e`, in the native window's physical pixels.
fn tap(ui: &PhoneApp, touch: &mut TouchTracker, v: &Viewport, e: &ElementHandle) {
    tap_at(ui, touch, v, e, 0.5);
}

/// A finger's tap across the middle of `e`, `down` of the way from its top.
fn tap_at(ui: &PhoneApp, touch: &mut TouchTracker, v: &Viewport, e: &ElementHandle, down: f32) {
    let (p, s) = (e.absolute_position(), e.size());
    let x = v.left as f32 + (p.x + s.width / 2.0) * v.scale;
    let y = v.top as f32 + (p.y + s.height * down) * v.scale;
    for phase in [TouchPhase::Down, TouchPhase::Up] {
        let t = Touch {
            phase,
            action_pointer: 0,
            pointers: vec![(0, x, y)],
        };
        for event in touch.events(&t, v) {
            ui.window().dispatch_event(event);
        }
    }
}

/// A key press and release as a keyboard sends them (`code`, and the character the key map
/// gives for it).
fn key(ui: &PhoneApp, keys: &mut KeyMapper, code: i32, ch: KeyChar) {
    for down in [true, false] {
        if let Some(event) = keys.event(code, down, false, ch) {
            ui.window().dispatch_event(event);
        }
    }
}

fn typed(ui: &PhoneApp, keys: &mut KeyMapper, text: &str) {
    for c in text.chars() {
        // The key code does not matter to the mapping of a character key.
        key(ui, keys, 29, KeyChar::Unicode(c));
    }
}

#[test]
fn taps_and_keys_from_android_drive_the_phone_layout() {
    init_backend();
    let scratch = Scratch::new("android-input");
    let ui = PhoneApp::new().expect("the phone layout builds");
    ui.show().expect("the testing backend shows windows");
    // A 1080x2400 screen at 420 dpi, under a status bar and above a navigation bar.
    let v = Viewport::new((1080, 2400), (0, 63, 1080, 2274), Some(420));
    ui.window().dispatch_event(WindowEvent::ScaleFactorChanged {
        scale_factor: v.scale,
    });
    ui.window().dispatch_event(WindowEvent::Resized {
        size: v.logical_size(),
    });
    let app = attach(&ui, config(&scratch.data()));
    wait_ready(&ui);
    {
        let mut chat = app.chat.borrow_mut();
        chat.settings.temperature = 0.0;
        chat.settings.max_tokens = 16;
    }
    assert!(!ui.keyboard().get_wanted());

    let mut touch = TouchTracker::new();
    let mut keys = KeyMapper::new();
    tap(&ui, &mut touch, &v, &find(&ui, "Message"));
    assert!(
        ui.keyboard().get_wanted(),
        "a tap on the composer asks for the soft keyboard"
    );

    typed(&ui, &mut keys, "What is the capital of Frane?");
    assert_eq!(last_value(&ui, "Message"), "What is the capital of Frane?");
    // Fix the typo as a user would: Backspace twice, retype.
    key(&ui, &mut keys, keycode::DEL, KeyChar::None);
    key(&ui, &mut keys, keycode::DEL, KeyChar::None);
    typed(&ui, &mut keys, "ce?");
    assert_eq!(last_value(&ui, "Message"), "What is the capital of France?");

    key(&ui, &mut keys, keycode::ENTER, KeyChar::Unicode('\n'));
    assert!(ui.chat_state().get_busy(), "Enter sends the message");
    let w = ui.as_weak();
    run_until("the reply finishes", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
    let reply = last_value(&ui, "Assistant reply");
    assert!(reply.contains("Paris"), "{reply:?}");
    assert_eq!(last_value(&ui, "Message"), "", "the composer is cleared");

    // A tap on the conversation leaves the composer: the keyboard goes; a tap on the composer
    // brings it back.
    assert!(ui.keyboard().get_wanted());
    // Near the top, on the reply's text: a reply element also holds the Copy, Regenerate and
    // Edit buttons below it, which can sit at the element's centre when the reply is one line.
    tap_at(&ui, &mut touch, &v, &find(&ui, "Assistant reply"), 0.15);
    assert!(
        !ui.keyboard().get_wanted(),
        "a tap on the conversation hides the keyboard"
    );
    tap(&ui, &mut touch, &v, &find(&ui, "Message"));
    assert!(ui.keyboard().get_wanted());

    // A tap on the History tab changes the page, and the composer goes with the chat screen:
    // the keyboard goes too.
    tap(&ui, &mut touch, &v, &find(&ui, "History"));
    assert_eq!(ui.nav().get_page(), Page::History, "the tap opened History");
    assert!(!ui.keyboard().get_wanted());
    app.shutdown();
}
