//! The retrieval eval on the real sentence encoder (all-MiniLM-L6-v2) and the real data of
//! assets/evals/retrieval. It asserts what can break structurally (chunking keeps every answer
//! whole, the counts match the data, the rates are rates) and prints the metrics; the issue's
//! targets are measured here, not asserted (`--nocapture` shows them).

use std::path::{Path, PathBuf};
use std::time::Instant;

use kostant_engine::encoder::Encoder;
use kostant_evals::retrieval::{run_retrieval_eval, DOCUMENTS_DIR, QUESTIONS_FILE};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The encoder `scripts/setup.sh` installs (`KOSTANT_EMBEDDER` overrides). Panics if missing.
fn encoder_path() -> PathBuf {
    let path = std::env::var_os("KOSTANT_EMBEDDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("models/all-MiniLM-L6-v2.F16.gguf"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup.sh first (scripts/test.sh does)",
        path.display()
    );
    path
}

#[test]
fn retrieval_eval_on_the_real_encoder() {
    let dir = workspace().join("assets/evals/retrieval");
    let encoder = Encoder::load(&encoder_path()).expect("load the sentence encoder");

    let start = Instant::now();
    let report = run_retrieval_eval(&dir, &encoder, 5).expect("run the retrieval eval");
    let seconds = start.elapsed().as_secs_f64();

    // The counts are the data's.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join(QUESTIONS_FILE))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let answerable = lines.iter().filter(|q| !q["doc"].is_null()).count();
    let files = std::fs::read_dir(dir.join(DOCUMENTS_DIR)).unwrap().count();
    assert_eq!(report.documents, files);
    assert_eq!(report.rows.len(), lines.len());
    assert_eq!(
        (report.answerable, report.unanswerable),
        (answerable, lines.len() - answerable)
    );
    assert_eq!(report.recall_at_k.n, answerable);
    assert_eq!(
        report.nothing_relevant_unanswerable.n,
        lines.len() - answerable
    );
    assert!(
        report.chunks >= report.documents && report.chars > 90_000,
        "{report:?}"
    );

    // Chunking loses no answer: each answerable question's span is in a chunk of its document.
    let lost: Vec<&str> = report
        .rows
        .iter()
        .filter(|r| !r.answer_in_chunks)
        .map(|r| r.id.as_str())
        .collect();
    assert!(
        lost.is_empty(),
        "answers cut or dropped by reading and chunking: {lost:?}"
    );

    // Rates are rates, ranks are ranks, and the first citation is a hit only at rank 1.
    for rate in [
        &report.recall_at_k,
        &report.citation_holds_answer,
        &report.nothing_relevant_unanswerable,
        &report.nothing_relevant_answerable,
    ] {
        assert!(
            rate.k <= rate.n && (0.0..=1.0).contains(&rate.rate),
            "{rate:?}"
        );
        assert!(rate.lo <= rate.rate && rate.rate <= rate.hi, "{rate:?}");
    }
    assert!(report.citation_holds_answer.k <= report.recall_at_k.k);
    for r in &report.rows {
        assert!(r.hit_rank.is_none_or(|n| (1..=5).contains(&n)), "{r:?}");
        assert!(r.doc.is_some() || r.hit_rank.is_none(), "{r:?}");
        assert!(r.top_place.is_some() || r.nothing_relevant, "{r:?}");
    }

    println!("{}", report.to_markdown());
    println!(
        "retrieval eval: {} documents, {} chunks, {} questions in {seconds:.1} s (ingest, embed, search)",
        report.documents,
        report.chunks,
        report.rows.len()
    );
}
