//! The chat and history controllers without a UI and without a model: a scripted responder
//! stands in for the engine (and, for the withdrawn/refused paths, for the guard), so every
//! path of the seam is exercised here; the real model runs in app/tests/ui_*.rs.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use kostant_engine::CancelHandle;
use kostant_safety::{policy, Category, StoppedBy, Verdict};

use super::chat::*;
use super::history::HistoryController;
use super::message::MessageState;
use super::{no_notify, AppError, SharedStore};
use crate::assistant::notices::not_restored_notice;
use crate::assistant::responder::*;
use crate::assistant::worker::ModelState;
use crate::features::Feature;
use crate::history::{Role, Store};

/// What the scripted responder does for one reply.
#[derive(Clone)]
enum Script {
    /// Emits these tokens, then answers with their concatenation.
    Answer(Vec<&'static str>),
    /// Emits one token, then waits for Stop and reports `Stopped`.
    UntilStopped,
    /// Emits tokens, then withdraws them (the guard's late stop), naming the category when the
    /// guard is confident in one.
    Withdraw(Option<Category>),
    /// Refuses outright (the guard's early stop), likewise.
    Refuse(Option<Category>),
    /// Proofreads the message as the model would have (this output for each sentence), sends
    /// the changes the rule keeps, then the corrected text.
    Proofread(&'static str),
    Fail,
}

struct Scripted {
    scripts: Vec<Script>,
    /// Every request seen, so tests can check the system prompt and the turns.
    seen: Arc<Mutex<Vec<ReplyRequest>>>,
}

impl Responder for Scripted {
    fn respond(
        &mut self,
        req: &ReplyRequest,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    ) {
        self.seen.lock().unwrap().push(req.clone());
        let script = if self.scripts.is_empty() {
            Script::Answer(vec!["ok"])
        } else {
            self.scripts.remove(0)
        };
        let done = |text: &str, verdict| {
            ReplyEvent::Done(ReplyOutcome {
                text: text.into(),
                verdict,
                stats: Some(ReplyStats {
                    prompt_tokens: 10,
                    reused_tokens: 0,
                    generated_tokens: 2,
                    ttft_ms: 12.0,
                    decode_tok_s: 34.5,
                    // Chat runs without one here (as on a model no adapter was trained on), so
                    // the readout's no-adapter case is covered too.
                    adapter: (req.feature != Feature::Chat).then(|| req.feature.id().to_string()),
                }),
                context: None,
                notice: None,
            })
        };
        match script {
            Script::Answer(tokens) => {
                for t in &tokens {
                    emit(ReplyEvent::Token(t.to_string()));
                }
                emit(done(&tokens.concat(), Verdict::Answered));
            }
            Script::UntilStopped => {
                emit(ReplyEvent::Token("partial".into()));
                // Bounded so a broken Stop fails the test instead of hanging it.
                for _ in 0..20_000 {
                    if cancel.is_cancelled() {
                        let by = StoppedBy::User;
                        return emit(done("partial", Verdict::Stopped { by, category: None }));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                emit(ReplyEvent::Failed("never stopped".into()));
            }
            // As the pipeline does it: the shown text withdrawn (bytes 0..len), the notice in
            // its place, then `Stopped` by the guard with the notice as the final text.
            Script::Withdraw(category) => {
                let notice = policy::withdrawn_notice(category);
                emit(ReplyEvent::Token("Here is ".into()));
                emit(ReplyEvent::Token("how to".into()));
                emit(ReplyEvent::Withdrawn {
                    from: 0,
                    to: "Here is how to".len(),
                    notice: notice.clone(),
                });
                let by = StoppedBy::Guard;
                emit(done(&notice, Verdict::Stopped { by, category }));
            }
            // The pipeline streams the refusal as one token, then ends `Refused`.
            Script::Refuse(category) => {
                emit(ReplyEvent::Token(policy::refusal(category).into()));
                emit(done(
                    policy::refusal(category),
                    Verdict::Refused { category },
                ));
            }
            Script::Proofread(output) => {
                let user = &req.turns.last().unwrap().content;
                let p = crate::assistant::proofread::proofread(user, |_| {
                    Ok::<_, ()>(output.to_string())
                })
                .unwrap();
                let text = p.corrected.clone();
                emit(ReplyEvent::Token(text.clone()));
                emit(ReplyEvent::Changes(p));
                emit(done(&text, Verdict::Answered));
            }
            Script::Fail => emit(ReplyEvent::Failed("the model broke".into())),
        }
    }
}

fn factory(scripts: Vec<Script>) -> (ResponderFactory, Arc<Mutex<Vec<ReplyRequest>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let f: ResponderFactory = Box::new(move || {
        let summary = ModelSummary {
            name: "scripted".into(),
            quantization: "none".into(),
            path: PathBuf::from("scripted"),
            file_bytes: 0,
            memory_plans: [(256, 1), (4096, 2)]
                .map(|(n_ctx, total)| ContextPlan {
                    kv_type: kostant_engine::KvType::F16,
                    n_ctx,
                    total,
                    kv: total,
                    guard: 0,
                })
                .to_vec(),
            n_ctx_train: 4096,
            fingerprint: "scripted".into(),
        };
        Ok((
            Box::new(Scripted { scripts, seen: s }) as Box<dyn Responder>,
            summary,
        ))
    });
    (f, seen)
}

/// A history store in a fresh temporary directory with its key apart.
struct TempStore {
    root: PathBuf,
    store: SharedStore,
}

impl TempStore {
    fn new(name: &str) -> TempStore {
        let root = std::env::temp_dir().join(format!(
            "kostant-app-ctl-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("keys")).unwrap();
        let keys = kostant_platform::keystore::FileKeyStore::new(root.join("keys"));
        let store = Store::open(&root.join("data").join("history.sqlite3"), keys).unwrap();
        TempStore {
            root,
            store: Rc::new(RefCell::new(store)),
        }
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn chat(
    scripts: Vec<Script>,
    store: Option<SharedStore>,
) -> (ChatController, Arc<Mutex<Vec<ReplyRequest>>>) {
    let (f, seen) = factory(scripts);
    let mut c = ChatController::new(f, store, no_notify());
    c.wait_ready().unwrap();
    (c, seen)
}

#[test]
fn a_reply_streams_into_the_last_message_and_is_saved() {
    let t = TempStore::new("stream");
    let (mut c, seen) = chat(
        vec![Script::Answer(vec!["Par", "is", "."])],
        Some(t.store.clone()),
    );
    c.send("  What is the capital of France?  ").unwrap();
    assert!(c.is_busy());
    assert_eq!(c.messages().last().unwrap().state, MessageState::Streaming);
    // The first event is one token: the reply grows before it is done.
    c.wait_event().unwrap();
    assert_eq!(c.messages()[1].text, "Par");
    assert!(c.is_busy());
    c.wait_idle().unwrap();
    assert_eq!(c.messages()[1].text, "Paris.");
    assert_eq!(c.messages()[1].state, MessageState::SENT);
    assert_eq!(c.readout(), "TTFT 12 ms · 34.5 tok/s · 2 tokens");
    // The prompt carried the terminal chat's system prompt and the trimmed message.
    let req = &seen.lock().unwrap()[0];
    assert_eq!(req.system, policy::default_system_prompt());
    assert_eq!(c.messages()[1].state.verdict(), Some(Verdict::Answered));
    assert_eq!(req.turns.len(), 1);
    assert_eq!(req.turns[0].content, "What is the capital of France?");
    // Saved: one conversation titled by the question, two messages.
    let id = c.conversation().unwrap();
    let store = t.store.borrow();
    let msgs = store.messages(id).unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1].text.as_ref().unwrap(), "Paris.");
}

#[test]
fn stop_keeps_what_was_generated_and_marks_it_stopped() {
    let (mut c, _) = chat(vec![Script::UntilStopped], None);
    c.send("Tell me a long story").unwrap();
    c.wait_event().unwrap();
    assert_eq!(c.messages()[1].text, "partial");
    assert!(
        c.send("again").is_err(),
        "a second send while busy is refused"
    );
    c.stop();
    c.wait_idle().unwrap();
    assert_eq!(
        c.messages()[1].state,
        MessageState::Finished(Verdict::Stopped {
            by: StoppedBy::User,
            category: None
        })
    );
    assert_eq!(c.messages()[1].text, "partial");
    assert_eq!(c.messages()[1].state.caption(), "Stopped");
    assert!(!c.is_busy());
}

#[test]
fn regenerate_and_edit_replace_the_last_exchange_in_the_history() {
    let t = TempStore::new("regen");
    let (mut c, seen) = chat(
        vec![
            Script::Answer(vec!["one"]),
            Script::Answer(vec!["two"]),
            Script::Answer(vec!["three"]),
        ],
        Some(t.store.clone()),
    );
    c.send("first").unwrap();
    c.wait_idle().unwrap();
    c.regenerate().unwrap();
    c.wait_idle().unwrap();
    assert_eq!(c.messages().len(), 2);
    assert_eq!(c.messages()[1].text, "two");
    assert_eq!(c.last_user_text(), Some("first"));
    c.edit_last("second").unwrap();
    c.wait_idle().unwrap();
    let texts: Vec<&str> = c.messages().iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["second", "three"]);
    // The regenerate request did not include the dropped reply.
    assert_eq!(seen.lock().unwrap()[1].turns.len(), 1);
    let id = c.conversation().unwrap();
    let stored: Vec<String> = t
        .store
        .borrow()
        .messages(id)
        .unwrap()
        .into_iter()
        .map(|m| m.text.unwrap())
        .collect();
    assert_eq!(stored, ["second", "three"]);
}

#[test]
fn feature_chips_change_the_system_prompt() {
    let (mut c, seen) = chat(vec![], None);
    let mut prompts = Vec::new();
    for f in Feature::ALL {
        c.set_feature(f);
        c.send("text").unwrap();
        c.wait_idle().unwrap();
        prompts.push(seen.lock().unwrap().last().unwrap().system.clone());
    }
    for (i, p) in prompts.iter().enumerate() {
        assert!(p.contains(policy::TONE_RULES), "{p}");
        for q in &prompts[i + 1..] {
            assert_ne!(p, q);
        }
    }
    assert!(prompts[1].contains("Summarize"));
    assert!(prompts[3].contains("Rewrite"));
    // Each request names its feature, so the responder can put that feature's adapter on,
    // and the readout names the adapter a reply ran under.
    let features: Vec<Feature> = seen.lock().unwrap().iter().map(|r| r.feature).collect();
    assert_eq!(features, Feature::ALL);
    assert!(
        c.readout().ends_with("· proofread adapter"),
        "{}",
        c.readout()
    );
    c.set_feature(Feature::Chat);
    c.send("text").unwrap();
    c.wait_idle().unwrap();
    assert!(!c.readout().contains("adapter"), "{}", c.readout());
}

#[test]
fn a_withdrawn_reply_shows_the_notice_and_a_refusal_its_text() {
    let weapons = Some(Category::IndiscriminateWeapons);
    let scripts = vec![
        Script::Withdraw(weapons),
        Script::Refuse(weapons),
        Script::Fail,
        Script::Refuse(None),
        Script::Withdraw(None),
    ];
    let (mut c, _) = chat(scripts, None);
    c.send("how do I build a weapon").unwrap();
    // Two tokens, then the withdrawal: the shown text is replaced, not appended to.
    for _ in 0..3 {
        c.wait_event().unwrap();
    }
    assert_eq!(c.messages()[1].text, policy::withdrawn_notice(weapons));
    assert!(c.messages()[1].state.is_withdrawn());
    c.wait_idle().unwrap();
    assert!(c.messages()[1].state.is_withdrawn());
    assert_eq!(c.messages()[1].text, policy::withdrawn_notice(weapons));
    let caption = c.messages()[1].state.caption();
    assert_eq!(caption, "Withdrawn · Indiscriminate weapons");
    c.send("and now?").unwrap();
    c.wait_idle().unwrap();
    assert!(matches!(
        c.messages()[3].state,
        MessageState::Finished(Verdict::Refused { .. })
    ));
    assert_eq!(c.messages()[3].text, policy::refusal(weapons));
    let caption = c.messages()[3].state.caption();
    assert_eq!(caption, "Refused · Indiscriminate weapons");
    c.send("once more").unwrap();
    c.wait_idle().unwrap();
    assert_eq!(c.messages()[5].state, MessageState::Failed);
    assert_eq!(c.status(), Some("the model broke"));
    assert_eq!(c.copy_text(3).as_deref(), Some(policy::refusal(weapons)));
    assert_eq!(c.copy_text(99), None);

    // Not confident in a category: the neutral texts, and a caption that names none.
    c.send("a benign question the guard flags").unwrap();
    c.wait_idle().unwrap();
    assert!(matches!(
        c.messages()[7].state,
        MessageState::Finished(Verdict::Refused { .. })
    ));
    assert_eq!(c.messages()[7].text, policy::refusal(None));
    assert_eq!(c.messages()[7].state.caption(), "Refused");
    c.send("another").unwrap();
    c.wait_idle().unwrap();
    assert!(c.messages()[9].state.is_withdrawn());
    assert_eq!(c.messages()[9].text, policy::withdrawn_notice(None));
    assert_eq!(c.messages()[9].state.caption(), "Withdrawn");
}

#[test]
fn a_refused_or_withdrawn_exchange_stays_on_screen_but_leaves_the_models_context() {
    let scripts = vec![
        Script::Answer(vec!["A fuse melts."]),
        Script::Refuse(None),
        Script::Withdraw(None),
        Script::UntilStopped,
        Script::Answer(vec!["ok"]),
    ];
    let (mut c, seen) = chat(scripts, None);
    for text in ["what is a fuse", "flagged one", "withdrawn one"] {
        c.send(text).unwrap();
        c.wait_idle().unwrap();
    }
    c.send("stopped one").unwrap();
    c.wait_event().unwrap();
    c.stop();
    c.wait_idle().unwrap();
    c.send("and a fuse box?").unwrap();
    c.wait_idle().unwrap();
    // All ten messages are on screen.
    assert_eq!(c.messages().len(), 10);
    assert!(matches!(
        c.messages()[3].state,
        MessageState::Finished(Verdict::Refused { .. })
    ));
    assert!(c.messages()[5].state.is_withdrawn());
    // The model was sent the answered and the user-stopped exchanges, not the other two.
    let last = seen.lock().unwrap().last().unwrap().turns.clone();
    let texts: Vec<&str> = last.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        texts,
        [
            "what is a fuse",
            "A fuse melts.",
            "stopped one",
            "partial",
            "and a fuse box?"
        ]
    );
}

#[test]
fn empty_messages_and_actions_without_a_target_are_refused() {
    let (mut c, _) = chat(vec![], None);
    assert!(matches!(c.send("   "), Err(AppError::EmptyMessage)));
    assert!(matches!(c.regenerate(), Err(AppError::Nothing(_))));
    assert!(matches!(c.edit_last("x"), Err(AppError::Nothing(_))));
}

#[test]
fn a_model_that_fails_to_load_is_reported() {
    let f: ResponderFactory =
        Box::new(|| -> LoadResult { Err(AppError::ModelNotReady("no file".into())) });
    let mut c = ChatController::new(f, None, no_notify());
    assert!(c.wait_ready().is_err());
    assert!(matches!(c.model(), ModelState::Failed(e) if e.contains("no file")));
    assert!(matches!(c.send("hi"), Err(AppError::ModelNotReady(_))));
}

#[test]
fn history_lists_newest_first_searches_opens_and_deletes_after_confirmation() {
    let t = TempStore::new("history");
    let (mut c, _) = chat(
        vec![
            Script::Answer(vec!["Paris"]),
            Script::Answer(vec!["Blue whale"]),
        ],
        Some(t.store.clone()),
    );
    c.send("Capital of France?").unwrap();
    c.wait_idle().unwrap();
    c.new_chat().unwrap();
    c.send("Largest animal?").unwrap();
    c.wait_idle().unwrap();

    let mut h = HistoryController::new(t.store.clone());
    let titles: Vec<&str> = h.items().iter().map(|i| i.title.as_str()).collect();
    assert_eq!(titles, ["Largest animal?", "Capital of France?"]);
    h.search("paris");
    assert_eq!(h.items().len(), 1);
    assert_eq!(h.items()[0].title, "Capital of France?");
    h.search("");
    assert_eq!(h.items().len(), 2);

    // Open the older one and continue it: the new exchange lands in that conversation.
    let old = h.items()[1].id;
    let turns = h.open(old).unwrap();
    assert_eq!(turns[0], (Role::User, "Capital of France?".to_string()));
    c.open_conversation(old, turns).unwrap();
    c.send("And of Italy?").unwrap();
    c.wait_idle().unwrap();
    assert_eq!(c.conversation(), Some(old));
    h.refresh();
    assert_eq!(h.items()[0].id, old, "continuing moves it to the top");
    assert_eq!(h.items()[0].messages, 4);

    h.delete(old).unwrap();
    c.forget_conversation(Some(old));
    assert_eq!(h.items().len(), 1);

    // Delete-all needs its confirmation step.
    assert!(h.confirm_delete_all().is_err());
    assert_eq!(h.items().len(), 1);
    h.request_delete_all();
    assert!(h.confirming_delete_all());
    h.cancel_delete_all();
    assert!(h.confirm_delete_all().is_err());
    h.request_delete_all();
    assert_eq!(h.confirm_delete_all().unwrap(), 1);
    assert!(h.items().is_empty());
    // After the new data key, the chat saves again (one shared connection).
    c.forget_conversation(None);
    c.send("Still saving?").unwrap();
    c.wait_idle().unwrap();
    h.refresh();
    assert_eq!(h.items().len(), 1);
}

#[test]
fn a_context_kept_under_another_context_memory_is_named_in_settings_words() {
    use kostant_engine::{KvType, Model, Session};
    let model =
        Model::load(&kostant_engine::testing::real_model_path()).expect("the default model");
    let saved = Session::new(model.clone(), 64)
        .unwrap()
        .snapshot_header()
        .to_bytes();
    let compact = Session::with_kv_type(model.clone(), 64, KvType::Q8_0).unwrap();
    let why = "it was saved with the f16 kv cache and this session uses q8_0";
    let text = not_restored_notice(&saved, &compact, &why);
    assert_eq!(
        text,
        "This conversation was kept with the Exact context memory and Settings now use Compact, so it was read again."
    );
    // Settings' words only: nothing a person would have to look up.
    for jargon in ["kv", "f16", "q8_0", "cache", "error"] {
        assert!(!text.contains(jargon), "{jargon}: {text}");
    }
    // Anything else keeps its reason: here the same cache type, so the type is not the cause.
    let exact = Session::new(model, 64).unwrap();
    let text = not_restored_notice(&saved, &exact, &"its cache shape differs");
    assert!(text.contains("(its cache shape differs)"), "{text}");
    let text = not_restored_notice(b"not a header", &compact, &"the header does not read");
    assert!(text.contains("(the header does not read)"), "{text}");
}

#[test]
fn a_temporary_chat_saves_nothing_and_is_forgotten_when_left() {
    let t = TempStore::new("temporary");
    let (mut c, seen) = chat(
        vec![
            Script::Answer(vec!["Hi", "."]),
            Script::Answer(vec!["Yes."]),
        ],
        Some(t.store.clone()),
    );
    c.set_mode(ChatMode::Temporary).unwrap();
    assert_eq!(c.mode(), ChatMode::Temporary);
    c.send("Remember the word apricot.").unwrap();
    c.wait_idle().unwrap();
    assert_eq!(c.messages()[1].text, "Hi.");
    assert_eq!(c.conversation(), None, "no history entry");
    assert!(t.store.borrow().list().unwrap().is_empty());
    assert!(!c.messages()[1].saved);

    // Leaving it clears the screen, and the next request tells the responder to forget what
    // it kept of the temporary chat.
    c.set_mode(ChatMode::Saved).unwrap();
    assert!(c.messages().is_empty());
    c.send("Anything?").unwrap();
    c.wait_idle().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[1].origin, ContextOrigin::Switched(None));
    assert_eq!(
        seen[1].turns.len(),
        1,
        "the temporary exchange is not sent again"
    );
    assert_eq!(seen[0].conversation, None);
    drop(seen);
    // Saved again: this one is in the history.
    assert_eq!(t.store.borrow().list().unwrap().len(), 1);
}

#[test]
fn the_mode_does_not_change_while_a_reply_runs() {
    let (mut c, _) = chat(vec![Script::UntilStopped], None);
    c.send("Tell me a long story").unwrap();
    c.wait_event().unwrap();
    assert!(matches!(
        c.set_mode(ChatMode::Temporary),
        Err(AppError::Busy)
    ));
    assert_eq!(c.mode(), ChatMode::Saved);
    c.stop();
    c.wait_idle().unwrap();
}

#[test]
fn a_proofread_reply_copies_only_the_changes_accepted() {
    let model_said = "We were going to the beach on Saturday.";
    let (mut c, _) = chat(vec![Script::Proofread(model_said)], None);
    c.set_feature(Feature::Proofread);
    c.send("We was going too the beach on sunday.").unwrap();
    c.wait_idle().unwrap();
    // The day the model changed is not among the changes; the reply shows the rest.
    assert_eq!(
        c.messages()[1].text,
        "We were going to the beach on sunday."
    );
    let review = c.messages()[1].review.clone().expect("the changes");
    assert_eq!(review.rows().len(), 2, "{:?}", review.rows());
    // Nothing is accepted yet: Copy gives the user's own text.
    assert_eq!(
        c.copy_text(1).as_deref(),
        Some("We was going too the beach on sunday.")
    );
    c.toggle_change(1, 0);
    assert_eq!(
        c.copy_text(1).as_deref(),
        Some("We were going too the beach on sunday.")
    );
    c.accept_all_changes(1);
    assert_eq!(
        c.copy_text(1).as_deref(),
        Some("We were going to the beach on sunday.")
    );
    assert!(c.messages()[0].review.is_none());
}

#[test]
fn a_reply_with_three_suggestions_offers_them_and_a_refused_one_none() {
    use crate::assistant::choices::{Shape, SummaryLength, Tone};
    let (mut c, seen) = chat(
        vec![
            Script::Answer(vec![
                "1. Sure, see you then!",
                "\n2. Sorry, I can't.",
                "\n3. Friday?",
            ]),
            Script::Refuse(None),
            Script::Answer(vec!["- a\n- b\n- c"]),
        ],
        None,
    );
    c.set_feature(Feature::Reply);
    c.send("Lunch on Friday?").unwrap();
    c.wait_idle().unwrap();
    // The request asked for the shape, under its own prompt.
    let req = seen.lock().unwrap()[0].clone();
    assert_eq!(req.shape, Some(Shape::Choices));
    assert_eq!(req.system, Shape::Choices.system_prompt());
    assert_eq!(c.messages()[1].choices.len(), 3);
    // A chip fills the composer with its suggestion; there is no fourth.
    assert_eq!(c.choice(1, 1), Some("Sorry, I can't."));
    assert_eq!(c.choice(1, 3), None);
    assert_eq!(c.choice(0, 0), None);
    c.send("Something the guard refuses").unwrap();
    c.wait_idle().unwrap();
    assert!(c.messages()[3].choices.is_empty());
    // Summarize at a length asks for bullets; its bullets are not suggestions.
    c.set_feature(Feature::Summarize);
    c.set_length(Some(SummaryLength::Short));
    c.set_tone(Some(Tone::Formal));
    c.send("Long text").unwrap();
    c.wait_idle().unwrap();
    let req = seen.lock().unwrap()[2].clone();
    assert_eq!(req.shape, Some(Shape::Bullets(SummaryLength::Short)));
    assert!(
        req.system.contains("exactly 3 bullet points"),
        "{}",
        req.system
    );
    assert!(c.messages()[5].choices.is_empty());
}

#[test]
fn summarize_and_rewrite_offer_a_length_and_a_tone() {
    use crate::assistant::choices::{Shape, SummaryLength, Tone};
    let (mut c, seen) = chat(vec![], None);
    assert_eq!(c.shape_options(), None);
    c.set_feature(Feature::Summarize);
    let (name, options) = c.shape_options().unwrap();
    assert_eq!(
        (name, options),
        ("Length", vec!["Sentences", "Short", "Medium"])
    );
    assert_eq!(c.shape_option(), 0);
    c.set_shape_option(2);
    assert_eq!(
        (c.shape_option(), c.length()),
        (2, Some(SummaryLength::Medium))
    );
    c.set_shape_option(9);
    assert_eq!(
        c.length(),
        Some(SummaryLength::Medium),
        "past the options: ignored"
    );
    c.set_feature(Feature::Rewrite);
    assert_eq!(c.shape_options().unwrap().1[2], "More formal");
    c.set_shape_option(2);
    assert_eq!(c.tone(), Some(Tone::Formal));
    c.send("hey can't come").unwrap();
    c.wait_idle().unwrap();
    assert_eq!(
        seen.lock().unwrap()[0].shape,
        Some(Shape::Rewrite(Tone::Formal))
    );
    // Back to the plain rewrite, and each chip keeps its own choice.
    c.set_shape_option(0);
    assert_eq!(c.tone(), None);
    c.set_feature(Feature::Summarize);
    assert_eq!(c.shape_option(), 2);
}
