//! The Chat screen's adapter: the chat controller's messages and state into `ChatState`, and
//! the screen's callbacks (send, stop, regenerate, edit, copy, feature chips, new chat, a
//! reply's source opened in the passage panel) back.

use std::rc::Rc;

use slint::{Model as _, ModelRc, SharedString, VecModel};

use super::{App, AppRoot, ChangeItem, ChatItem, ChatMode, MessageRole, MessageStatus, Page};
use crate::assistant::ask::Source;
use crate::assistant::worker::ModelState;
use crate::controllers::message::MessageState;
use crate::controllers::proofread::ChangeReview;
use crate::features::Feature;
use crate::history::Role;
use kostant_safety::{StoppedBy, Verdict};

/// Shows conversation `id` of the history in the chat, with its saved context.
pub(super) fn open_conversation<R: AppRoot>(ui: &R, app: &App, id: i64) -> Result<(), String> {
    let h = app.history.as_ref().ok_or("the history is off")?;
    h.borrow()
        .open(id)
        .and_then(|turns| app.chat.borrow_mut().open_conversation(id, turns))
        .map_err(|e| e.to_string())?;
    ui.chat_state().set_editing(false);
    ui.nav().set_page(Page::Chat);
    ui.keyboard().set_wanted(false);
    refresh(ui, app);
    Ok(())
}

/// Makes `model` hold `items`, touching only the rows that changed (a streaming reply changes
/// one row per token; rebuilding the list would rebuild every bubble).
fn sync_rows<T: Clone + PartialEq + 'static>(model: &VecModel<T>, items: Vec<T>) {
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        match model.row_data(i) {
            Some(old) if old == item => {}
            Some(_) => model.set_row_data(i, item),
            None => model.push(item),
        }
    }
    while model.row_count() > n {
        model.remove(model.row_count() - 1);
    }
}

/// The Slint contract's status of a message: the one place the app's message state meets the
/// screen's enum.
fn status_of(state: MessageState) -> MessageStatus {
    match state {
        MessageState::Streaming => MessageStatus::Streaming,
        MessageState::Failed => MessageStatus::Failed,
        MessageState::Finished(Verdict::Answered) => MessageStatus::Done,
        MessageState::Finished(Verdict::Refused { .. }) => MessageStatus::Refused,
        MessageState::Finished(Verdict::Stopped {
            by: StoppedBy::Guard,
            ..
        }) => MessageStatus::Withdrawn,
        MessageState::Finished(Verdict::Stopped {
            by: StoppedBy::User,
            ..
        }) => MessageStatus::Stopped,
    }
}

/// The sources under a reply as the screen lists them: "[1] lease.md, page 2".
fn source_labels(sources: &[Source]) -> ModelRc<SharedString> {
    if sources.is_empty() {
        return ModelRc::default();
    }
    let labels: Vec<SharedString> = sources
        .iter()
        .map(|s| format!("[{}] {}", s.n, s.label).into())
        .collect();
    ModelRc::new(VecModel::from(labels))
}

/// A Reply reply's suggestions for its chips.
fn choice_labels(choices: &[String]) -> ModelRc<SharedString> {
    if choices.is_empty() {
        return ModelRc::default();
    }
    let labels: Vec<SharedString> = choices.iter().map(|c| c.as_str().into()).collect();
    ModelRc::new(VecModel::from(labels))
}

/// A proofread reply's changes as the screen lists them.
fn change_items(review: Option<&ChangeReview>) -> ModelRc<ChangeItem> {
    let Some(review) = review.filter(|r| !r.is_empty()) else {
        return ModelRc::default();
    };
    let items: Vec<ChangeItem> = review
        .rows()
        .into_iter()
        .map(|c| ChangeItem {
            removed: c.removed.into(),
            inserted: c.inserted.into(),
            accepted: c.accepted,
        })
        .collect();
    ModelRc::new(VecModel::from(items))
}

/// The chat's state into `ChatState`: the messages (only the rows that changed), the model's
/// status, the readout and the status line.
pub(super) fn refresh<R: AppRoot>(ui: &R, app: &App) {
    let chat = app.chat.borrow();
    let s = ui.chat_state();
    let items = chat
        .messages()
        .iter()
        .map(|m| ChatItem {
            role: match m.role {
                Role::User => MessageRole::User,
                _ => MessageRole::Assistant,
            },
            text: m.text.as_str().into(),
            status: status_of(m.state),
            caption: m.state.caption().into(),
            sources: source_labels(&m.sources),
            changes: change_items(m.review.as_ref()),
            all_accepted: m.review.as_ref().is_some_and(ChangeReview::all_accepted),
            choices: choice_labels(&m.choices),
        })
        .collect();
    sync_rows(&app.messages, items);
    s.set_busy(chat.is_busy());
    let (ready, model_status) = match chat.model() {
        ModelState::Loading => (false, "Loading the model…".to_string()),
        ModelState::Ready(m) => (
            true,
            format!("{} · {} · on this device", m.name, m.quantization),
        ),
        ModelState::Failed(e) => (false, format!("No model: {e}")),
    };
    s.set_ready(ready);
    s.set_model_status(model_status.into());
    s.set_readout(chat.readout().into());
    s.set_status_line(chat.status().unwrap_or("").into());
    s.set_badge_text(app.badge.text.as_str().into());
    s.set_badge_ok(app.badge.enforced);
    s.set_feature(chat.feature().index() as i32);
    // The options are replaced only when the chip changes, so a refresh per token leaves them.
    let (name, options) = chat.shape_options().unwrap_or_default();
    if s.get_shape_name() != name || s.get_shape_options().row_count() != options.len() {
        let options: Vec<SharedString> = options.into_iter().map(Into::into).collect();
        s.set_shape_name(name.into());
        s.set_shape_options(ModelRc::new(VecModel::from(options)));
    }
    s.set_shape_option(chat.shape_option() as i32);
    s.set_mode(match chat.mode() {
        crate::controllers::chat::ChatMode::Saved => ChatMode::Saved,
        crate::controllers::chat::ChatMode::Temporary => ChatMode::Temporary,
    });
    s.set_scroll_tick(s.get_scroll_tick().wrapping_add(1));
}

/// Forwards the Chat screen's callbacks to the chat controller.
pub(super) fn connect<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.chat_state();
    let names: Vec<SharedString> = Feature::CHIPS.iter().map(|f| f.label().into()).collect();
    s.set_features(ModelRc::new(VecModel::from(names)));

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_send(move |text| {
        let Some(ui) = w.upgrade() else { return };
        let editing = ui.chat_state().get_editing();
        let result = {
            let mut chat = a.chat.borrow_mut();
            if editing {
                chat.edit_last(&text)
            } else {
                chat.send(&text)
            }
        };
        match result {
            Ok(()) => {
                ui.chat_state().set_draft("".into());
                ui.chat_state().set_editing(false);
            }
            Err(e) => ui.chat_state().set_status_line(e.to_string().into()),
        }
        refresh(&ui, &a);
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_stop(move || {
        a.chat.borrow_mut().stop();
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_regenerate(move || {
        let Some(ui) = w.upgrade() else { return };
        let result = a.chat.borrow_mut().regenerate();
        refresh(&ui, &a);
        if let Err(e) = result {
            ui.chat_state().set_status_line(e.to_string().into());
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_edit_last(move || {
        let Some(ui) = w.upgrade() else { return };
        let text = a.chat.borrow().last_user_text().map(str::to_string);
        if let Some(text) = text {
            ui.chat_state().set_draft(text.into());
            ui.chat_state().set_editing(true);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_copy(move |i| {
        let Some(ui) = w.upgrade() else { return };
        let text = usize::try_from(i)
            .ok()
            .and_then(|i| a.chat.borrow().copy_text(i));
        if let Some(text) = text {
            ui.copy_to_clipboard(&text);
            ui.chat_state().set_status_line("copied".into());
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_toggle_change(move |message, change| {
        if let (Ok(m), Ok(c)) = (usize::try_from(message), usize::try_from(change)) {
            a.chat.borrow_mut().toggle_change(m, c);
        }
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });

    // A suggestion goes to the composer, not out: the user may edit it, and sends it.
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_use_choice(move |message, n| {
        let Some(ui) = w.upgrade() else { return };
        let text = usize::try_from(message)
            .ok()
            .zip(usize::try_from(n).ok())
            .and_then(|(m, n)| a.chat.borrow().choice(m, n).map(str::to_string));
        if let Some(text) = text {
            ui.chat_state().set_draft(text.into());
            ui.chat_state().set_editing(false);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_set_shape_option(move |i| {
        if let Ok(i) = usize::try_from(i) {
            a.chat.borrow_mut().set_shape_option(i);
        }
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_accept_all_changes(move |message| {
        if let Ok(m) = usize::try_from(message) {
            a.chat.borrow_mut().accept_all_changes(m);
        }
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_set_feature(move |i| {
        let f = usize::try_from(i)
            .ok()
            .and_then(|i| Feature::CHIPS.get(i).copied());
        if let Some(f) = f {
            a.chat.borrow_mut().set_feature(f);
        }
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_show_source(move |message, n| {
        let Some(ui) = w.upgrade() else { return };
        let chat = a.chat.borrow();
        let source = usize::try_from(message)
            .ok()
            .zip(usize::try_from(n).ok())
            .and_then(|(m, n)| chat.source(m, n));
        if let Some(src) = source {
            let s = ui.chat_state();
            s.set_source_title(format!("[{}] {}", src.n, src.label).into());
            s.set_source_text(src.text.as_str().into());
            s.set_source_open(true);
        }
    });

    let w = ui.as_weak();
    s.on_close_source(move || {
        if let Some(ui) = w.upgrade() {
            ui.chat_state().set_source_open(false);
        }
    });

    s.set_temporary_text(crate::history::TEMPORARY_NOTICE.into());
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_set_mode(move |mode| {
        let Some(ui) = w.upgrade() else { return };
        let mode = match mode {
            ChatMode::Temporary => crate::controllers::chat::ChatMode::Temporary,
            _ => crate::controllers::chat::ChatMode::Saved,
        };
        if let Err(e) = a.chat.borrow_mut().set_mode(mode) {
            ui.chat_state().set_status_line(e.to_string().into());
        }
        ui.chat_state().set_editing(false);
        refresh(&ui, &a);
        // Settings' Privacy section says whether a temporary chat is on.
        super::settings::refresh_privacy(&a);
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_new_chat(move || {
        let Some(ui) = w.upgrade() else { return };
        let result = a.chat.borrow_mut().new_chat();
        if let Err(e) = result {
            ui.chat_state().set_status_line(e.to_string().into());
        }
        ui.chat_state().set_editing(false);
        refresh(&ui, &a);
    });
}
