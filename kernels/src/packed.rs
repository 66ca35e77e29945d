//! Weights repacked once at load into a layout this CPU's kernels stream faster than GGUF's
//! own. Today: Q4_0, Q4_1 and Q8_0 as 8-row interleaved blocks ([`crate::formats::q4x8`],
//! [`crate::formats::q8_0x8`]) where the AVX2 kernels run. Everything else, and every other CPU, keeps reading the GGUF bytes in place.

use crate::block::cast_blocks;
use crate::dispatch::{kernels, KernelPath};
use crate::formats::q4x8::{self, BlockQ4_0x8, BlockQ4_1x8, Q4x8};
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_0x8::{self, BlockQ8_0x8};
use crate::{GgmlType, KernelError, Weights};

enum Blocks {
    Q4_0(Vec<BlockQ4_0x8>),
    Q4_1(Vec<BlockQ4_1x8>),
    Q8_0(Vec<BlockQ8_0x8>),
}

/// A weight matrix in a repacked layout; multiply with [`PackedWeights::matmul`].
pub struct PackedWeights {
    /// `rows / 8` groups of `cols / 32` interleaved blocks, group after group.
    blocks: Blocks,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl PackedWeights {
    /// Repacks `w` when this CPU has a faster kernel for it in another layout; `None` means
    /// "use `w` as it is". Q4_0, Q4_1 and Q8_0 matrices with a multiple of 8 rows are repacked
    /// where the AVX2 kernels run (not when the scalar kernels are forced).
    pub fn pack(w: &Weights) -> Result<Option<PackedWeights>, KernelError> {
        if kernels().path != KernelPath::Avx2Fma {
            return Ok(None);
        }
        Self::pack_any_cpu(w)
    }

    /// [`PackedWeights::pack`] whatever the CPU (for tests of the portable kernel); `None` if
    /// `w` is not Q4_0, Q4_1 or Q8_0, or its rows are not a multiple of 8.
    pub fn pack_any_cpu(w: &Weights) -> Result<Option<PackedWeights>, KernelError> {
        w.check()?;
        if w.rows == 0 || !w.rows.is_multiple_of(q4x8::ROWS) {
            return Ok(None);
        }
        let blocks = match w.ty {
            GgmlType::Q4_0 => Blocks::Q4_0(interleave(w)),
            GgmlType::Q4_1 => Blocks::Q4_1(interleave(w)),
            GgmlType::Q8_0 => Blocks::Q8_0(interleave_q8_0(w)),
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

    /// Bytes held (the same as the GGUF tensor's).
    pub fn bytes(&self) -> usize {
        match &self.blocks {
            Blocks::Q4_0(b) => size_of_val(&b[..]),
            Blocks::Q4_1(b) => size_of_val(&b[..]),
            Blocks::Q8_0(b) => size_of_val(&b[..]),
        }
    }

    /// `out[t*rows + r] = dot(row r, x[t*cols .. (t+1)*cols])`, as [`crate::matmul`].
    pub fn matmul(&self, x: &[f32], n_tokens: usize, out: &mut [f32]) -> Result<(), KernelError> {
        match &self.blocks {
            Blocks::Q4_0(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Q4_1(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
            Blocks::Q8_0(b) => crate::matmul::matmul_x8(b, self, x, n_tokens, out),
        }
    }
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
