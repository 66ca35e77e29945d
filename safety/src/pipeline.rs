//! One guarded reply: screen the user's message, generate only if it passes, screen the reply
//! while it streams, and withdraw it the moment it is flagged. The terminal chat, the app and
//! the eval suite all answer through here, so what they measure is what users get.

use kostant_engine::{
    generate_observed, CancelHandle, GenerateRequest, Generation, Message, Role, Session,
    StopReason,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::policy;
use crate::reader::message_start;
use crate::{Category, Guard, Result, Screening};

/// How often (in tokens) the reply is screened when no sentence ends sooner.
pub const OUTPUT_CHECK_EVERY: usize = 16;

/// How a reply ended, as the guard decided it: the one outcome type of the pipeline, the CLI,
/// the app and the evals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The reply was generated and shown in full (or up to its budget).
    Answered,
    /// The guard flagged the message; the policy's refusal for `category` was shown instead of
    /// a reply (None: the guard was not confident in one, and the refusal is the neutral one).
    Refused { category: Option<Category> },
    /// Cut short: by the user (Stop), or by the guard mid-reply (its text withdrawn, `category`
    /// named when the guard was confident in one).
    Stopped {
        by: StoppedBy,
        category: Option<Category>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    Guard,
    User,
}

impl Verdict {
    /// "answered", "refused" or "stopped": the `verdict` of JSON output.
    pub fn kind(self) -> &'static str {
        match self {
            Verdict::Answered => "answered",
            Verdict::Refused { .. } => "refused",
            Verdict::Stopped { .. } => "stopped",
        }
    }

    /// The hazard category the user was shown, when the guard refused or withdrew and was
    /// confident in one.
    pub fn category(self) -> Option<Category> {
        match self {
            Verdict::Answered => None,
            Verdict::Refused { category } | Verdict::Stopped { category, .. } => category,
        }
    }

    pub fn stopped_by(self) -> Option<StoppedBy> {
        match self {
            Verdict::Stopped { by, .. } => Some(by),
            _ => None,
        }
    }

    /// Whether the guard refused the message or withdrew the reply.
    pub fn by_guard(self) -> bool {
        matches!(
            self,
            Verdict::Refused { .. }
                | Verdict::Stopped {
                    by: StoppedBy::Guard,
                    ..
                }
        )
    }

    /// The short line shown above or under a reply: "Refused · Indiscriminate weapons",
    /// "Refused", "Withdrawn · Hate", "Withdrawn", "Stopped"; empty for an answer.
    pub fn caption(self) -> String {
        let (word, category) = match self {
            Verdict::Answered => return String::new(),
            Verdict::Stopped {
                by: StoppedBy::User,
                ..
            } => return "Stopped".into(),
            Verdict::Refused { category } => ("Refused", category),
            Verdict::Stopped { category, .. } => ("Withdrawn", category),
        };
        match category {
            Some(c) => format!("{word} · {}", c.title()),
            None => word.into(),
        }
    }

    /// Whether the exchange goes back to the chat model as context for the turns after it:
    /// one the guard refused or withdrew does not. The user still sees it, and the history
    /// keeps it; only the model's context leaves it out. So the model cannot be talked into
    /// the refused request a turn later ("go on", "answer it anyway"), and the guard, which
    /// reads a new message with the conversation before it, is not swayed by a harmful turn
    /// that was already refused (with the refused exchange kept, a benign turn after it was
    /// refused 22 times in 45 on the multi-turn suite; see docs/eval-report.md).
    pub fn stays_in_context(self) -> bool {
        !self.by_guard()
    }
}

/// Serialized as its [`Verdict::kind`]; JSON output gives `category` and `stopped_by` beside it.
impl Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.kind())
    }
}

/// A [`Verdict`] as fields of a JSON record, beside the record's own: `verdict` ("answered",
/// "refused" or "stopped"), `stopped_by` ("guard" or "user" when stopped, null otherwise) and
/// `shown_category`, the category the user was shown (absent when none). The evals' results
/// files hold verdicts this way: `#[serde(flatten, with = "kostant_safety::verdict_fields")]`.
/// A record without `stopped_by` (or `shown_category`) reads as one with it null.
pub mod verdict_fields {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{StoppedBy, Verdict};
    use crate::Category;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Answered,
        Refused,
        Stopped,
    }

    #[derive(Serialize, Deserialize)]
    struct Fields {
        verdict: Kind,
        #[serde(default)]
        stopped_by: Option<StoppedBy>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shown_category: Option<Category>,
    }

    pub fn serialize<S: Serializer>(v: &Verdict, s: S) -> Result<S::Ok, S::Error> {
        let verdict = match v {
            Verdict::Answered => Kind::Answered,
            Verdict::Refused { .. } => Kind::Refused,
            Verdict::Stopped { .. } => Kind::Stopped,
        };
        Fields {
            verdict,
            stopped_by: v.stopped_by(),
            shown_category: v.category(),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Verdict, D::Error> {
        let f = Fields::deserialize(d)?;
        match (f.verdict, f.stopped_by, f.shown_category) {
            (Kind::Answered, None, None) => Ok(Verdict::Answered),
            (Kind::Refused, None, category) => Ok(Verdict::Refused { category }),
            (Kind::Stopped, Some(by), category) => Ok(Verdict::Stopped { by, category }),
            (Kind::Stopped, None, _) => Err(D::Error::custom("verdict stopped without stopped_by")),
            (Kind::Answered, _, Some(_)) => {
                Err(D::Error::custom("verdict answered with a shown_category"))
            }
            (_, Some(_), _) => Err(D::Error::custom(
                "stopped_by on a verdict that did not stop",
            )),
        }
    }
}

/// Ends an exchange in the model's `context` (the conversation so far, ending with the user's
/// message): `reply` is appended when the exchange stays in context
/// ([`Verdict::stays_in_context`]); otherwise the user's message that began it is taken back.
/// The CLI chat, the app and the evals all build the model's context through here.
pub fn close_exchange(context: &mut Vec<Message>, reply: String, verdict: Verdict) {
    if verdict.stays_in_context() {
        context.push(Message::new(Role::Assistant, reply));
    } else if context.last().is_some_and(|m| m.role == Role::User) {
        context.pop();
    }
}

/// What the guard measured for one reply.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GuardReport {
    pub input_score: f32,
    /// The highest unsafe probability of the reply as it streamed (0 if none was generated).
    pub output_score: f32,
    pub input_ms: f64,
    pub output_ms: f64,
    pub output_checks: usize,
    /// The head's most likely category when it refused or withdrew, confident or not: a
    /// guess for diagnostics, never shown to the user (the reply's `category` is what is shown).
    pub category_guess: Option<Category>,
}

#[derive(Clone, Debug)]
pub enum ReplyEvent {
    /// More reply text to show.
    Token(String),
    /// Remove bytes `from..to` of the reply shown so far and show `notice` in their place.
    Withdraw {
        from: usize,
        to: usize,
        notice: String,
    },
}

#[derive(Clone, Debug)]
pub struct Reply {
    pub verdict: Verdict,
    /// What the user ends up seeing: the reply, the refusal, or the notice.
    pub text: String,
    /// The model's generation, when there was one (its `reply` is the raw, unscreened text).
    pub generation: Option<Generation>,
    pub guard: GuardReport,
}

/// Answers `user_text` (already part of `req.prompt`) on `session`, screened by `guard`.
/// `on_event` sees the text as the user should see it.
///
/// When the guard model is the chat model, the guard judges the message from the states of
/// the chat's own prompt pass and the reply from those of each new token; otherwise it reads
/// both on its own session. Either way it stops the generation itself (the caller's `cancel`
/// is only ever read).
pub fn respond(
    session: &mut Session,
    guard: &mut Guard,
    req: &GenerateRequest,
    user_text: &str,
    cancel: &CancelHandle,
    mut on_event: impl FnMut(&ReplyEvent),
) -> Result<Reply> {
    let model = session.model().clone();
    let start = match guard.rides_on(session) {
        true => message_start(&model, &req.prompt, user_text)?,
        false => None,
    };
    // Riding along, only what the chat's pass cannot see is read apart (Unicode tricks undone,
    // hidden payloads); otherwise the whole message is.
    let before = match start {
        Some(_) => guard.screen_hidden(user_text)?,
        None => guard.screen_input(user_text)?,
    };
    let mut report = GuardReport {
        input_score: before.score,
        input_ms: before.ms,
        ..Default::default()
    };
    if before.flagged {
        return Ok(refuse(&before, report, &mut on_event));
    }
    if let Some(start) = start {
        // The guard needs the states of every token of the message: run them again even if
        // the cache holds them (a regenerated reply).
        session.truncate(start);
    }

    let riding = start.map(|s| (req.prompt.len(), s));
    let mut screen = guard.reply_screen(user_text, riding, OUTPUT_CHECK_EVERY)?;
    let mut shown = String::new();
    let generation = generate_observed(session, req, cancel, Some(&mut screen), |_, text| {
        shown.push_str(text);
        on_event(&ReplyEvent::Token(text.to_string()));
    })?;
    if let Some(e) = screen.take_error() {
        // A guard that cannot read passes nothing more, and takes back what it had passed.
        on_event(&ReplyEvent::Withdraw {
            from: 0,
            to: shown.len(),
            notice: policy::GUARD_FAILED_NOTICE.to_string(),
        });
        return Err(e);
    }
    if let Some(input) = screen.input() {
        report.input_score = report.input_score.max(input.score);
        report.input_ms += input.ms;
        if input.flagged {
            let input = input.clone();
            return Ok(refuse(&input, report, &mut on_event));
        }
    }
    report.output_score = screen.worst_score();
    report.output_ms = screen.ms();
    report.output_checks = screen.checks();

    if let Some(flag) = screen.flagged() {
        let category = flag.category;
        report.category_guess = flag.category_guess;
        let notice = policy::withdrawn_notice(category);
        on_event(&ReplyEvent::Withdraw {
            from: 0,
            to: shown.len(),
            notice: notice.clone(),
        });
        return Ok(Reply {
            verdict: Verdict::Stopped {
                by: StoppedBy::Guard,
                category,
            },
            text: notice,
            generation: Some(generation),
            guard: report,
        });
    }
    let user_stopped = generation.stop == StopReason::Cancelled;
    Ok(Reply {
        verdict: if user_stopped {
            Verdict::Stopped {
                by: StoppedBy::User,
                category: None,
            }
        } else {
            Verdict::Answered
        },
        text: shown,
        generation: Some(generation),
        guard: report,
    })
}

/// The policy's refusal for a flagged message, shown in place of a reply: the category's own
/// text only when the guard is confident in it, the neutral one otherwise.
fn refuse(
    flag: &Screening,
    mut report: GuardReport,
    on_event: &mut impl FnMut(&ReplyEvent),
) -> Reply {
    report.category_guess = flag.category_guess;
    let text = policy::refusal(flag.category).to_string();
    on_event(&ReplyEvent::Token(text.clone()));
    Reply {
        verdict: Verdict::Refused {
            category: flag.category,
        },
        text,
        generation: None,
        guard: report,
    }
}

/// Events of a guarded reply running on its own thread.
#[derive(Debug)]
pub enum StreamEvent {
    Reply(ReplyEvent),
    Done(Box<Reply>),
    Error(String),
}

/// A guarded reply running on its own thread.
pub struct RunningReply {
    pub events: mpsc::UnboundedReceiver<StreamEvent>,
    pub cancel: CancelHandle,
    /// Gives the session and the guard back once the reply ends.
    pub join: std::thread::JoinHandle<(Session, Guard)>,
}

/// Starts [`respond`] on a new thread; events arrive in order, ending with exactly one `Done`
/// or `Error`. Dropping the receiver stops the reply.
pub fn spawn(
    mut session: Session,
    mut guard: Guard,
    req: GenerateRequest,
    user_text: String,
    cancel: CancelHandle,
) -> RunningReply {
    let (tx, rx) = mpsc::unbounded_channel();
    let flag = cancel.clone();
    // Once the receiver is gone, stop sending (and stop the reply).
    let mut listening = true;
    let join = std::thread::spawn(move || {
        let result = respond(&mut session, &mut guard, &req, &user_text, &flag, |ev| {
            if listening && tx.send(StreamEvent::Reply(ev.clone())).is_err() {
                listening = false;
                flag.cancel();
            }
        });
        let last = match result {
            Ok(r) => StreamEvent::Done(Box::new(r)),
            Err(e) => StreamEvent::Error(e.to_string()),
        };
        let _ = tx.send(last);
        (session, guard)
    });
    RunningReply {
        events: rx,
        cancel,
        join,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A results line: the verdict's fields sit beside the record's own `category`.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Line {
        category: Option<String>,
        #[serde(flatten, with = "verdict_fields")]
        verdict: Verdict,
        score: f32,
    }

    fn line(verdict: Verdict) -> Line {
        Line {
            category: Some("hate".into()),
            verdict,
            score: 0.5,
        }
    }

    #[test]
    fn every_verdict_round_trips_through_its_fields() {
        for verdict in [
            Verdict::Answered,
            Verdict::Refused { category: None },
            Verdict::Refused {
                category: Some(Category::Hate),
            },
            Verdict::Stopped {
                by: StoppedBy::Guard,
                category: Some(Category::Privacy),
            },
            Verdict::Stopped {
                by: StoppedBy::User,
                category: None,
            },
        ] {
            let json = serde_json::to_string(&line(verdict)).unwrap();
            let back: Line = serde_json::from_str(&json).unwrap();
            assert_eq!(back, line(verdict), "{json}");
        }
    }

    #[test]
    fn verdict_fields_keep_the_results_file_names() {
        let stopped = Verdict::Stopped {
            by: StoppedBy::Guard,
            category: None,
        };
        assert_eq!(
            serde_json::to_string(&line(stopped)).unwrap(),
            r#"{"category":"hate","verdict":"stopped","stopped_by":"guard","score":0.5}"#
        );
        assert_eq!(
            serde_json::to_string(&line(Verdict::Answered)).unwrap(),
            r#"{"category":"hate","verdict":"answered","stopped_by":null,"score":0.5}"#
        );
        let refused = Verdict::Refused {
            category: Some(Category::Hate),
        };
        let json = serde_json::to_value(line(refused)).unwrap();
        assert_eq!(json["verdict"], "refused");
        assert_eq!(json["shown_category"], "hate");
    }

    #[test]
    fn an_older_line_without_stopped_by_reads_and_a_contradiction_is_refused() {
        let old: Line =
            serde_json::from_str(r#"{"category":null,"verdict":"refused","score":1.0}"#).unwrap();
        assert_eq!(old.verdict, Verdict::Refused { category: None });
        for bad in [
            r#"{"category":null,"verdict":"stopped","score":1.0}"#,
            r#"{"category":null,"verdict":"answered","stopped_by":"guard","score":1.0}"#,
            r#"{"category":null,"verdict":"answered","shown_category":"hate","score":1.0}"#,
            r#"{"category":null,"verdict":"withdrawn","score":1.0}"#,
        ] {
            assert!(serde_json::from_str::<Line>(bad).is_err(), "{bad}");
        }
    }
}
