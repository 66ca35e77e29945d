//! Context snapshots: a restored session continues exactly as the one it was taken from (the
//! next logits bit for bit, f16, q8_0 and q4_0 caches), pieces appended after each turn restore the
//! same context as one whole piece, and hostile or foreign snapshots are refused with a reason
//! and leave an empty session, never a panic.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{
    prefill, real_model_path, sample_tokens as tokens, step, tiny_model_bytes, TinySpec,
};
use kostant_engine::{EngineError, KvType, Message, Model, Role, Session, SnapshotHeader};

fn tiny(seed: u64) -> Arc<Model> {
    let spec = TinySpec {
        n_embd: 128,
        n_head: 4,
        n_head_kv: 2,
        seed,
        ..Default::default()
    };
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&spec).unwrap()).unwrap()).unwrap()
}

/// A snapshot of the whole session: its header and one piece.
fn whole(s: &Session) -> (Vec<u8>, Vec<u8>) {
    (s.snapshot_header().to_bytes(), s.snapshot_piece(0).unwrap())
}

fn snapshot_err(r: Result<usize, EngineError>) -> String {
    match r {
        Err(EngineError::Snapshot(msg)) => msg,
        other => panic!("expected a snapshot error, got {other:?}"),
    }
}

#[test]
fn a_restored_session_continues_bit_for_bit() {
    let model = tiny(1);
    for kv in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
        let mut a = Session::with_kv_type(model.clone(), 64, kv).unwrap();
        prefill(&mut a, &tokens(20, 1)).unwrap();
        step(&mut a, 7).unwrap();
        let (header, piece) = whole(&a);
        let mut b = Session::with_kv_type(model.clone(), 64, kv).unwrap();
        // Whatever b held before is replaced.
        prefill(&mut b, &tokens(5, 9)).unwrap();
        assert_eq!(b.restore(&header, &[&piece]).unwrap(), 21);
        assert_eq!(b.tokens(), a.tokens());
        assert_eq!(step(&mut b, 42).unwrap(), step(&mut a, 42).unwrap(), "{kv}");
        // A prompt that extends the restored tokens reuses all of them.
        let mut longer = a.tokens().to_vec();
        longer.extend(tokens(4, 3));
        let (la, _) = prefill(&mut a, &longer).unwrap();
        let (lb, reused) = prefill(&mut b, &longer).unwrap();
        assert_eq!(reused, 22);
        assert_eq!(la, lb, "{kv}");
    }
}

#[test]
fn pieces_appended_per_turn_restore_the_same_context() {
    let model = tiny(2);
    let mut s = Session::new(model.clone(), 96).unwrap();
    let header = s.snapshot_header().to_bytes();
    let mut pieces = Vec::new();
    let mut saved = 0;
    // Turn 1, turn 2, then a turn that rewrites the end of the context (as a chat template
    // that re-renders the last reply does): its piece starts before the saved end.
    prefill(&mut s, &tokens(30, 1)).unwrap();
    pieces.push(s.snapshot_piece(saved).unwrap());
    saved = s.tokens().len();
    assert!(s.snapshot_piece(saved).is_none(), "nothing new, no piece");
    let mut t2 = s.tokens().to_vec();
    t2.extend(tokens(12, 2));
    prefill(&mut s, &t2).unwrap();
    pieces.push(s.snapshot_piece(saved).unwrap());
    let mut t3 = s.tokens()[..35].to_vec();
    t3.extend(tokens(9, 3));
    prefill(&mut s, &t3).unwrap();
    let common = 35;
    pieces.push(s.snapshot_piece(common).unwrap());

    let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    let mut r = Session::new(model.clone(), 96).unwrap();
    assert_eq!(r.restore(&header, &refs).unwrap(), s.tokens().len());
    assert_eq!(r.tokens(), s.tokens());
    assert_eq!(step(&mut r, 5).unwrap(), step(&mut s, 5).unwrap());
    // The appended pieces are smaller than rewriting the whole context each turn.
    let (_, one) = whole(&s);
    assert!(pieces[1].len() < one.len() / 2);
}

#[test]
fn foreign_snapshots_are_refused_with_the_reason() {
    let model = tiny(3);
    let mut a = Session::new(model.clone(), 64).unwrap();
    prefill(&mut a, &tokens(10, 1)).unwrap();
    let (header, piece) = whole(&a);

    // Another model file (same shape, other weights).
    let mut other = Session::new(tiny(4), 64).unwrap();
    let msg = snapshot_err(other.restore(&header, &[&piece]));
    assert!(msg.contains("another model file"), "{msg}");
    assert!(other.tokens().is_empty());

    // Another cache type.
    let mut q8 = Session::with_kv_type(model.clone(), 64, KvType::Q8_0).unwrap();
    let msg = snapshot_err(q8.restore(&header, &[&piece]));
    assert!(msg.contains("f16") && msg.contains("q8_0"), "{msg}");
    // q4_0 rows into a q8_0 session: the blocks differ in size, and the header says so first.
    let mut q4 = Session::with_kv_type(model.clone(), 64, KvType::Q4_0).unwrap();
    prefill(&mut q4, &tokens(10, 1)).unwrap();
    let (h4, p4) = whole(&q4);
    let msg = snapshot_err(q8.restore(&h4, &[&p4]));
    assert!(msg.contains("q4_0") && msg.contains("q8_0"), "{msg}");
    assert_eq!(
        SnapshotHeader::from_bytes(&h4).unwrap().kv_type,
        KvType::Q4_0
    );

    // An adapter it was not made under.
    let mut h = SnapshotHeader::from_bytes(&header).unwrap();
    h.adapter = Some("proofread".into());
    let mut b = Session::new(model.clone(), 64).unwrap();
    let msg = snapshot_err(b.restore(&h.to_bytes(), &[&piece]));
    assert!(
        msg.contains("proofread") && msg.contains("no adapter"),
        "{msg}"
    );

    // A context too short for its tokens; one long enough takes it.
    let mut short = Session::new(model.clone(), 8).unwrap();
    let msg = snapshot_err(short.restore(&header, &[&piece]));
    assert!(msg.contains("10 tokens") && msg.contains('8'), "{msg}");
    let mut long = Session::new(model, 128).unwrap();
    assert_eq!(long.restore(&header, &[&piece]).unwrap(), 10);
}

#[test]
fn hostile_snapshots_fail_cleanly_and_leave_an_empty_session() {
    let model = tiny(5);
    let mut a = Session::new(model.clone(), 64).unwrap();
    prefill(&mut a, &tokens(6, 1)).unwrap();
    let (header, piece) = whole(&a);
    let mut s = Session::new(model.clone(), 64).unwrap();
    let mut refuse = |h: &[u8], p: &[&[u8]]| {
        prefill(&mut s, &tokens(3, 2)).unwrap();
        let msg = snapshot_err(s.restore(h, p));
        assert!(
            s.tokens().is_empty(),
            "a failed restore left {:?}",
            s.tokens()
        );
        msg
    };
    // Every cut of the header and of the piece.
    for n in 0..header.len() {
        refuse(&header[..n], &[&piece]);
    }
    for n in 0..piece.len() {
        refuse(&header, &[&piece[..n]]);
    }
    refuse(&[header.clone(), vec![0]].concat(), &[&piece]);
    refuse(&header, &[&[piece.clone(), vec![0]].concat()]);
    refuse(&header, &[]);
    // Counts that lie: the token count (bytes 12..16 of a piece) raised, and zero.
    for count in [7u32, 0, u32::MAX] {
        let mut p = piece.clone();
        p[12..16].copy_from_slice(&count.to_le_bytes());
        refuse(&header, &[&p]);
    }
    // A token outside the vocabulary.
    let mut p = piece.clone();
    p[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(refuse(&header, &[&p]).contains("vocabulary"));
    // A key that is not a number (f16 NaN), in the last layer's values.
    let mut p = piece.clone();
    let n = p.len();
    p[n - 2..].copy_from_slice(&half::f16::NAN.to_le_bytes());
    assert!(refuse(&header, &[&p]).contains("not a finite number"));
    // A piece that starts past what the pieces before it hold.
    let mut gap = a.snapshot_piece(2).unwrap();
    gap[8..12].copy_from_slice(&9u32.to_le_bytes());
    assert!(refuse(&header, &[&piece, &gap]).contains("starts at position 9"));
    // Not a snapshot at all.
    refuse(b"GGUF and then some bytes that are no header", &[&piece]);
    // Names that claim more bytes than there are, or are not UTF-8.
    let mut h = header.clone();
    let at = header.len() - 2; // the adapter name's length (empty)
    h[at..].copy_from_slice(&300u16.to_le_bytes());
    refuse(&h, &[&piece]);
    // And the real one still restores.
    assert_eq!(s.restore(&header, &[&piece]).unwrap(), 6);
}

/// Block caches read hostile bytes too: every cut of a piece, and a block whose f16 scale is
/// not a finite number (first key block, last value block), are refused and leave an empty
/// session; an unknown kv type code in the header is refused by name.
#[test]
fn hostile_block_snapshots_fail_cleanly_and_leave_an_empty_session() {
    let model = tiny(6);
    for (kv, block) in [(KvType::Q8_0, 34), (KvType::Q4_0, 18)] {
        let mut a = Session::with_kv_type(model.clone(), 64, kv).unwrap();
        prefill(&mut a, &tokens(6, 1)).unwrap();
        let (header, piece) = whole(&a);
        let mut s = Session::with_kv_type(model.clone(), 64, kv).unwrap();
        let mut refuse = |h: &[u8], p: &[&[u8]]| {
            prefill(&mut s, &tokens(3, 2)).unwrap();
            let msg = snapshot_err(s.restore(h, p));
            assert!(s.tokens().is_empty(), "{kv}: a failed restore left tokens");
            msg
        };
        for n in 0..piece.len() {
            refuse(&header, &[&piece[..n]]);
        }
        // The rows start after the magic, start, count and 6 token ids.
        let first = 16 + 4 * 6;
        let last = piece.len() - block;
        for (at, bad) in [(first, half::f16::NAN), (last, half::f16::INFINITY)] {
            let mut p = piece.clone();
            p[at..at + 2].copy_from_slice(&bad.to_le_bytes());
            let msg = refuse(&header, &[&p]);
            assert!(msg.contains("not a finite number"), "{kv}: {msg}");
        }
        // The kv type code sits after the magic (8 bytes) and the fingerprint (32).
        let mut h = header.clone();
        h[40] = 9;
        assert!(refuse(&h, &[&piece]).contains("unknown kv cache type code 9"));
        // A q4_0 cache saved before its blocks were stored rotated is refused by name.
        h[40] = 3;
        assert!(refuse(&h, &[&piece]).contains("older version"));
        // Any codes are valid: changing one restores; the real piece then steps as `a` does.
        let mut p = piece.clone();
        p[first + 2] ^= 0x11;
        assert_eq!(s.restore(&header, &[&p]).unwrap(), 6, "{kv}");
        assert_eq!(s.restore(&header, &[&piece]).unwrap(), 6, "{kv}");
        assert_eq!(step(&mut s, 9).unwrap(), step(&mut a, 9).unwrap(), "{kv}");
    }
}

/// The user-facing case on the real default model: a chat's context restored from a snapshot
/// gives the same next-token logits as the session that was saved, in a fraction of the
/// bytes of a whole cache.
#[test]
fn real_model_context_restores_exactly() {
    let model = Model::load(&real_model_path()).expect("run scripts/setup.sh first");
    let prompt = model
        .chat_template
        .render(
            &model.tokenizer,
            &[
                Message::new(Role::System, "You are a helpful assistant."),
                Message::new(
                    Role::User,
                    "Proofread: the meeting have been moved to thursday.",
                ),
            ],
            true,
        )
        .unwrap()
        .tokens;
    let mut a = Session::new(model.clone(), 512).unwrap();
    prefill(&mut a, &prompt).unwrap();
    let (header, piece) = whole(&a);
    // Only the filled rows: far less than the allocated cache.
    assert!(
        piece.len() < a.kv_bytes() / 4,
        "{} of {}",
        piece.len(),
        a.kv_bytes()
    );
    let mut b = Session::new(model, 512).unwrap();
    b.restore(&header, &[&piece]).unwrap();
    assert_eq!(step(&mut a, 504).unwrap(), step(&mut b, 504).unwrap());
}
