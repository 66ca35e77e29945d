//! Weights repacked once at load into a layout this CPU's kernels stream faster than GGUF's
//! own. Today: Q4_0 as 8-row interleaved blocks ([`crate::formats::q4_0x8`]) where the AVX2
//! kernels run. Everything else, and every other CPU, keeps reading the GGUF bytes in place.

use crate::block::cast_blocks;
use crate::dispatch::{kernels, KernelPath};
use crate::formats::q4_0::BlockQ4_0;
use crate::formats::q4_0x8::{self, BlockQ4_0x8};
use crate::{GgmlType, KernelError, Weights};

/// A weight matrix in a repacked layout; multiply with [`PackedWeights::matmul`].
pub struct PackedWeights {
    /// `rows / 8` groups of `cols / 32` interleaved blocks, group after group.
    pub(crate) blocks: Vec<BlockQ4_0x8>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl PackedWeights {
    /// Repacks `w` when this CPU has a faster kernel for it in another layout; `None` means
    /// "use `w` as it is". Q4_0 matrices with a multiple of 8 rows are repacked where the AVX2
    /// kernels run (not when the scalar kernels are forced).
    pub fn pack(w: &Weights) -> Result<Option<PackedWeights>, KernelError> {
        if kernels().path != KernelPath::Avx2Fma {
            return Ok(None);
        }
        Self::pack_q4_0(w)
    }

    /// Repacks a Q4_0 matrix whatever the CPU (for tests of the portable kernel);
    /// `None` if `w` is not Q4_0 or its rows are not a multiple of 8.
    pub fn pack_q4_0(w: &Weights) -> Result<Option<PackedWeights>, KernelError> {
        w.check()?;
        if w.ty != GgmlType::Q4_0 || !w.rows.is_multiple_of(q4_0x8::ROWS) || w.rows == 0 {
            return Ok(None);
        }
        let nb = w.cols / 32;
        let src = cast_blocks::<BlockQ4_0>(w.data);
        let empty = BlockQ4_0x8 {
            d: [[0; 2]; q4_0x8::ROWS],
            qs: [0; 128],
        };
        let mut blocks = vec![empty; src.len() / q4_0x8::ROWS];
        if nb > 0 {
            for (rows, out) in src
                .chunks_exact(q4_0x8::ROWS * nb)
                .zip(blocks.chunks_exact_mut(nb))
            {
                q4_0x8::pack(rows, out);
            }
        }
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
        self.blocks.len() * size_of::<BlockQ4_0x8>()
    }

    /// `out[t*rows + r] = dot(row r, x[t*cols .. (t+1)*cols])`, as [`crate::matmul`].
    pub fn matmul(&self, x: &[f32], n_tokens: usize, out: &mut [f32]) -> Result<(), KernelError> {
        crate::matmul::matmul_q4_0x8(self, x, n_tokens, out)
    }
}
