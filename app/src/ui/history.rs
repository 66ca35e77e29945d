//! The History screen's adapter: the history controller's list into `HistoryState`, and the
//! screen's callbacks back.

use std::rc::Rc;

use slint::{ModelRc, VecModel};

use super::{chat, App, AppRoot, HistoryItem};
use crate::controllers::history::HistoryController;
use crate::error::AppError;

/// The history controller's list into `HistoryState` (or why the history is off).
pub(super) fn refresh<R: AppRoot>(ui: &R, app: &App) {
    let s = ui.history_state();
    let Some(h) = &app.history else {
        s.set_items(ModelRc::default());
        s.set_status_line("History is off: chats are not saved (no data directory or key).".into());
        return;
    };
    let h = h.borrow();
    let items: Vec<HistoryItem> = h
        .items()
        .iter()
        .map(|c| HistoryItem {
            id: c.id as i32,
            title: c.title.as_str().into(),
            when: c.when.as_str().into(),
            count: c.messages as i32,
        })
        .collect();
    s.set_items(ModelRc::new(VecModel::from(items)));
    s.set_confirming(h.confirming_delete_all());
    s.set_status_line(h.status().unwrap_or("").into());
}

/// Forwards the History screen's callbacks (search, open, delete, delete all) to the
/// history controller, and what they change of the chat to the chat controller.
pub(super) fn connect<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.history_state();
    // Each handler runs `f` on the history controller, then refreshes the screen.
    fn with_history<R: AppRoot>(
        ui: &R,
        app: &Rc<App>,
        f: impl Fn(&R, &App, &mut HistoryController) -> Result<(), AppError> + 'static,
    ) -> impl Fn() {
        let (w, a) = (ui.as_weak(), app.clone());
        move || {
            let Some(ui) = w.upgrade() else { return };
            let Some(h) = &a.history else { return };
            let result = f(&ui, &a, &mut h.borrow_mut());
            refresh(&ui, &a);
            if let Err(e) = result {
                ui.history_state().set_status_line(e.to_string().into());
            }
        }
    }
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_search(move |q| {
        if let (Some(ui), Some(h)) = (w.upgrade(), &a.history) {
            h.borrow_mut().search(&q);
            refresh(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_open(move |id| {
        let Some(ui) = w.upgrade() else { return };
        if let Err(e) = chat::open_conversation(&ui, &a, i64::from(id)) {
            ui.history_state().set_status_line(e.into());
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_delete(move |id| {
        let (Some(ui), Some(h)) = (w.upgrade(), &a.history) else {
            return;
        };
        let result = h.borrow_mut().delete(i64::from(id));
        a.chat.borrow_mut().forget_conversation(Some(i64::from(id)));
        refresh(&ui, &a);
        if let Err(e) = result {
            ui.history_state().set_status_line(e.to_string().into());
        }
    });
    s.on_request_delete_all(with_history(ui, app, |_, _, h| {
        h.request_delete_all();
        Ok(())
    }));
    s.on_cancel_delete_all(with_history(ui, app, |_, _, h| {
        h.cancel_delete_all();
        Ok(())
    }));
    s.on_confirm_delete_all(with_history(ui, app, |ui, a, h| {
        h.confirm_delete_all()?;
        a.chat.borrow_mut().forget_conversation(None);
        // Delete-all takes the documents too.
        if let Some(d) = &a.documents {
            d.borrow_mut().refresh();
        }
        super::documents::refresh(ui, a);
        Ok(())
    }));
}
