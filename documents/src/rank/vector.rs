//! Vector similarity: the query against every chunk's embedding. Embeddings are
//! L2-normalised, so the cosine is the dot product.

use super::top_k;

/// Dot product in eight independent lanes, so the compiler vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of vectors of different lengths");
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The cosine of `query` with each row of `matrix` (rows of `query.len()` floats, one per
/// chunk), by row.
pub fn cosines(query: &[f32], matrix: &[f32]) -> Vec<f32> {
    let dim = query.len();
    if dim == 0 {
        return Vec::new();
    }
    assert_eq!(
        matrix.len() % dim,
        0,
        "a matrix of {} floats is not rows of {dim}",
        matrix.len()
    );
    matrix
        .chunks_exact(dim)
        .map(|row| dot(query, row))
        .collect()
}

/// The `k` rows of `matrix` most similar to `query`, best first, as (row, cosine).
pub fn cosine_top_k(query: &[f32], matrix: &[f32], k: usize) -> Vec<(usize, f32)> {
    top_k(&cosines(query, matrix), k, |_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_ranked_by_dot_product() {
        let q = [1.0, 0.0, 0.0];
        let m = [
            0.0,
            1.0,
            0.0,
            0.6,
            0.8,
            0.0,
            1.0,
            0.0,
            0.0,
            f32::NAN,
            0.0,
            0.0,
        ];
        let top = cosine_top_k(&q, &m, 2);
        assert_eq!(top, [(2, 1.0), (1, 0.6)]);
        assert_eq!(cosine_top_k(&q, &m, 10).len(), 3, "NaN rows are left out");
        let long: Vec<f32> = (0..37).map(|i| i as f32).collect();
        let expected: f32 = long.iter().map(|x| x * x).sum();
        assert_eq!(dot(&long, &long), expected);
    }
}
