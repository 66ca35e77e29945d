//! Weights repacked once at load into a layout this CPU's kernels stream faster than GGUF's
//! own. Today: Q4_0, Q4_1, Q5_0, IQ4_NL and Q8_0 as 8-row interleaved blocks
//! ([`crate::formats::q4x8`], [`crate::formats::q5_0x8`], [`crate::formats::iq4_nlx8`],
//! [`crate::formats::q8_0x8`]) where the AVX2 kernels run, and Q4_0 where the NEON ones do;
//! Q4_K ([`crate::formats::q4_kx8`]) where the AVX2 kernels run, because llama.cpp repacks it
//! there and sums it in its repacked kernels' order, which ours then follow.
//! Everything else, and every other CPU, keeps reading the GGUF bytes in place.

use rayon::prelude::*;

use crate::block::cast_blocks;
use crate::dispatch::kernels;
use crate::formats::iq4_nl::BlockIq4Nl;
use crate::formats::iq4_nlx8::{self, BlockIq4Nlx8};
use crate::formats::q4_k::BlockQ4K;
use crate::formats::q4_kx8::{self, BlockQ4Kx8};
use crate::formats::q4x8::{self, BlockQ4_0x8, BlockQ4_1x8, Q4x8};
use crate::formats::q5_0::BlockQ5_0;
use crate::formats::q5_0x8::{self, BlockQ5_0x8};
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_0x8::{self, BlockQ8_0x8};
use crate::norm::Input;
use crate::{GgmlType, KernelError, Weights};

enum Blocks {
    Q4_0(Vec<BlockQ4_0x8>),
    Q4_1(Vec<BlockQ4_1x8>),
    Q5_0(Vec<BlockQ5_0x8>),
    Iq4Nl(Vec<BlockIq4Nlx8>),
    Q8_0(Vec<BlockQ8_0x8>),
    Q4K(Vec<BlockQ4Kx8>),
}

/// A weight matrix in a repacked layout; multiply with [`PackedWeights::matmul`].
pub struct PackedWeights {
    /// `rows / 8` groups of `cols / 32` (Q4_K: `cols / 256`) interleaved blocks, group after
    /// group.
    blocks: Blocks,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl PackedWeights {
    /// Repacks `w` when this CPU has a faster kernel for it in another layout; `None` means
    /// "use `w` as it is". Matrices with a multiple of 8 rows are repacked where the AVX2
    /// kernels run (Q4_0, Q4_1, Q5_0, IQ4_NL, Q8_0 and Q4_K) and where the NEON ones do (Q4_0, the one format
    /// with NEON kernels for the interleaved layout); never when the scalar kernels are forced.
    pub fn pack(w: &Weights) -> Result<Option<PackedWeights>, KernelError> {
        let path = kernels().path;
        let repacked_here = match w.ty {
            GgmlType::Q4_0 => path.is_x86_simd() || path.is_neon(),
            _ => path.is_x86_simd(),
        };
        if !repacked_here {
            return Ok(None);
        }
        Self::pack_any_cpu(w)
    }

    /// [`PackedWeights::pack`] whatever the CPU (for tests of the portable kernel); `None` if
    /// `w` is not Q4_0, Q4_1, Q5_0, IQ4_NL, Q8_0 or Q4_K, or its rows are not a multiple of 8.
    pub fn pack_any_cpu(w: &Weights) -> Result<Option<PackedWeights>, KernelError> {
        w.check()?;
        if w.rows == 0 || !w.rows.is_multiple_of(q4x8::ROWS) {
            return Ok(None);
        }
        let blocks = match w.ty {
            GgmlType::Q4_0 => Blocks::Q4_0(interleave(w)),
            GgmlType::Q4_1 => Blocks::Q4_1(interleave(w)),
            GgmlType::Q5_0 => {
                Blocks::Q5_0(q5_0x8::pack(cast_blocks::<BlockQ5_0>(w.data), w.cols / 32))
            }
            GgmlType::IQ4_NL => Blocks::Iq4Nl(iq4_nlx8::pack(
                cast_blocks::<BlockIq4Nl>(w.data),
                w.cols / 32,
            )),
            GgmlType::Q8_0 => Blocks::Q8_0(interleave_q8_0(w)),
            GgmlType::Q4_K => {
                Blocks::Q4K(q4_kx8::pack(cast_blocks::<BlockQ4K>(w.data), w.cols / 256))
            }
            _ => return Ok(None),
        };
        Ok(Some(PackedWeights {
            blocks,
            rows: w.rows,
            cols: w.cols,
        }))
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held (the GGUF tensor's; Q4_K's 32 more per 8 rows and super-block, its scales
    /// unpacked).
    pub fn bytes(&self) -> usize {
        match &self.blocks {
            Blocks::Q4_0(b) => size_of_val(&b[..]),
            Blocks::Q4_1(b) => size_of_val(&b[..]),
            Blocks::Q5_0(b) => size_of_val(&b[..]),
            Blocks::Iq4Nl(b) => size_of_val(&b[..]),
            Blocks::Q8_0(b) => size_of_val(&b[..]),
            Blocks::Q4K(b) => size_of_val(&b[..]),
        }
    }

    /// `out[t*rows + r] = dot(row r, x[t*cols .. (t+1)*cols])`, as [`crate::matmul`].
    pub fn matmul(&self, x: &[f32], n_tokens: usize, out: &mut [f32]) -> Result<(), KernelError> {
        self.matmul_input(Input::Rows(x), n_tokens, out)
    }

    /// [`PackedWeights::matmul`] of an [`Input`], as [`crate::matmul_input`].
    pub fn matmul_input(
        &self,
        x: Input,
        n_tokens: usize,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        match &self.blocks {
            Blocks::Q4_0(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Q4_1(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Q5_0(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Iq4Nl(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Q8_0(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Q4K(b) => crate::matmul::matmul_q4_kx8(b, self, x, n_tokens, out),
        }
    }
}

/// The most matrices [`matvec_fused`] runs as one call (a layer's q, k and v); more run one by one.
const MAX_FUSED: usize = 4;

/// One token times several matrices that read the same activations (a layer's q, k and v, or
/// its gate and up): `outs[i] = ws[i] · x`. The activations are quantized once and all the
/// matrices' rows share one split over the pool, so decode pays one fork-join for the set
/// instead of one per matrix. Matrices of different formats or widths are run one by one.
pub fn matvec_fused(
    ws: &[&PackedWeights],
    x: Input,
    outs: &mut [&mut [f32]],
) -> Result<(), KernelError> {
    matvec_fused_then(ws, x, outs, None)
}

/// What [`matvec_fused_then`] runs on rows it has just written: `then(i, first, rows)`, where
/// `rows` are matrix `i`'s outputs `first..first + rows.len()`, a whole number of 8-row groups
/// but perhaps the last.
pub type RowsThen<'a> = dyn Fn(usize, usize, &mut [f32]) + Sync + 'a;

/// Below this many output rows, [`matvec_fused_then`]'s `then` runs on the calling thread
/// when the matrices went one by one.
const THEN_PAR_MIN_ROWS: usize = 1024;

/// [`matvec_fused`], and `then` on every run of rows as soon as they are written, by the task
/// that wrote them: an adapter's B stage rides in the matmul's own tasks (one fork-join of the
/// pool for the set, not two; docs/benchmarks-log.md, issue 21), each row added to after its base value
/// is final, as a separate call would.
pub fn matvec_fused_then(
    ws: &[&PackedWeights],
    x: Input,
    outs: &mut [&mut [f32]],
    then: Option<&RowsThen<'_>>,
) -> Result<(), KernelError> {
    if ws.len() != outs.len() {
        return Err(KernelError::Length {
            what: "fused outputs",
            unit: "matrices",
            expected: ws.len(),
            got: outs.len(),
        });
    }
    let same_cols = ws.windows(2).all(|p| p[0].cols == p[1].cols);
    // The block slices gathered on the stack: decode calls this per layer per token, and
    // allocates nothing.
    macro_rules! fused {
        ($variant:ident) => {{
            let mut blocks: [&[_]; MAX_FUSED] = [&[]; MAX_FUSED];
            let mut n = 0;
            for w in ws.iter().take(MAX_FUSED) {
                if let Blocks::$variant(b) = &w.blocks {
                    blocks[n] = &b[..];
                    n += 1;
                }
            }
            if same_cols && n == ws.len() {
                return crate::matmul::matvec_x8_fused(&blocks[..n], ws[0].cols, x, outs, then);
            }
        }};
    }
    match ws.first().map(|w| &w.blocks) {
        Some(Blocks::Q4_0(_)) => fused!(Q4_0),
        Some(Blocks::Q4_1(_)) => fused!(Q4_1),
        Some(Blocks::Q5_0(_)) => fused!(Q5_0),
        Some(Blocks::Iq4Nl(_)) => fused!(Iq4Nl),
        Some(Blocks::Q8_0(_)) => fused!(Q8_0),
        // Q4_K runs one by one (the engine's fused sets, q/k/v and gate/up, are not Q4_K in
        // the models we ship).
        Some(Blocks::Q4K(_)) | None => {}
    }
    for (w, out) in ws.iter().zip(outs.iter_mut()) {
        w.matmul_input(x, 1, out)?;
    }
    let Some(then) = then else { return Ok(()) };
    let threads = rayon::current_num_threads();
    for (i, out) in outs.iter_mut().enumerate() {
        if threads < 2 || out.len() < THEN_PAR_MIN_ROWS {
            then(i, 0, out);
            continue;
        }
        let chunk = out.len().div_ceil(2 * threads).next_multiple_of(8);
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(c, o)| then(i, c * chunk, o));
    }
    Ok(())
}

/// Every group of 8 rows of `w` interleaved, group after group.
fn interleave<B: Q4x8>(w: &Weights) -> Vec<B>
where
    B::Source: Sync,
{
    q4x8::pack::<B>(cast_blocks::<B::Source>(w.data), w.cols / 32)
}

/// Every group of 8 rows of a Q8_0 matrix interleaved, group after group.
fn interleave_q8_0(w: &Weights) -> Vec<BlockQ8_0x8> {
    q8_0x8::pack(cast_blocks::<BlockQ8_0>(w.data), w.cols / 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};

    fn packed(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, PackedWeights) {
        let mut r = rng(seed);
        let data = random_f32(&mut r, rows * cols, 0.1);
        let bytes: Vec<u8> = data
            .chunks_exact(cols)
            .flat_map(|row| crate::quantize_row(ty, row).unwrap())
            .collect();
        let w = Weights::new(ty, &bytes, rows, cols).unwrap();
        let p = PackedWeights::pack_any_cpu(&w).unwrap().unwrap();
        (bytes, p)
    }

    /// A fused call equals one matmul per matrix, bit for bit: on one thread and split over a
    /// pool, with matrices of one format and (run one by one) of mixed formats.
    #[test]
    fn fused_matvec_equals_one_matmul_per_matrix() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let cols = 576;
        let x = random_f32(&mut rng(5), cols, 1.0);
        let sets: [[(GgmlType, usize); 3]; 3] = [
            [
                (GgmlType::Q4_0, 576),
                (GgmlType::Q4_0, 192),
                (GgmlType::Q4_0, 192),
            ],
            [
                (GgmlType::Q4_1, 1536),
                (GgmlType::Q4_1, 1536),
                (GgmlType::Q4_1, 8),
            ],
            [
                (GgmlType::Q4_0, 64),
                (GgmlType::Q8_0, 64),
                (GgmlType::Q4_1, 64),
            ],
        ];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for (i, set) in sets.iter().enumerate() {
                let ws: Vec<_> = set
                    .iter()
                    .enumerate()
                    .map(|(j, &(ty, rows))| packed(ty, rows, cols, (10 * i + j) as u64).1)
                    .collect();
                let mut want: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0; w.rows]).collect();
                let mut got = want.clone();
                pool.install(|| {
                    for (w, o) in ws.iter().zip(want.iter_mut()) {
                        w.matmul(&x, 1, o).unwrap();
                    }
                    let refs: Vec<&PackedWeights> = ws.iter().collect();
                    let mut outs: Vec<&mut [f32]> = got.iter_mut().map(|o| &mut o[..]).collect();
                    matvec_fused(&refs, Input::Rows(&x), &mut outs).unwrap();
                });
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(bits(g), bits(w), "set {i}, {threads} threads");
                }
            }
        }
    }

    /// Repacked Q4_K through the dispatched kernels equals the scalar reference of ggml's
    /// orders bit for bit: batches of 1 to 9 tokens (the first `4·⌊n/4⌋` through the gemm with
    /// the 4-row quantizer's rule, the rest through the gemv), an odd number of row groups, on
    /// one thread and split over two.
    #[test]
    fn q4_k_matmul_follows_ggml_split_and_orders_bit_for_bit() {
        use crate::formats::q4_kx8;
        use crate::formats::q8_k::{self, BlockQ8K};
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (rows, cols) = (24, 512);
        let (_, p) = packed(GgmlType::Q4_K, rows, cols, 21);
        let Blocks::Q4K(blocks) = &p.blocks else {
            panic!("Q4_K packs as Q4K")
        };
        let nb = cols / 256;
        for n in 1..=9 {
            let mut x = random_f32(&mut rng(100 + n as u64), n * cols, 1.0);
            // A tie of magnitude, negative first: the two quantizers' signs differ.
            x[3] = -2.5;
            x[7] = 2.5;
            let n_gemm = n - n % 4;
            let mut a = vec![BlockQ8K::default(); n * nb];
            q8_k::quantize_4x8_scalar(&x[..n_gemm * cols], &mut a[..n_gemm * nb]);
            q8_k::quantize_scalar(&x[n_gemm * cols..], &mut a[n_gemm * nb..]);
            let mut want = vec![0.0; n * rows];
            for g in 0..rows / 8 {
                let w = &blocks[g * nb..(g + 1) * nb];
                let mut o = vec![0.0; 8];
                for t in 0..n {
                    if t < n_gemm {
                        let t0 = t - t % 4;
                        let mut o4 = vec![0.0; 32];
                        q4_kx8::gemm_scalar(w, &a[t0 * nb..(t0 + 4) * nb], &mut o4);
                        o.copy_from_slice(&o4[8 * (t % 4)..8 * (t % 4) + 8]);
                    } else {
                        q4_kx8::gemv_scalar(w, &a[t * nb..(t + 1) * nb], &mut o);
                    }
                    want[t * rows + 8 * g..t * rows + 8 * g + 8].copy_from_slice(&o);
                }
            }
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut got = vec![0.0; n * rows];
                pool.install(|| p.matmul(&x, n, &mut got).unwrap());
                assert_eq!(bits(&got), bits(&want), "{n} tokens, {threads} threads");
            }
        }
    }

    /// Rows of no columns (a degenerate but valid shape) give zeros, not a panic.
    #[test]
    fn packed_rows_of_no_columns_are_zero() {
        let w = Weights::new(GgmlType::Q4_0, &[], 8, 0).unwrap();
        let p = PackedWeights::pack_any_cpu(&w)
            .unwrap()
            .expect("8 rows of Q4_0 are packed");
        let mut out = [1.0f32; 8];
        p.matmul(&[], 1, &mut out).unwrap();
        assert_eq!(out, [0.0; 8]);
        let mut out = [1.0f32; 8];
        matvec_fused(&[&p], Input::Rows(&[]), &mut [&mut out[..]]).unwrap();
        assert_eq!(out, [0.0; 8]);
    }

    #[test]
    fn fused_matvec_rejects_a_missing_output() {
        let (_, w) = packed(GgmlType::Q4_0, 8, 64, 1);
        let mut o = [0.0; 8];
        let err = matvec_fused(&[&w, &w], Input::Rows(&[0.0; 64]), &mut [&mut o[..]]);
        assert!(err.is_err());
        let mut short = [0.0; 4];
        assert!(matvec_fused(&[&w], Input::Rows(&[0.0; 64]), &mut [&mut short[..]]).is_err());
    }
}
