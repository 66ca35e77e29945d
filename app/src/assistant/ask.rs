//! "Ask documents" in the chat: a [`Responder`] around the guarded one that, for a question
//! under [`Feature::Documents`], finds its passages on the chat's worker thread, gives the
//! model the numbered passages in the system prompt ([`ask_system_prompt`]) with the question
//! as typed (which the guard reads, as it reads the reply), and reports the reply's sources
//! before its end. Other features pass straight through. Also the encoder shared
//! with the Documents screen ([`SharedLibrary`]) and the screen's [`Adder`].
//!
//! Only the request's system prompt changes: the chat shows (and the history saves) the
//! question as typed and the reply; the passages are never written to the conversation.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use kostant_engine::{CancelHandle, Role};
use kostant_safety::{Guard, Verdict};

use super::documents::{
    answer_without_passages, ask_system_prompt, citations, passage_label, AddedDocument, DocsError,
    FoundPassage, Library, ASK_PASSAGES, NOTHING_FOUND,
};
use super::responder::{ReplyEvent, ReplyOutcome, ReplyRequest, Responder, ResponderFactory};
use crate::features::Feature;

/// The reply to a question asked before any document was added.
pub const NO_DOCUMENTS: &str =
    "You have no documents yet. Add one on the Documents screen, then ask again.";

/// The reply when there is no history to keep documents in (turned off for this run).
pub const DOCUMENTS_OFF: &str = "Documents are kept in the encrypted history, which is off \
     for this run, so there are no documents to ask.";

/// One passage a reply stands on, as the chat shows it under the reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// The passage's number in the prompt, as the reply cites it (`[n]`).
    pub n: usize,
    /// Where it is: "lease.md, page 2, Money › Deposit".
    pub label: String,
    pub text: String,
    /// The passage as found (document, place, scores): what `kostant docs ask --json` prints.
    pub passage: FoundPassage,
}

/// The reply's sources, from the passages the model was given.
pub fn sources(reply: &str, passages: &[FoundPassage]) -> Vec<Source> {
    citations(reply, passages)
        .into_iter()
        .map(|(n, p)| Source {
            n,
            label: passage_label(p),
            text: p.text.clone(),
            passage: p.clone(),
        })
        .collect()
}

/// The sentence encoder, loaded on first use and shared by the chat's worker (questions) and
/// the Documents screen (adding files), so the process holds it once.
#[derive(Clone, Default)]
pub struct SharedLibrary(Arc<Mutex<Option<Library>>>);

impl SharedLibrary {
    /// Runs `f` on the library, loading it first if needed. Callers take turns: adding a file
    /// and answering a question do not embed at the same time on a phone's few cores.
    pub fn with<T>(&self, f: impl FnOnce(&Library) -> T) -> Result<T, DocsError> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(Library::open()?);
        }
        Ok(f(slot.as_ref().expect("loaded just above")))
    }
}

/// Adds one file to the index and says how it went; the Documents screen runs it on a worker
/// thread.
pub type Adder = Arc<dyn Fn(&Path) -> Result<AddedDocument, DocsError> + Send + Sync>;

/// The app's [`Adder`]: the file read and embedded with the shared library, then stored
/// sealed in `data_dir`'s history over a connection of its own (the worker cannot share the
/// UI thread's).
pub fn library_adder(data_dir: PathBuf, library: SharedLibrary) -> Adder {
    Arc::new(move |path: &Path| {
        let mut store = crate::history::open_default(&data_dir)?;
        library.with(|l| l.add(&mut store, path))?
    })
}

/// What to do with one request.
enum Plan {
    /// Not a documents question: the inner responder answers it as it is.
    Pass,
    /// Answer so, without the model (the guard has read the question).
    Say(String, Verdict),
    /// Answer this request, whose system prompt holds these passages.
    Ask(ReplyRequest, Vec<FoundPassage>),
}

/// The guarded responder with documents to ask.
pub struct AskDocuments {
    inner: Box<dyn Responder>,
    /// Where the history (and so the documents) lives; `None` when it is off.
    data_dir: Option<PathBuf>,
    library: SharedLibrary,
}

impl AskDocuments {
    pub fn new(
        inner: Box<dyn Responder>,
        data_dir: Option<PathBuf>,
        library: SharedLibrary,
    ) -> AskDocuments {
        AskDocuments {
            inner,
            data_dir,
            library,
        }
    }

    /// Finds the passages for the question and has the guard read them, or decides what to
    /// say without the model. Errors are sentences for the person.
    fn plan(&mut self, req: &ReplyRequest) -> Result<Plan, String> {
        let question = match req.turns.last() {
            Some(m) if req.feature == Feature::Documents && m.role == Role::User => &m.content,
            _ => return Ok(Plan::Pass),
        };
        let guard = self.inner.screening_guard().ok_or(NO_GUARD)?;
        let Some(dir) = &self.data_dir else {
            return instead(guard, question, DOCUMENTS_OFF);
        };
        // Its own connection, opened for this question: the worker thread cannot share the
        // UI thread's, and a fresh one always has the history's current key.
        let store = crate::history::open_default(dir).map_err(|e| e.to_string())?;
        if store.documents().map_err(|e| e.to_string())?.is_empty() {
            return instead(guard, question, NO_DOCUMENTS);
        }
        let found = self
            .library
            .with(|l| l.search(&store, question, ASK_PASSAGES))
            .and_then(|r| r)
            .map_err(|e| e.to_string())?;
        if !found.relevant {
            return instead(guard, question, NOTHING_FOUND);
        }
        let mut asked = req.clone();
        asked.system = ask_system_prompt(&found.passages);
        Ok(Plan::Ask(asked, found.passages))
    }
}

/// Why a documents question cannot be answered by a responder without a guard.
const NO_GUARD: &str = "documents can only be asked through the on-device safety check";

/// `text` as the reply, once the guard has read the question: a question it flags gets the
/// policy's refusal instead, as in the chat.
fn instead(guard: &mut Guard, question: &str, text: &str) -> Result<Plan, String> {
    let (reply, verdict) = answer_without_passages(guard, question).map_err(|e| e.to_string())?;
    Ok(match verdict {
        Verdict::Answered => Plan::Say(text.to_string(), verdict),
        _ => Plan::Say(reply, verdict),
    })
}

/// A reply made without the model.
fn said(text: String, verdict: Verdict) -> ReplyEvent {
    ReplyEvent::Done(ReplyOutcome {
        text,
        verdict,
        stats: None,
        context: None,
        notice: None,
    })
}

impl Responder for AskDocuments {
    fn respond(
        &mut self,
        req: &ReplyRequest,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    ) {
        match self.plan(req) {
            Err(e) => emit(ReplyEvent::Failed(e)),
            Ok(Plan::Pass) => self.inner.respond(req, cancel, emit),
            Ok(Plan::Say(text, verdict)) => emit(said(text, verdict)),
            Ok(Plan::Ask(req, passages)) => self.inner.respond(&req, cancel, &mut |ev| {
                // A refusal or a withdrawn reply stands on nothing: no sources under it.
                if let ReplyEvent::Done(o) = &ev {
                    if !o.verdict.by_guard() {
                        emit(ReplyEvent::Sources(sources(&o.text, &passages)));
                    }
                }
                emit(ev)
            }),
        }
    }

    fn screening_guard(&mut self) -> Option<&mut Guard> {
        self.inner.screening_guard()
    }
}

/// `factory`'s responder, able to ask the documents kept in `data_dir`'s history.
pub fn with_documents(
    factory: ResponderFactory,
    data_dir: Option<PathBuf>,
    library: SharedLibrary,
) -> ResponderFactory {
    Box::new(move || {
        let (inner, summary) = factory()?;
        let r = AskDocuments::new(inner, data_dir, library);
        Ok((Box::new(r) as Box<dyn Responder>, summary))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::documents::PassagePlace;
    use kostant_engine::Message;

    fn passage(name: &str, text: &str) -> FoundPassage {
        FoundPassage {
            document: 1,
            document_name: name.into(),
            seq: 0,
            text: text.into(),
            place: PassagePlace {
                page: Some(2),
                heading: None,
            },
            score: 1.0,
            vector_score: 0.5,
            keyword_score: 1.0,
        }
    }

    #[test]
    fn sources_name_the_cited_passages_with_their_place() {
        let ps = vec![passage("a.md", "one"), passage("lease.pdf", "two")];
        let s = sources("The deposit is two months [2].", &ps);
        assert_eq!(
            s,
            vec![Source {
                n: 2,
                label: "lease.pdf, page 2".into(),
                text: "two".into(),
                passage: ps[1].clone(),
            }]
        );
    }

    /// Answers "inner" to anything; counts the requests it was given.
    struct Inner(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Responder for Inner {
        fn respond(
            &mut self,
            _: &ReplyRequest,
            _: &CancelHandle,
            emit: &mut dyn FnMut(ReplyEvent),
        ) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            emit(said("inner".into(), Verdict::Answered));
        }
    }

    fn reply_to(feature: Feature) -> (Vec<ReplyEvent>, usize) {
        let calls = std::sync::Arc::default();
        let mut r = AskDocuments::new(
            Box::new(Inner(Arc::clone(&calls))),
            None,
            SharedLibrary::default(),
        );
        let req = ReplyRequest {
            system: String::new(),
            feature,
            shape: None,
            turns: vec![Message::new(Role::User, "What is the deposit?")],
            settings: Default::default(),
            conversation: None,
            origin: Default::default(),
        };
        let mut events = Vec::new();
        r.respond(&req, &CancelHandle::new(), &mut |e| events.push(e));
        (events, calls.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[test]
    fn other_features_pass_through_and_documents_need_the_guard() {
        let (events, calls) = reply_to(Feature::Chat);
        assert_eq!(
            (events, calls),
            (vec![said("inner".into(), Verdict::Answered)], 1)
        );
        // No documents question is answered past the guard: without one, none is answered.
        let (events, calls) = reply_to(Feature::Documents);
        assert_eq!(
            (events, calls),
            (vec![ReplyEvent::Failed(NO_GUARD.into())], 0)
        );
    }

    #[test]
    fn what_the_app_says_instead_reads_as_plain_sentences() {
        for text in [NO_DOCUMENTS, DOCUMENTS_OFF, NOTHING_FOUND] {
            assert!(text.ends_with('.'), "{text}");
            assert!(!text.contains("Error") && !text.contains("error"), "{text}");
        }
        assert!(NO_DOCUMENTS.contains("Documents screen"));
    }
}
