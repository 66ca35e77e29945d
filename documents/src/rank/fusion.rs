//! Reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009): a chunk's fused score is the
//! sum over rankings of 1 / (k + rank), rank from 1. Scores of different scales (BM25, cosine)
//! need no calibration to be combined this way.

use std::collections::HashMap;

/// The constant of the paper, which damps the weight of the very first ranks.
pub const RRF_K: f32 = 60.0;

/// Fuses rankings (each best first, as (id, score)) into the `k` best ids by fused score,
/// best first; ties go to the lower id.
pub fn reciprocal_rank_fusion(rankings: &[&[(usize, f32)]], k: usize) -> Vec<(usize, f32)> {
    let mut fused: HashMap<usize, f32> = HashMap::new();
    for ranking in rankings {
        for (rank, &(id, _)) in ranking.iter().enumerate() {
            *fused.entry(id).or_default() += 1.0 / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut out: Vec<(usize, f32)> = fused.into_iter().collect();
    out.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_beats_a_single_first_place() {
        let words = [(7, 12.0), (3, 9.0), (5, 1.0)];
        let vectors = [(3, 0.9), (9, 0.8), (7, 0.2)];
        let fused = reciprocal_rank_fusion(&[&words, &vectors], 10);
        let ids: Vec<usize> = fused.iter().map(|f| f.0).collect();
        // 3 is 2nd and 1st, 7 is 1st and 3rd: 1/62 + 1/61 > 1/61 + 1/63.
        assert_eq!(ids, [3, 7, 9, 5]);
        assert!((fused[0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-7);
        assert_eq!(reciprocal_rank_fusion(&[&words, &vectors], 1).len(), 1);
        assert!(reciprocal_rank_fusion(&[], 3).is_empty());
    }
}
