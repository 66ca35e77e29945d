//! Ranking over the fixtures' chunks: BM25 puts the obvious chunk first, the fused ranking
//! agrees with its parts, and the relevance signal tells a query the files cannot answer.

use std::path::Path;

use kostant_documents::rank::{cosine_top_k, Bm25Index};
use kostant_documents::{chunk, hybrid_search, read_document, ChunkOptions, Corpus, CorpusEntry};

const DIM: usize = 384;

/// A stand-in embedder: hashed bag of words, L2-normalised. Texts sharing words point the
/// same way, which is all these tests need from vectors.
fn embed(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIM];
    for term in kostant_documents::rank::terms(text) {
        let h = term.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        v[(h % DIM as u64) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
    v.iter().map(|x| x / norm).collect()
}

fn corpus() -> Corpus {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut entries = Vec::new();
    for (doc_id, name) in ["guide.pdf", "notes.md", "recipes.html", "letter.txt"]
        .iter()
        .enumerate()
    {
        let doc = read_document(&dir.join(name)).unwrap();
        for c in chunk(
            &doc,
            &ChunkOptions {
                target_chars: 300,
                max_chars: 400,
                overlap_chars: 60,
            },
        ) {
            entries.push(CorpusEntry {
                doc_id: doc_id as u64,
                vector: embed(&c.text),
                text: c.text,
                place: c.place,
            });
        }
    }
    Corpus::new(DIM, entries)
}

#[test]
fn bm25_ranks_the_obvious_chunk_first() {
    let corpus = corpus();
    let texts: Vec<&str> = (0..corpus.len()).map(|i| corpus.text(i)).collect();
    let index = Bm25Index::new(&texts);
    let cases = [
        (
            "how long should the pump take to move the pond's volume",
            "A pump should move",
        ),
        (
            "printer stopped printing green light",
            "printer is an old laser",
        ),
        ("lemon zest eggs butter", "4 eggs, beaten"),
        (
            "when is the residents meeting about the garden",
            "residents' meeting",
        ),
    ];
    for (query, expected) in cases {
        let hits = index.search(query, 3);
        assert!(!hits.is_empty(), "{query}");
        let top = corpus.text(hits[0].0);
        assert!(top.contains(expected), "{query:?} → {top:?}");
        assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}

#[test]
fn hybrid_hits_carry_places_and_sane_scores() {
    let corpus = corpus();
    let query = "how deep to dig so fish overwinter below the ice";
    let hits = hybrid_search(query, &embed(query), &corpus, 5);
    assert_eq!(hits.len(), 5);
    let top = hits[0];
    assert!(corpus.text(top.chunk).contains("sixty centimetres deep"));
    assert_eq!(corpus.doc_id(top.chunk), top.doc_id);
    assert_eq!(corpus.place(top.chunk).page, Some(1));
    assert_eq!(
        corpus.place(top.chunk).heading.as_deref(),
        Some("Garden Pond Guide › Depth")
    );
    // Fused scores fall; each is at most two first places.
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(hits
        .iter()
        .all(|h| h.score > 0.0 && h.score <= 2.0 / 61.0 + 1e-6));
    // The components are the chunk's own scores in each ranking.
    let by_vector = cosine_top_k(&embed(query), corpus.vectors(), corpus.len());
    for h in &hits {
        let cos = by_vector.iter().find(|(i, _)| *i == h.chunk).unwrap().1;
        assert!((cos - h.vector_score).abs() < 1e-6);
        let bm25 = corpus.bm25().scores(query)[h.chunk];
        assert!((bm25 - h.bm25_score).abs() < 1e-6);
    }
    // A chunk first in both rankings is first fused, with the top possible score.
    if by_vector[0].0 == top.chunk && corpus.bm25().search(query, 1)[0].0 == top.chunk {
        assert!((top.score - 2.0 / 61.0).abs() < 1e-6);
    }
}

#[test]
fn relevance_says_when_nothing_matches() {
    let corpus = corpus();
    let on_topic = "how many goldfish per fifty litres";
    let off_topic = "quantum chromodynamics lattice";
    let r_on = corpus.relevance(on_topic, &embed(on_topic));
    let r_off = corpus.relevance(off_topic, &embed(off_topic));
    assert!(r_on.any_term_matched && !r_off.any_term_matched);
    assert!(r_on.best_cosine.unwrap() > r_off.best_cosine.unwrap());
    // Words only: no vectors, still ranked.
    let hits = hybrid_search("goldfish", &[], &corpus, 3);
    assert!(corpus.text(hits[0].chunk).contains("goldfish"));
    assert!(hits.iter().all(|h| h.vector_score == 0.0));
}
