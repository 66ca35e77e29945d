//! Okapi BM25 over chunk texts held in memory (k1 = 1.2, b = 0.75).

use std::collections::{HashMap, HashSet};

use super::tokenize::for_each_term;
use super::top_k;

const K1: f32 = 1.2;
const B: f32 = 0.75;

/// An inverted index: for each term, the chunks it occurs in and how often.
#[derive(Debug, Clone, Default)]
pub struct Bm25Index {
    /// term → (chunk, term frequency), chunks in increasing order.
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// Terms per chunk.
    lengths: Vec<u32>,
    average_length: f32,
}

impl Bm25Index {
    /// Indexes `texts`; a text's position is its id in [`Bm25Index::search`]'s results.
    pub fn new<S: AsRef<str>>(texts: &[S]) -> Bm25Index {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(texts.len());
        for (id, text) in texts.iter().enumerate() {
            let id = id as u32;
            let mut length = 0u32;
            for_each_term(text.as_ref(), |term| {
                length += 1;
                // Terms of one text arrive together, so its posting is the list's last.
                match postings.get_mut(term) {
                    Some(list) => match list.last_mut() {
                        Some((last, tf)) if *last == id => *tf += 1,
                        _ => list.push((id, 1)),
                    },
                    None => {
                        postings.insert(term.to_string(), vec![(id, 1)]);
                    }
                }
            });
            lengths.push(length);
        }
        let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
        let average_length = if lengths.is_empty() {
            0.0
        } else {
            total as f32 / lengths.len() as f32
        };
        Bm25Index {
            postings,
            lengths,
            average_length,
        }
    }

    /// How many texts are indexed.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Every text's score for `query` (0 where no query term occurs), by text id.
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let mut scores = vec![0.0f32; self.lengths.len()];
        let n = self.lengths.len() as f32;
        let mut seen: HashSet<String> = HashSet::new();
        for_each_term(query, |term| {
            // A word repeated in the query counts once.
            if seen.contains(term) {
                return;
            }
            seen.insert(term.to_string());
            let Some(list) = self.postings.get(term) else {
                return;
            };
            let df = list.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(id, tf) in list {
                let tf = tf as f32;
                let length = self.lengths[id as usize] as f32;
                let norm = K1 * (1.0 - B + B * length / self.average_length.max(1.0));
                scores[id as usize] += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        });
        scores
    }

    /// The `k` best texts for `query`, best first, as (id, score); texts sharing no term with
    /// the query are left out.
    pub fn search(&self, query: &str, k: usize) -> Vec<(usize, f32)> {
        top_k(&self.scores(query), k, |s| s > 0.0)
    }

    /// Whether any term of `query` occurs in any text.
    pub fn any_term_matches(&self, query: &str) -> bool {
        let mut found = false;
        for_each_term(query, |term| found |= self.postings.contains_key(term));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_obvious_text_ranks_first() {
        let texts = [
            "Water lilies need six hours of sunlight to flower.",
            "A pump should move the whole volume of the pond every two hours.",
            "Goldfish should wait until the pond water has matured.",
            "The pump and the filter; the filter grows bacteria.",
        ];
        let index = Bm25Index::new(&texts);
        let hits = index.search("how big a pump for my pond?", 10);
        assert_eq!(hits[0].0, 1, "{hits:?}");
        assert!(hits.iter().all(|&(id, s)| s > 0.0 && id != 0));
        assert_eq!(index.search("lily", 1)[0].0, 0);
        assert!(index.search("volcano", 5).is_empty());
        assert!(index.any_term_matches("the pumps"));
        assert!(!index.any_term_matches("the volcano"));
        assert!(Bm25Index::new::<&str>(&[]).search("x", 3).is_empty());
    }
}
