//! Gemma 3's sliding-window layers keep only a ring of their last positions in the kv cache:
//! a session over rings gives bit for bit the logits of one whose windowed layers keep the
//! whole context (prefill chunks longer than the window, decode past the ring's end, rollbacks),
//! a truncation further back than the ring holds empties the cache and re-reading gives a fresh
//! session's logits, snapshots restore and continue exactly, and the memory plan counts the
//! rings.

use std::sync::Arc;

use kostant_engine::gguf::Gguf;
use kostant_engine::testing::{
    prefill, sample_tokens as tokens, session_with_full_cache, step, tiny_model_bytes, TinySpec,
};
use kostant_engine::{Batch, EngineError, KvType, Model, Outputs, Session};

/// Window of the tiny model: far shorter than a prefill chunk (512), so every chunk of a long
/// prompt is longer than the window.
const WINDOW: usize = 8;
const N_CTX: usize = 2048;

fn gemma(seed: u64) -> Arc<Model> {
    let spec = TinySpec {
        arch: "gemma3",
        head_dim: Some(32),
        n_head_kv: 1,
        n_layer: 6,
        n_ctx: N_CTX,
        sliding_window: WINDOW,
        seed,
        ..Default::default()
    };
    Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&spec).unwrap()).unwrap()).unwrap()
}

/// The greedy next token of `logits`.
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// A multi-token pass (as a speculative verifier runs one), every row's logits.
fn verify(s: &mut Session, burst: &[u32]) -> Vec<f32> {
    let mut out = Outputs::new();
    s.decode(&Batch::verify(burst), &mut out).unwrap();
    (0..burst.len())
        .flat_map(|r| out.logits(r).to_vec())
        .collect()
}

#[test]
fn rings_give_the_full_caches_logits_bit_for_bit() {
    let model = gemma(1);
    let mut ring = Session::new(model.clone(), N_CTX).unwrap();
    let mut full = session_with_full_cache(model.clone(), N_CTX, KvType::F16).unwrap();
    // 1300 tokens: chunks of 512, 512 and 276, each longer than the window; the ring (7 + 64
    // + 512 rows) drops rows on the second and third.
    let prompt = tokens(1300, 1);
    let (a, _) = prefill(&mut ring, &prompt).unwrap();
    let (b, _) = prefill(&mut full, &prompt).unwrap();
    assert_eq!(a, b);
    // Decode past the point where the ring moves its rows again (every 512 tokens).
    let mut next = argmax(&a);
    for i in 0..600 {
        let (a, b) = (
            step(&mut ring, next).unwrap(),
            step(&mut full, next).unwrap(),
        );
        assert_eq!(a, b, "step {i}");
        next = argmax(&a);
    }
    // A verify burst, rolled back in part, then one more step: the rollback keeps its rows.
    let burst = tokens(17, 2);
    assert_eq!(verify(&mut ring, &burst), verify(&mut full, &burst));
    let back = ring.tokens().len() - 12;
    assert_eq!(ring.truncate(back), back);
    assert_eq!(full.truncate(back), back);
    assert_eq!(step(&mut ring, 9).unwrap(), step(&mut full, 9).unwrap());
    // Up to the slack before the last pass also stays.
    let back = ring.tokens().len() - 40;
    assert_eq!(ring.truncate(back), back);
    full.truncate(back);
    assert_eq!(step(&mut ring, 10).unwrap(), step(&mut full, 10).unwrap());
    // The ring's memory: 5 windowed layers of 583 rows and one global layer of 2048, f16
    // keys and values 32 wide.
    let row = 2 * 32 * 2;
    assert_eq!(ring.kv_bytes(), (5 * 583 + N_CTX) * row);
    assert_eq!(full.kv_bytes(), 6 * N_CTX * row);
    assert_eq!(model.memory_plan(N_CTX).kv, ring.kv_bytes());
}

#[test]
fn q8_0_rings_give_the_full_caches_logits_bit_for_bit() {
    let model = gemma(2);
    let mut ring = Session::with_kv_type(model.clone(), N_CTX, KvType::Q8_0).unwrap();
    let mut full = session_with_full_cache(model.clone(), N_CTX, KvType::Q8_0).unwrap();
    let prompt = tokens(1100, 3);
    assert_eq!(
        prefill(&mut ring, &prompt).unwrap(),
        prefill(&mut full, &prompt).unwrap()
    );
    for t in tokens(40, 4) {
        assert_eq!(step(&mut ring, t).unwrap(), step(&mut full, t).unwrap());
    }
    assert_eq!(
        model.memory_plan_with_kv(N_CTX, KvType::Q8_0).kv,
        ring.kv_bytes()
    );
}

#[test]
fn a_truncation_past_the_ring_empties_the_cache_and_rereading_matches_a_fresh_session() {
    let model = gemma(3);
    let mut s = Session::new(model.clone(), N_CTX).unwrap();
    let prompt = tokens(1300, 5);
    prefill(&mut s, &prompt).unwrap();
    // After the chunk at 1024 the windowed layers hold positions 953.. (1024 - 71).
    // Position 1000's window (993..) is held: kept.
    let mut p2 = prompt[..1000].to_vec();
    p2.extend(tokens(30, 6));
    let (logits, reused) = prefill(&mut s, &p2).unwrap();
    assert_eq!(reused, 1000);
    let mut full = session_with_full_cache(model.clone(), N_CTX, KvType::F16).unwrap();
    prefill(&mut full, &prompt).unwrap();
    assert_eq!(prefill(&mut full, &p2).unwrap(), (logits, 1000));

    // Position 900's window (893..) was dropped: the cache empties and the prompt runs again,
    // as in a fresh session.
    let mut p3 = prompt[..900].to_vec();
    p3.extend(tokens(20, 7));
    assert_eq!(s.truncate(900), 0);
    assert!(s.tokens().is_empty());
    prefill(&mut s, &prompt).unwrap();
    let (logits, reused) = prefill(&mut s, &p3).unwrap();
    assert_eq!(reused, 0);
    let mut fresh = Session::new(model.clone(), N_CTX).unwrap();
    let (want, _) = prefill(&mut fresh, &p3).unwrap();
    assert_eq!(logits, want);
    for t in tokens(5, 8) {
        assert_eq!(step(&mut s, t).unwrap(), step(&mut fresh, t).unwrap());
    }
}

/// One windowed layer's rows cut: the piece then claims its rows start `d` positions later
/// and carries `d` fewer (keys and values of the one kv head).
fn cut_first_layer(piece: &[u8], n_tokens: usize, d: usize) -> Vec<u8> {
    let at = 16 + 4 * n_tokens; // magic, start, count, token ids
    let first = u32::from_le_bytes(piece[at..at + 4].try_into().unwrap()) as usize;
    let start = u32::from_le_bytes(piece[8..12].try_into().unwrap()) as usize;
    let rows = start + n_tokens - first;
    let side = rows * 32 * 2;
    let (keys, values) = (
        &piece[at + 4..at + 4 + side],
        &piece[at + 4 + side..at + 4 + 2 * side],
    );
    let mut out = piece[..at].to_vec();
    out.extend_from_slice(&((first + d) as u32).to_le_bytes());
    out.extend_from_slice(&keys[d * 64..]);
    out.extend_from_slice(&values[d * 64..]);
    out.extend_from_slice(&piece[at + 4 + 2 * side..]);
    out
}

#[test]
fn snapshots_of_rings_restore_and_continue_bit_for_bit() {
    let model = gemma(4);
    let mut s = Session::new(model.clone(), N_CTX).unwrap();
    let header = s.snapshot_header().to_bytes();
    let mut pieces = Vec::new();
    // Turn 1: a long prompt, saved whole.
    let p1 = tokens(1300, 9);
    prefill(&mut s, &p1).unwrap();
    pieces.push(s.snapshot_piece(0).unwrap());
    // A whole snapshot of a windowed model is smaller than the rows of every position.
    assert!(pieces[0].len() < 1300 * 6 * 2 * 32 * 2 / 2);
    // Turn 2 extends it by a few tokens (fewer than the window): its piece still carries the
    // windows, so it restores after the pieces before it.
    let mut p2 = p1.clone();
    p2.extend(tokens(3, 10));
    prefill(&mut s, &p2).unwrap();
    pieces.push(s.snapshot_piece(1300).unwrap());
    // Turn 3 rewrites from position 600, further back than the ring holds: the session reads
    // it again from 0, and the app saves from where the tokens first differ.
    let mut p3 = p1[..600].to_vec();
    p3.extend(tokens(50, 11));
    let (_, reused) = prefill(&mut s, &p3).unwrap();
    assert_eq!(reused, 0);
    pieces.push(s.snapshot_piece(600).unwrap());

    let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    for n in [2, 3] {
        let mut r = Session::new(model.clone(), N_CTX).unwrap();
        assert_eq!(r.restore(&header, &refs[..n]).unwrap(), [1303, 650][n - 2]);
        // The session that ran the first n turns, the same passes the saved one ran.
        let mut again = Session::new(model.clone(), N_CTX).unwrap();
        for p in [&p1, &p2, &p3].into_iter().take(n) {
            prefill(&mut again, p).unwrap();
        }
        assert_eq!(r.tokens(), again.tokens());
        for t in tokens(20, 12) {
            assert_eq!(
                step(&mut r, t).unwrap(),
                step(&mut again, t).unwrap(),
                "{n}"
            );
        }
    }
    let mut r = Session::new(model.clone(), N_CTX).unwrap();
    r.restore(&header, &refs).unwrap();
    assert_eq!(step(&mut r, 77).unwrap(), step(&mut s, 77).unwrap());

    // Hostile pieces: every cut, a windowed layer starting past the piece's end, one that
    // does not carry its window, and a piece in the old layout.
    let piece = s.snapshot_piece(640).unwrap(); // positions 640..651, 11 tokens
    let refuse = |pieces: &[&[u8]]| {
        let mut r = Session::new(model.clone(), N_CTX).unwrap();
        prefill(&mut r, &tokens(3, 1)).unwrap();
        let msg = match r.restore(&header, pieces) {
            Err(EngineError::Snapshot(msg)) => msg,
            other => panic!("expected a snapshot error, got {other:?}"),
        };
        assert!(r.tokens().is_empty());
        msg
    };
    let whole = s.snapshot_piece(0).unwrap();
    for n in (0..piece.len()).step_by(7) {
        refuse(&[&whole, &piece[..n]]);
    }
    let mut past = piece.clone();
    let at = 16 + 4 * 11;
    past[at..at + 4].copy_from_slice(&700u32.to_le_bytes());
    assert!(refuse(&[&whole, &past]).contains("past the piece's end"));
    // The piece carries 640..651 for the first layer (from its start, which holds the window
    // 644..651 of position 651); cut to 645.., it lacks position 644.
    let short = cut_first_layer(&piece, 11, 5);
    let msg = refuse(&[&short]);
    assert!(msg.contains("starts at position 640"), "{msg}");
    let msg = refuse(&[&whole, &short]);
    assert!(msg.contains("does not hold the window"), "{msg}");
    let mut old = piece.clone();
    old[..8].copy_from_slice(b"KSNAPPC1");
    assert!(refuse(&[&whole, &old]).contains("earlier version"));
    // And the real ones still restore.
    let mut r = Session::new(model.clone(), N_CTX).unwrap();
    assert_eq!(r.restore(&header, &[&whole, &piece]).unwrap(), 651);
}
