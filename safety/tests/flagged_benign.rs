//! Benign prompts the guard has flagged (tests/fixtures/flagged_benign.txt), through the real
//! pipeline on the default model with the committed head (the bytes compiled into the app):
//! each is answered, or refused or withdrawn with exactly the neutral text. A category's text
//! on a benign prompt accuses the asker of that harm.

mod common;

use std::path::PathBuf;

use kostant_engine::testing::real_model_path;
use kostant_engine::{CancelHandle, Model, Session};
use kostant_safety::{policy, respond, Guard, ReplyEvent, StoppedBy, Verdict};

fn fixture() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flagged_benign.txt");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn flagged_benign_prompts_get_the_neutral_text_or_an_answer() {
    let prompts = fixture();
    assert!(prompts.len() >= 5, "{prompts:?}");
    let model = Model::load(&real_model_path()).expect("run scripts/setup.sh first");
    let head = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/safety/guard-head.bin");
    let mut guard = Guard::load(model.clone(), &head).unwrap();
    let mut session = Session::new(model.clone(), 1024).unwrap();
    let cancel = CancelHandle::new();
    for user in &prompts {
        // Long enough for a reply to be screened at several checkpoints, as in the app.
        let req = common::request(&model, user, 64);
        let mut notices = Vec::new();
        let r = respond(&mut session, &mut guard, &req, user, &cancel, |e| {
            if let ReplyEvent::Withdraw { notice, .. } = e {
                notices.push(notice.clone());
            }
        })
        .unwrap();
        let shown = r.verdict.category();
        assert_eq!(shown, None, "{user:?} was shown {shown:?}");
        match r.verdict {
            Verdict::Answered => assert!(notices.is_empty()),
            Verdict::Refused { .. } => assert_eq!(r.text, policy::refusal(None), "{user:?}"),
            Verdict::Stopped {
                by: StoppedBy::Guard,
                ..
            } => {
                assert_eq!(r.text, policy::withdrawn_notice(None), "{user:?}");
                assert_eq!(notices, [policy::withdrawn_notice(None)]);
            }
            other => panic!("{user:?}: {other:?}"),
        }
    }
}
