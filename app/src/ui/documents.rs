//! The Documents screen's adapter: the documents controller's list and add state into
//! `DocumentsState`, and the screen's callbacks (add, remove, confirm, cancel) back.

use std::rc::Rc;

use slint::{ModelRc, VecModel};

use super::{AddStatus, App, AppRoot, DocumentItem};
use crate::controllers::documents::{AddState, DocumentsController};

/// The documents controller's state into `DocumentsState` (or that documents are off).
pub(super) fn refresh<R: AppRoot>(ui: &R, app: &App) {
    let s = ui.documents_state();
    let Some(d) = &app.documents else {
        s.set_available(false);
        s.set_items(ModelRc::default());
        return;
    };
    let d = d.borrow();
    let items: Vec<DocumentItem> = d
        .rows()
        .iter()
        .map(|r| DocumentItem {
            id: r.id as i32,
            name: r.name.as_str().into(),
            size: r.size.as_str().into(),
            passages: r.passages as i32,
            added: r.added.as_str().into(),
        })
        .collect();
    s.set_available(true);
    s.set_items(ModelRc::new(VecModel::from(items)));
    let (status, text) = match d.add_state() {
        AddState::Idle => (AddStatus::Idle, ""),
        AddState::Adding(t) => (AddStatus::Adding, t.as_str()),
        AddState::Added(t) => (AddStatus::Added, t.as_str()),
        AddState::Refused(t) => (AddStatus::Refused, t.as_str()),
    };
    s.set_add_status(status);
    s.set_add_text(text.into());
    s.set_status_line(d.status().unwrap_or("").into());
    s.set_confirming(d.confirming().is_some());
    s.set_confirm_name(d.confirming().map_or("", |r| r.name.as_str()).into());
}

/// Forwards the Documents screen's callbacks to the documents controller.
pub(super) fn connect<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.documents_state();
    // Each handler runs `f` on the documents controller, then refreshes the screen.
    fn with_documents<R: AppRoot, A: 'static>(
        ui: &R,
        app: &Rc<App>,
        f: impl Fn(&R, &mut DocumentsController, A) + 'static,
    ) -> impl Fn(A) {
        let (w, a) = (ui.as_weak(), app.clone());
        move |arg| {
            let Some(ui) = w.upgrade() else { return };
            let Some(d) = &a.documents else { return };
            f(&ui, &mut d.borrow_mut(), arg);
            refresh(&ui, &a);
        }
    }
    s.on_add(with_documents(
        ui,
        app,
        |ui, d, path: slint::SharedString| {
            // Busy only when an add runs, and the screen disables Add meanwhile.
            if d.add(&path).is_ok() && d.is_adding() {
                ui.documents_state().set_path("".into());
            }
        },
    ));
    s.on_request_remove(with_documents(ui, app, |_, d, id: i32| {
        d.request_remove(i64::from(id))
    }));
    let cancel = with_documents(ui, app, |_, d, ()| d.cancel_remove());
    s.on_cancel_remove(move || cancel(()));
    let confirm = with_documents(ui, app, |_, d, ()| {
        // Without a pending question there is nothing to remove, and nothing to say.
        let _ = d.confirm_remove();
    });
    s.on_confirm_remove(move || confirm(()));
}
