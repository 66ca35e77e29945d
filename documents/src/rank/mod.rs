//! Finding the chunks for a query: BM25 over their words, cosine over their embeddings, and
//! reciprocal rank fusion of the two. Everything is in memory and linear in the chunks: a
//! few hundred pages (~1,500 chunks of 384 dimensions) is well under a millisecond of
//! arithmetic per query.

mod bm25;
mod fusion;
mod tokenize;
mod vector;

pub use bm25::Bm25Index;
pub use fusion::{reciprocal_rank_fusion, RRF_K};
pub use tokenize::terms;
pub use vector::{cosine_top_k, cosines, dot};

use crate::ingest::Place;

/// One chunk held for search.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusEntry {
    /// The caller's id for the document the chunk comes from.
    pub doc_id: u64,
    pub text: String,
    pub place: Place,
    /// The chunk's L2-normalised embedding, `dim` floats (empty when the corpus has none).
    pub vector: Vec<f32>,
}

/// The chunks searched, with their BM25 index and embeddings (one row of `dim` floats each).
#[derive(Debug, Clone)]
pub struct Corpus {
    dim: usize,
    doc_ids: Vec<u64>,
    texts: Vec<String>,
    places: Vec<Place>,
    /// (chunks, dim), row-major.
    vectors: Vec<f32>,
    bm25: Bm25Index,
}

impl Corpus {
    /// Builds a corpus from its chunks; `dim` is the embedding size (0: no embeddings, words
    /// only). Panics if an entry's vector is not `dim` long: that is the caller's bug, not the
    /// user's input.
    pub fn new(dim: usize, entries: Vec<CorpusEntry>) -> Corpus {
        let mut vectors = Vec::with_capacity(entries.len() * dim);
        let mut doc_ids = Vec::with_capacity(entries.len());
        let mut texts = Vec::with_capacity(entries.len());
        let mut places = Vec::with_capacity(entries.len());
        for e in entries {
            assert_eq!(
                e.vector.len(),
                dim,
                "a chunk of document {} has a vector of {} floats, not {dim}",
                e.doc_id,
                e.vector.len()
            );
            vectors.extend_from_slice(&e.vector);
            doc_ids.push(e.doc_id);
            texts.push(e.text);
            places.push(e.place);
        }
        let bm25 = Bm25Index::new(&texts);
        Corpus {
            dim,
            doc_ids,
            texts,
            places,
            vectors,
            bm25,
        }
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn text(&self, chunk: usize) -> &str {
        &self.texts[chunk]
    }

    pub fn place(&self, chunk: usize) -> &Place {
        &self.places[chunk]
    }

    pub fn doc_id(&self, chunk: usize) -> u64 {
        self.doc_ids[chunk]
    }

    pub fn bm25(&self) -> &Bm25Index {
        &self.bm25
    }

    /// The embeddings, (chunks, dim) row-major.
    pub fn vectors(&self) -> &[f32] {
        &self.vectors
    }

    /// How well the corpus can answer a query at all, for saying "nothing relevant found".
    pub fn relevance(&self, query_text: &str, query_vec: &[f32]) -> Relevance {
        Relevance {
            best_cosine: self
                .vector_scores(query_vec)
                .into_iter()
                .filter(|c| !c.is_nan())
                .reduce(f32::max),
            any_term_matched: self.bm25.any_term_matches(query_text),
        }
    }

    fn vector_scores(&self, query_vec: &[f32]) -> Vec<f32> {
        if self.dim == 0 || query_vec.is_empty() {
            return Vec::new();
        }
        assert_eq!(
            query_vec.len(),
            self.dim,
            "a query vector of {} floats for a corpus of {}",
            query_vec.len(),
            self.dim
        );
        cosines(query_vec, &self.vectors)
    }
}

/// Below this cosine between a query and its best chunk, nothing in the corpus is about the
/// query: the app says so rather than answer from nothing. Fixed from the encoder's usual range
/// before any eval was run: unrelated English sentences score about 0.0–0.2 with
/// all-MiniLM-L6-v2, a question and the sentence answering it mostly above 0.4.
pub const MIN_RELEVANT_COSINE: f32 = 0.30;

/// What the best of a corpus says about a query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Relevance {
    /// The highest cosine of the query with any chunk (None without embeddings or chunks).
    pub best_cosine: Option<f32>,
    /// Whether any word of the query (stop words aside) occurs in any chunk.
    pub any_term_matched: bool,
}

impl Relevance {
    /// Whether some chunk is about the query: its best cosine reaches [`MIN_RELEVANT_COSINE`].
    /// A shared word alone is no sign: over a few hundred pages nearly every query shares one.
    pub fn is_relevant(&self) -> bool {
        self.best_cosine.is_some_and(|c| c >= MIN_RELEVANT_COSINE)
    }
}

/// One chunk found for a query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The chunk's position in the corpus.
    pub chunk: usize,
    pub doc_id: u64,
    /// The fused score: the sum of 1 / (60 + rank) over the rankings the chunk is in.
    pub score: f32,
    /// The chunk's cosine with the query (0 without embeddings).
    pub vector_score: f32,
    /// The chunk's BM25 score for the query (0 when no word matched).
    pub bm25_score: f32,
}

/// How deep each ranking is read before fusion: deeper than `k`, so a chunk ranked well by
/// one and modestly by the other still rises.
fn fusion_depth(k: usize) -> usize {
    (4 * k).max(50)
}

/// The `k` chunks best for a query, best first: the BM25 ranking of `query_text` and the
/// cosine ranking of `query_vec` (empty for words only), each read to a depth of
/// max(4k, 50), fused by reciprocal rank fusion.
pub fn hybrid_search(query_text: &str, query_vec: &[f32], corpus: &Corpus, k: usize) -> Vec<Hit> {
    if k == 0 || corpus.is_empty() {
        return Vec::new();
    }
    let depth = fusion_depth(k);
    let bm25 = corpus.bm25.scores(query_text);
    let cos = corpus.vector_scores(query_vec);
    let by_words = top_k(&bm25, depth, |s| s > 0.0);
    let by_vector = top_k(&cos, depth, |_| true);
    let fused = reciprocal_rank_fusion(&[&by_words, &by_vector], k);
    fused
        .into_iter()
        .map(|(chunk, score)| Hit {
            chunk,
            doc_id: corpus.doc_ids[chunk],
            score,
            vector_score: cos.get(chunk).copied().unwrap_or(0.0),
            bm25_score: bm25[chunk],
        })
        .collect()
}

/// The `k` highest of `scores` that pass `keep` (NaN never does), best first, ties by id.
pub(crate) fn top_k(scores: &[f32], k: usize, keep: impl Fn(f32) -> bool) -> Vec<(usize, f32)> {
    let mut all: Vec<(usize, f32)> = scores
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, s)| !s.is_nan() && keep(s))
        .collect();
    let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < all.len() {
        if k == 0 {
            return Vec::new();
        }
        all.select_nth_unstable_by(k - 1, order);
        all.truncate(k);
    }
    all.sort_unstable_by(order);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_and_breaks_ties_by_id() {
        let s = [0.5, 0.9, 0.5, f32::NAN, 0.1, 0.9];
        assert_eq!(top_k(&s, 3, |_| true), [(1, 0.9), (5, 0.9), (0, 0.5)]);
        assert_eq!(top_k(&s, 0, |_| true), []);
        assert_eq!(top_k(&s, 99, |x| x > 0.4).len(), 4);
    }

    fn entry(doc_id: u64, text: &str, vector: [f32; 2]) -> CorpusEntry {
        CorpusEntry {
            doc_id,
            text: text.into(),
            place: Place::default(),
            vector: vector.to_vec(),
        }
    }

    #[test]
    fn hybrid_search_fuses_both_rankings() {
        let corpus = Corpus::new(
            2,
            vec![
                entry(1, "pond liner underlay", [1.0, 0.0]),
                entry(1, "pump flow rate for the pond", [0.6, 0.8]),
                entry(2, "goldfish feeding", [0.0, 1.0]),
            ],
        );
        // Words favour chunk 1, the vector chunk 0; chunk 1 is second by vector, so it wins.
        let hits = hybrid_search("pump rate", &[0.8, 0.6], &corpus, 3);
        assert_eq!(hits.iter().map(|h| h.chunk).collect::<Vec<_>>(), [1, 0, 2]);
        assert_eq!(hits[0].doc_id, 1);
        assert!(hits[0].bm25_score > 0.0 && hits[1].bm25_score == 0.0);
        assert!((hits[1].vector_score - 0.8).abs() < 1e-6);
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        // Words only.
        let words = hybrid_search("goldfish", &[], &corpus, 3);
        assert_eq!(words.len(), 1);
        assert_eq!(words[0].chunk, 2);
        let r = corpus.relevance("volcano eruption", &[0.8, 0.6]);
        assert!(!r.any_term_matched);
        assert!((r.best_cosine.unwrap() - 0.96).abs() < 1e-6);
        assert_eq!(corpus.relevance("pond", &[]).best_cosine, None);
    }
}
