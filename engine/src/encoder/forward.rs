//! The BERT encoder's forward pass (Devlin et al. 2019), post-layer-norm, read top to bottom:
//! embeddings (token + position + token type 0, then LayerNorm), then per layer bidirectional
//! multi-head self-attention with biases, residual and LayerNorm, a GELU feed-forward, residual
//! and LayerNorm.
//!
//! Several texts run as one pass: their tokens are stacked into one (n_tokens, n_embd) matrix
//! so every matmul sees all rows at once, and attention keeps each text to its own tokens.
//! Activations are f32, (n_tokens, width) row-major; matrices go to the kernels as they are
//! in the file (or repacked at load).

use std::ops::Range;

use kostant_kernels::{axpy_f32, dot_f32, exp_f32, matmul, Input};
use rayon::prelude::*;

use super::weights::{EncoderLayer, EncoderParams, EncoderWeights, Linear, Norm};
use crate::gguf::Gguf;
use crate::{EngineError, Result};

/// Below this many values the elementwise steps run on the calling thread.
const PAR_MIN_ELEMENTS: usize = 1 << 14;

/// What one pass reads: the file, its checked shapes and weights.
pub struct Pass<'a> {
    pub file: &'a Gguf,
    pub hp: &'a EncoderParams,
    pub weights: &'a EncoderWeights,
}

/// The buffers of one pass, (n_tokens, width) each.
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    heads: Vec<f32>,
    proj: Vec<f32>,
    up: Vec<f32>,
}

impl Pass<'_> {
    /// The last layer's state of every token of `texts` (each a [CLS] ... [SEP] id sequence
    /// no longer than the context), stacked: (sum of lengths, n_embd).
    pub fn run(&self, texts: &[Vec<u32>]) -> Result<Vec<f32>> {
        let spans = spans(texts);
        let mut x = self.embed(texts)?;
        let mut s = Scratch::default();
        for layer in &self.weights.layers {
            self.layer(layer, &spans, &mut x, &mut s)?;
        }
        Ok(x)
    }

    /// Token + position + token type 0 embeddings, then LayerNorm: (n_tokens, n_embd).
    fn embed(&self, texts: &[Vec<u32>]) -> Result<Vec<f32>> {
        let (e, w) = (self.hp.n_embd, self.weights);
        let n: usize = texts.iter().map(Vec::len).sum();
        let mut x = vec![0.0; n * e];
        let mut type0 = vec![0.0; e];
        w.token_types.row_into(self.file, 0, &mut type0)?;
        let mut pos = vec![0.0; e];
        let mut rows = x.chunks_exact_mut(e);
        for ids in texts {
            for (p, (&id, row)) in ids.iter().zip(&mut rows).enumerate() {
                if id as usize >= self.hp.n_vocab {
                    return Err(EngineError::InvalidRequest(format!(
                        "token id {id} is outside the vocabulary of {}",
                        self.hp.n_vocab
                    )));
                }
                w.token_embd.row_into(self.file, id as usize, row)?;
                w.position_embd.row_into(self.file, p, &mut pos)?;
                for ((x, &p), &t) in row.iter_mut().zip(&pos).zip(&type0) {
                    *x += p + t;
                }
            }
        }
        layer_norm(&mut x, &w.embd_norm, self.hp.norm_eps);
        Ok(x)
    }

    /// One encoder layer, in place on the residual stream `x`.
    fn layer(
        &self,
        l: &EncoderLayer,
        spans: &[Range<usize>],
        x: &mut [f32],
        s: &mut Scratch,
    ) -> Result<()> {
        let n = x.len() / self.hp.n_embd;
        self.linear(&l.q, x, n, &mut s.q)?;
        self.linear(&l.k, x, n, &mut s.k)?;
        self.linear(&l.v, x, n, &mut s.v)?;
        attention(
            self.hp,
            spans,
            (&s.q, &s.k, &s.v),
            sized(&mut s.heads, x.len()),
        );
        self.linear(&l.out, &s.heads, n, &mut s.proj)?;
        add_in_place(x, &s.proj);
        layer_norm(x, &l.attn_norm, self.hp.norm_eps);
        self.linear(&l.up, x, n, &mut s.up)?;
        gelu_in_place(&mut s.up);
        self.linear(&l.down, &s.up, n, &mut s.proj)?;
        add_in_place(x, &s.proj);
        layer_norm(x, &l.output_norm, self.hp.norm_eps);
        Ok(())
    }

    /// y = x W^T + b for n rows: (n, in) -> (n, out).
    fn linear(&self, l: &Linear, x: &[f32], n: usize, y: &mut Vec<f32>) -> Result<()> {
        let out = sized(y, n * l.w.rows);
        match &l.w.packed {
            Some(p) => p.matmul_input(Input::Rows(x), n, out)?,
            None => matmul(&l.w.weights(self.file), x, n, out)?,
        }
        for row in out.chunks_exact_mut(l.w.rows) {
            add_in_place(row, &l.b);
        }
        Ok(())
    }
}

/// Each text's rows in the stacked matrix.
fn spans(texts: &[Vec<u32>]) -> Vec<Range<usize>> {
    let mut start = 0;
    texts
        .iter()
        .map(|t| {
            let r = start..start + t.len();
            start = r.end;
            r
        })
        .collect()
}

/// `buf` at length `len`; its contents are overwritten by the caller.
fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..]
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// LayerNorm (Ba et al. 2016) of each row, in place: zero mean, unit variance, then scale and
/// shift. Mean and variance are summed in f64, as ggml's `norm` does.
fn layer_norm(x: &mut [f32], norm: &Norm, eps: f32) {
    let d = norm.weight.len();
    let one = |row: &mut [f32]| {
        let mean = (row.iter().map(|&v| v as f64).sum::<f64>() / d as f64) as f32;
        let var = row
            .iter()
            .map(|&v| ((v - mean) as f64).powi(2))
            .sum::<f64>()
            / d as f64;
        let scale = 1.0 / (var as f32 + eps).sqrt();
        for ((v, &g), &b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
            *v = (*v - mean) * scale * g + b;
        }
    };
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_exact_mut(d).for_each(one);
    } else {
        x.chunks_exact_mut(d).for_each(one);
    }
}

/// Scaled dot-product attention (Vaswani et al. 2017) over all heads, every token of a text
/// seeing every token of that text and no other. `q`, `k`, `v` and `out` are
/// (n_tokens, n_head * head_dim); one task per token row.
fn attention(
    hp: &EncoderParams,
    spans: &[Range<usize>],
    (q, k, v): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
) {
    let (e, hd) = (hp.n_embd, hp.head_dim);
    let scale = 1.0 / (hd as f32).sqrt();
    let text_of = |row: usize| spans.partition_point(|s| s.end <= row);
    out.par_chunks_exact_mut(e).enumerate().for_each_init(
        Vec::new,
        |probs: &mut Vec<f32>, (i, out_row)| {
            let span = spans[text_of(i)].clone();
            out_row.fill(0.0);
            for h in 0..hp.n_head {
                let cols = h * hd..(h + 1) * hd;
                let q_h = &q[i * e..][cols.clone()];
                probs.clear();
                probs.extend(
                    span.clone()
                        .map(|j| dot_f32(q_h, &k[j * e..][cols.clone()]) * scale),
                );
                softmax(probs);
                let o = &mut out_row[cols.clone()];
                for (j, &p) in span.clone().zip(probs.iter()) {
                    axpy_f32(p, &v[j * e..][cols.clone()], o);
                }
            }
        },
    );
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in x.iter_mut() {
        *v -= max;
    }
    exp_f32(x);
    let sum: f32 = x.iter().sum();
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// GELU with the exact Gaussian CDF, x·Φ(x), as BERT was trained and sentence-transformers runs
/// it. (llama.cpp's `bert` graph uses ggml's tanh approximation instead, read from an f16 table;
/// the two differ by up to about 1e-3 per value.)
fn gelu_in_place(x: &mut [f32]) {
    let one = |v: &mut f32| *v = gelu(*v);
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_iter_mut().for_each(one);
    } else {
        x.iter_mut().for_each(one);
    }
}

fn gelu(x: f32) -> f32 {
    let x64 = x as f64;
    (0.5 * x64 * erfc(-x64 * std::f64::consts::FRAC_1_SQRT_2)) as f32
}

/// The complementary error function, with a relative error below 1.2e-7 everywhere: a
/// Chebyshev-fitted exponential (Numerical Recipes' `erfcc`), so GELU above is exact to f32
/// precision without a libm dependency.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ]
    .iter()
    .rev()
    .fold(0.0, |acc, &c| acc * t + c);
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_reference_values() {
        // erfc at a few points, from Python's math.erfc.
        let cases = [
            (0.0, 1.0),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (-1.0, 1.842_700_792_949_715),
            (2.0, 0.004_677_734_981_047_266),
            (3.5, 7.430_983_723_414_128e-7),
        ];
        for (x, want) in cases {
            let got = erfc(x);
            assert!(
                ((got - want) / want).abs() < 1.3e-7,
                "erfc({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn gelu_is_x_times_the_normal_cdf() {
        assert_eq!(gelu(0.0), 0.0);
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-7);
        assert!((gelu(-1.0) + 0.158_655_26).abs() < 1e-7);
        assert!((gelu(10.0) - 10.0).abs() < 1e-6);
        assert!(gelu(-10.0).abs() < 1e-6);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = [1.0, 2.0, 3.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[2] > x[1] && x[1] > x[0]);
    }
}
