//! RMSNorm (Zhang & Sennrich 2019) as a matmul's input. A transformer block normalises its
//! input only to feed the next matmuls, and those quantize their input anyway: handed an
//! [`Input::RmsNormed`], they normalise each row on its way into the quantizer, so the
//! normalised rows are never written out and read back, and a session plans no buffer for them.

/// `1 / sqrt(mean(row²) + eps)`. The squares are summed in f64, as llama.cpp does: the mean is
/// then exact to f32 precision whatever the order, so every engine that does the same feeds
/// identical activations to the next matmul.
pub fn rms_scale(row: &[f32], eps: f32) -> f32 {
    let sum_sq: f64 = row.iter().map(|&v| (v * v) as f64).sum();
    let mean_sq = (sum_sq / row.len().max(1) as f64) as f32;
    1.0 / (mean_sq + eps).sqrt()
}

/// [`rms_scale`] of each row of `rows` (`out.len()` rows of `cols` values), bit for bit: the
/// same sequential f64 sums, four rows side by side so that four independent chains of adds
/// are in flight instead of one (a row alone waits on each add's latency).
pub fn rms_scales(rows: &[f32], cols: usize, eps: f32, out: &mut [f32]) {
    assert_eq!(
        rows.len(),
        cols * out.len(),
        "rms_scales: rows of cols values"
    );
    let mut quads = out.chunks_exact_mut(4);
    let mut r0 = 0;
    for o in &mut quads {
        let x: [&[f32]; 4] = std::array::from_fn(|i| &rows[(r0 + i) * cols..(r0 + i + 1) * cols]);
        let mut sum = [0.0f64; 4];
        for j in 0..cols {
            for (s, x) in sum.iter_mut().zip(&x) {
                *s += (x[j] * x[j]) as f64;
            }
        }
        for (o, s) in o.iter_mut().zip(sum) {
            let mean_sq = (s / cols.max(1) as f64) as f32;
            *o = 1.0 / (mean_sq + eps).sqrt();
        }
        r0 += 4;
    }
    for (i, o) in quads.into_remainder().iter_mut().enumerate() {
        *o = rms_scale(&rows[(r0 + i) * cols..(r0 + i + 1) * cols], eps);
    }
}

/// `out = row · scale · weight`, element by element: one row normalised by [`rms_scale`].
pub fn rms_norm_row(row: &[f32], weight: &[f32], scale: f32, out: &mut [f32]) {
    for ((o, &v), &g) in out.iter_mut().zip(row).zip(weight) {
        *o = v * scale * g;
    }
}

/// What a matmul multiplies its weights by: `n_tokens` rows of `cols` values.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// The rows as they are.
    Rows(&'a [f32]),
    /// Each row RMS-normalised and scaled by `weight` (`cols` long) first.
    RmsNormed {
        rows: &'a [f32],
        weight: &'a [f32],
        eps: f32,
    },
}

impl<'a> From<&'a [f32]> for Input<'a> {
    fn from(x: &'a [f32]) -> Input<'a> {
        Input::Rows(x)
    }
}

impl<'a> From<&'a mut [f32]> for Input<'a> {
    fn from(x: &'a mut [f32]) -> Input<'a> {
        Input::Rows(x)
    }
}

/// Values normalised per step on the stack before they are quantized: a whole number of
/// blocks of every activation format (32 for Q8_1, 256 for Q8_K).
const STEP: usize = 256;

/// Rows whose [`rms_scale`]s [`Input::quantize`] computes together ([`rms_scales`]).
const SCALES_AT_ONCE: usize = 8;

impl Input<'_> {
    /// The rows before any normalisation (their length is the input's length).
    pub fn rows(&self) -> &[f32] {
        match *self {
            Input::Rows(x) | Input::RmsNormed { rows: x, .. } => x,
        }
    }

    /// The matmuls' check before they run: `n_tokens` rows of `cols` values, and a norm weight
    /// as long as a row.
    pub(crate) fn check(&self, n_tokens: usize, cols: usize) -> Result<(), crate::KernelError> {
        let expected = n_tokens
            .checked_mul(cols)
            .ok_or(crate::KernelError::Overflow {
                what: "x",
                rows: n_tokens,
                cols,
            })?;
        let lengths = [("x", expected, self.rows().len())];
        let weight = match *self {
            Input::RmsNormed { weight, .. } => Some(("norm weight", cols, weight.len())),
            Input::Rows(_) => None,
        };
        for (what, expected, got) in lengths.into_iter().chain(weight) {
            if expected != got {
                return Err(crate::KernelError::Length {
                    what,
                    unit: "floats",
                    expected,
                    got,
                });
            }
        }
        Ok(())
    }

    /// Quantizes the rows `tokens` (each `cols` long) into `act` with `quantize`, normalising
    /// them first when asked. `act` holds `blocks_per_row` blocks per row; `cols` is a whole
    /// number of blocks, and a block never straddles two rows, so rows as they are go to the
    /// quantizer as one long row.
    pub(crate) fn quantize<A>(
        &self,
        tokens: std::ops::Range<usize>,
        cols: usize,
        act: &mut [A],
        blocks_per_row: usize,
        quantize: &impl Fn(&[f32], &mut [A]),
    ) {
        let (first, last) = (tokens.start, tokens.end);
        match *self {
            Input::Rows(x) => quantize(&x[tokens.start * cols..tokens.end * cols], act),
            Input::RmsNormed { .. } if blocks_per_row == 0 => {}
            Input::RmsNormed { rows, weight, eps } => {
                let block = cols / blocks_per_row;
                let mut buf = [0f32; STEP];
                let mut scales = [0f32; SCALES_AT_ONCE];
                for (t, a) in tokens.zip(act.chunks_exact_mut(blocks_per_row)) {
                    let row = &rows[t * cols..(t + 1) * cols];
                    // The scales of this token and the next few, computed together.
                    let i = t % SCALES_AT_ONCE;
                    if i == 0 || t == first {
                        let end = (t - i + SCALES_AT_ONCE).min(last);
                        let n = end - t;
                        rms_scales(
                            &rows[t * cols..end * cols],
                            cols,
                            eps,
                            &mut scales[i..i + n],
                        );
                    }
                    let scale = scales[i];
                    for ((x, g), a) in row
                        .chunks(STEP)
                        .zip(weight.chunks(STEP))
                        .zip(a.chunks_mut(STEP / block))
                    {
                        let buf = &mut buf[..x.len()];
                        rms_norm_row(x, g, scale, buf);
                        quantize(buf, a);
                    }
                }
            }
        }
    }

    /// The rows ready to multiply: themselves, or normalised into `buf` (`rows().len()` long).
    pub(crate) fn materialize<'b>(&'b self, cols: usize, buf: &'b mut [f32]) -> &'b [f32] {
        match *self {
            Input::Rows(x) => x,
            Input::RmsNormed { rows, weight, eps } => {
                for (row, out) in rows.chunks_exact(cols).zip(buf.chunks_exact_mut(cols)) {
                    rms_norm_row(row, weight, rms_scale(row, eps), out);
                }
                buf
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};
    use crate::{
        matmul, matmul_input, matvec_fused, quantize_row, GgmlType, PackedWeights, Weights,
    };

    /// `n` random rows of `cols` values with a few large ones (as a residual stream has), a
    /// norm weight, and the rows normalised the plain way.
    fn rows_and_norm(n: usize, cols: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut r = rng(seed);
        let mut x = random_f32(&mut r, n * cols, 1.0);
        for t in 0..n {
            x[t * cols + (7 * t + 3) % cols] = 40.0;
        }
        let weight = random_f32(&mut r, cols, 2.0);
        let mut normed = vec![0.0; n * cols];
        for (row, out) in x.chunks_exact(cols).zip(normed.chunks_exact_mut(cols)) {
            rms_norm_row(row, &weight, rms_scale(row, 1e-5), out);
        }
        (x, weight, normed)
    }

    /// Four rows side by side give each row's own scale, bit for bit, whatever the count.
    #[test]
    fn rms_scales_equal_rms_scale_row_by_row() {
        for n in [1, 3, 4, 9] {
            let (x, _, _) = rows_and_norm(n, 576, n as u64);
            let mut got = vec![0.0; n];
            rms_scales(&x, 576, 1e-5, &mut got);
            for (t, g) in got.iter().enumerate() {
                let want = rms_scale(&x[t * 576..(t + 1) * 576], 1e-5);
                assert_eq!(g.to_bits(), want.to_bits(), "row {t} of {n}");
            }
        }
    }

    /// Quantizing a range that starts mid-way through a batch of scales, or one token at a
    /// time, gives the blocks of quantizing everything at once.
    #[test]
    fn quantizing_any_token_range_gives_the_same_blocks() {
        let (n, cols) = (19, 64);
        let (x, weight, _) = rows_and_norm(n, cols, 5);
        let input = Input::RmsNormed {
            rows: &x,
            weight: &weight,
            eps: 1e-5,
        };
        let q = |x: &[f32], a: &mut [f32]| {
            for (o, c) in a.iter_mut().zip(x.chunks(32)) {
                *o = c.iter().sum();
            }
        };
        let mut all = vec![0.0; 2 * n];
        input.quantize(0..n, cols, &mut all, 2, &q);
        for (start, end) in [(0, 1), (3, 12), (5, 19), (18, 19)] {
            let mut part = vec![0.0; 2 * (end - start)];
            input.quantize(start..end, cols, &mut part, 2, &q);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&part),
                bits(&all[2 * start..2 * end]),
                "{start}..{end}"
            );
        }
    }

    #[test]
    fn rms_normed_input_equals_normalising_first_bit_for_bit() {
        let (rows, cols) = (24, 512);
        for ty in GgmlType::ALL {
            let bytes = quantize_row(ty, &random_f32(&mut rng(1), rows * cols, 0.1)).unwrap();
            let w = Weights::new(ty, &bytes, rows, cols).unwrap();
            let packed = PackedWeights::pack_any_cpu(&w).unwrap();
            // 1 token (decode), 3 (one quantizer call for all) and 9 (quantized per token in
            // parallel).
            for n in [1, 3, 9] {
                let (x, weight, normed) = rows_and_norm(n, cols, n as u64);
                let input = Input::RmsNormed {
                    rows: &x,
                    weight: &weight,
                    eps: 1e-5,
                };
                let mut want = vec![0.0; n * rows];
                matmul(&w, &normed, n, &mut want).unwrap();
                let mut got = vec![0.0; n * rows];
                matmul_input(&w, input, n, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{ty:?}, {n} tokens");
                if let Some(p) = &packed {
                    p.matmul(&normed, n, &mut want).unwrap();
                    p.matmul_input(input, n, &mut got).unwrap();
                    assert_eq!(bits(&got), bits(&want), "{ty:?} packed, {n} tokens");
                }
            }
            if let Some(p) = &packed {
                let (x, weight, normed) = rows_and_norm(1, cols, 5);
                let input = Input::RmsNormed {
                    rows: &x,
                    weight: &weight,
                    eps: 1e-5,
                };
                let (mut a, mut b) = (vec![0.0; rows], vec![0.0; rows]);
                let (mut c, mut d) = (vec![0.0; rows], vec![0.0; rows]);
                matvec_fused(&[p, p], Input::Rows(&normed), &mut [&mut a[..], &mut b[..]]).unwrap();
                matvec_fused(&[p, p], input, &mut [&mut c[..], &mut d[..]]).unwrap();
                assert_eq!(bits(&a), bits(&c), "{ty:?} fused");
                assert_eq!(bits(&b), bits(&d), "{ty:?} fused");
            }
        }
    }

    #[test]
    fn a_norm_weight_of_the_wrong_length_is_an_error() {
        let bytes = quantize_row(GgmlType::Q8_0, &[0.5; 64]).unwrap();
        let w = Weights::new(GgmlType::Q8_0, &bytes, 1, 64).unwrap();
        let input = Input::RmsNormed {
            rows: &[1.0; 64],
            weight: &[1.0; 32],
            eps: 1e-5,
        };
        assert!(matmul_input(&w, input, 1, &mut [0.0]).is_err());
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }
}
