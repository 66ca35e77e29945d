//! The Documents screen and the chat's "Ask documents" chip, headless, on the real model and
//! the real sentence encoder: a markdown file added by its path is listed with its passages, a
//! question asked under the chip is answered with a source naming the file, the source opens
//! its passage, a file of another kind is refused in plain words, removing asks first and
//! empties the list, and a question with no documents points to the screen. Nothing of the
//! document is in the history's files in the clear. One test per process (see ui_chat.rs).

mod ui_support;

use std::path::Path;

use kostant_app::assistant::ask::NO_DOCUMENTS;
use kostant_app::assistant::documents::EMBEDDER_FILE;
use kostant_app::ui::{AddStatus, AppRoot, DesktopApp};
use slint::{ComponentHandle, Model};
use ui_support::*;

/// A word found nowhere else, to look for in the history's files.
const PLANTED: &str = "Quillfeather";

const GARDEN: &str = "# Quillfeather community garden\n\n\
The garden opens at eight in the morning and closes at sunset. Each member has one plot and \
waters it on their own days.\n\n\
Tomatoes grow best on the south side, near the old brick wall.\n";

/// Runs the event loop until the add that was started has ended.
fn wait_added(ui: &DesktopApp) {
    let w = ui.as_weak();
    run_until("the add ends", move || {
        w.upgrade()
            .is_some_and(|ui| ui.documents_state().get_add_status() != AddStatus::Adding)
    });
}

/// Sends `text` and waits for the reply to end.
fn ask(ui: &DesktopApp, text: &str) {
    type_into(ui, "Message", text);
    press(ui, "Send");
    let w = ui.as_weak();
    run_until("the reply finishes", move || {
        w.upgrade().is_some_and(|ui| !ui.chat_state().get_busy())
    });
}

/// Whether any file under `dir` holds `needle` byte for byte.
fn in_the_clear(dir: &Path, needle: &str) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            return in_the_clear(&p, needle);
        }
        let bytes = std::fs::read(&p).unwrap_or_default();
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    })
}

#[test]
fn a_document_is_added_asked_with_sources_and_removed() {
    init_backend();
    let scratch = Scratch::new("ui-documents");
    // The encoder `scripts/setup.sh` installs beside the chat models.
    let models = kostant_engine::testing::real_model_path();
    std::env::set_var(
        "KOSTANT_EMBEDDER",
        models.parent().unwrap().join(EMBEDDER_FILE),
    );
    let garden = scratch.root.join("garden.md");
    std::fs::write(&garden, GARDEN).unwrap();
    let ui = DesktopApp::new().expect("the desktop window builds");
    let (ui, app) = open_greedy(ui, &scratch.data(), 24);

    // The screen starts empty and says what documents are for.
    press(&ui, "Documents");
    assert!(last_value(&ui, "Documents empty").contains("sealed on this device"));

    // A file of another kind is refused, in plain words.
    type_into(
        &ui,
        "File to add",
        scratch.root.join("notes.docx").to_str().unwrap(),
    );
    press(&ui, "Add document");
    wait_added(&ui);
    let refused = last_value(&ui, "Add status");
    assert_eq!(ui.documents_state().get_add_status(), AddStatus::Refused);
    assert!(refused.contains("not a kind of file"), "{refused}");
    assert!(!refused.contains("Error"), "{refused}");

    // The markdown file goes in and is listed with its passages.
    type_into(&ui, "File to add", garden.to_str().unwrap());
    press(&ui, "Add document");
    assert_eq!(last_value(&ui, "Add status"), "Adding garden.md…");
    wait_added(&ui);
    let added = last_value(&ui, "Add status");
    assert!(added.starts_with("Added garden.md: "), "{added}");
    let items = ui.documents_state().get_items();
    assert_eq!(items.row_count(), 1);
    let row = items.row_data(0).unwrap();
    assert!(row.passages > 0);
    let listed = last_value(&ui, "Document: garden.md");
    assert!(
        listed.contains(&format!("{} passage", row.passages)),
        "{listed}"
    );

    // Asked under the chip: the question stands as typed, the reply names its source.
    press(&ui, "Chat");
    press(&ui, "Feature: Ask documents");
    let question = format!("When does the {PLANTED} garden open?");
    ask(&ui, &question);
    assert_eq!(last_value(&ui, "Your message"), question);
    let messages = ui.chat_state().get_messages();
    let reply = messages.row_data(messages.row_count() - 1).unwrap();
    assert_eq!(
        reply.status,
        kostant_app::ui::MessageStatus::Done,
        "{}",
        reply.text
    );
    assert!(
        reply.sources.row_count() > 0,
        "no sources under {:?}",
        reply.text
    );
    let source = reply.sources.row_data(0).unwrap().to_string();
    assert!(
        source.starts_with("[") && source.contains("garden.md"),
        "{source}"
    );

    // Tapping the source shows its passage.
    press(&ui, &format!("Source {source}"));
    assert!(ui.chat_state().get_source_open());
    assert!(last_value(&ui, "Passage source").contains("garden.md"));
    let passage = last_value(&ui, "Passage text");
    assert!(
        ["eight in the morning", PLANTED]
            .iter()
            .any(|w| passage.contains(w)),
        "{passage}"
    );
    press(&ui, "Close passage");
    assert!(!ui.chat_state().get_source_open());

    // The history keeps the question and the reply sealed, and the document too.
    assert!(
        !in_the_clear(&scratch.data(), PLANTED),
        "the document is in the clear"
    );
    assert!(
        !in_the_clear(&scratch.data(), "brick wall"),
        "a passage is in the clear"
    );

    // Removing asks first, then empties the list.
    press(&ui, "Documents");
    press(&ui, "Remove garden.md");
    assert_eq!(
        last_value(&ui, "Remove question"),
        "Remove garden.md? Its passages are deleted from this device."
    );
    press(&ui, "Cancel remove");
    assert_eq!(ui.documents_state().get_items().row_count(), 1);
    press(&ui, "Remove garden.md");
    press(&ui, "Confirm remove");
    assert_eq!(ui.documents_state().get_items().row_count(), 0);
    assert!(exists(&ui, "Documents empty"));

    // With no documents left, the chat says so and points to the screen (no model run).
    press(&ui, "Chat");
    ask(&ui, "Where do tomatoes grow best?");
    assert_eq!(last_value(&ui, "Assistant reply"), NO_DOCUMENTS);

    app.shutdown();
}
