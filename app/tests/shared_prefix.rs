//! A new conversation starts after its feature's system prompt, read once per model (issue 23,
//! "a shared system prefix"), on the real default model through the app's own responder. A
//! new chat never inherits another chat's turns: conversations alternated across features get
//! the replies they get alone, byte for byte, at temperature 0.

use kostant_app::assistant::responder::{
    ContextOrigin, GenerationSettings, GuardedResponder, ReplyEvent, ReplyOutcome, ReplyRequest,
    Responder,
};
use kostant_app::features::Feature;
use kostant_engine::testing::real_model_path;
use kostant_engine::{CancelHandle, Message, Role};

/// A new chat's reply, and the milliseconds from asking to its first token.
fn new_chat(r: &mut GuardedResponder, feature: Feature, user: &str) -> (ReplyOutcome, f64) {
    let req = ReplyRequest {
        system: feature.system_prompt(),
        feature,
        shape: None,
        turns: vec![Message::new(Role::User, user)],
        settings: GenerationSettings {
            temperature: 0.0,
            max_tokens: 24,
            ..GenerationSettings::default()
        },
        conversation: None,
        origin: ContextOrigin::Switched(None),
    };
    let mut done = None;
    let start = std::time::Instant::now();
    let mut first = None;
    r.respond(&req, &CancelHandle::new(), &mut |ev| match ev {
        ReplyEvent::Done(o) => done = Some(o),
        ReplyEvent::Failed(e) => panic!("{e}"),
        ReplyEvent::Token(_) => {
            first.get_or_insert(start.elapsed().as_secs_f64() * 1e3);
        }
        _ => {}
    });
    (done.expect("a reply"), first.unwrap_or(f64::NAN))
}

fn reused(o: &ReplyOutcome) -> usize {
    o.stats
        .as_ref()
        .unwrap_or_else(|| panic!("no generation: {:?} {:?}", o.verdict, o.text))
        .reused_tokens
}

#[test]
fn new_chats_start_after_their_system_prompt_and_inherit_nothing() {
    let alone = |feature, user: &str| {
        let (mut r, _) = GuardedResponder::load(&real_model_path(), 0).unwrap();
        new_chat(&mut r, feature, user).0.text
    };
    let chat_q = "What is the capital of France?";
    let summary_q =
        "The library will close early on Friday for staff training and reopen on Saturday at nine.";
    let chat_alone = alone(Feature::Chat, chat_q);
    let summary_alone = alone(Feature::Summarize, summary_q);

    let (mut r, _) = GuardedResponder::load(&real_model_path(), 0).unwrap();
    // The first chat of each feature reads its system prompt.
    let (a, a_ms) = new_chat(&mut r, Feature::Chat, chat_q);
    let (b, b_ms) = new_chat(&mut r, Feature::Summarize, summary_q);
    let counts = r.system_prompts();
    assert_eq!((counts.read, counts.restored), (2, 0));
    // Later ones start from the rows kept, though the session last held the other
    // feature's chat.
    let (c, c_ms) = new_chat(&mut r, Feature::Chat, chat_q);
    let (d, d_ms) = new_chat(&mut r, Feature::Summarize, summary_q);
    let counts = r.system_prompts();
    assert_eq!((counts.read, counts.restored), (2, 2));
    let model = kostant_engine::Model::load(&real_model_path()).unwrap();
    for (o, feature) in [
        (&a, Feature::Chat),
        (&b, Feature::Summarize),
        (&c, Feature::Chat),
        (&d, Feature::Summarize),
    ] {
        let system = model
            .chat_template
            .render(
                &model.tokenizer,
                &[Message::new(Role::System, feature.system_prompt())],
                false,
            )
            .unwrap()
            .tokens;
        assert_eq!(reused(o), system.len(), "{feature:?}");
    }
    // What it saves a new chat's first reply (docs/benchmarks-log.md, issue 23: shared system prefix).
    // (The first chat also pays for paging the weights in.)
    for (name, read, kept) in [("chat", a_ms, c_ms), ("summarize", b_ms, d_ms)] {
        eprintln!(
            "{name}: first token after {read:.1} ms reading the system prompt, {kept:.1} ms from kept rows"
        );
    }
    // And each reply is the one its conversation gets alone.
    for (o, want) in [(&a, &chat_alone), (&c, &chat_alone)] {
        assert_eq!(&o.text, want);
    }
    for (o, want) in [(&b, &summary_alone), (&d, &summary_alone)] {
        assert_eq!(&o.text, want);
    }
}
