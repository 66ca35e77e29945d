//! Quantized matrix kernels over packed GGUF weights: block formats, scalar reference and SIMD
//! dots, run-time CPU dispatch and the row-parallel matmul the engine calls.
//!
//! Layout: one module per format in `formats/` (block struct, size assert, reference
//! dequantize/quantize/dot, SIMD twins); `dispatch` picks the kernel table once (AVX2+FMA+F16C on
//! x86-64, NEON on aarch64, scalar otherwise); `matmul` drives it over the rayon pool. `unsafe`
//! is confined to SIMD loads/stores, the kernel-table calls and the byte-to-block casts, each
//! with a `// SAFETY:` note.
//!
//! Numerics: activations are quantized exactly as ggml quantizes them (Q8_1-style blocks with
//! f16-rounded scales for the 32-element formats, Q8_K for K-quants and IQ4_XS), and the AVX2
//! dots add their lanes in ggml's order, so on x86 every quantized matmul row equals
//! llama.cpp's bit for bit (checked against libggml for Q4_0, Q4_1, Q8_0, Q4_K and Q6_K, and
//! for Q5_0, Q5_1, Q5_K, Q3_K, Q2_K, IQ4_NL and IQ4_XS against a GCC-built AVX2 libggml-cpu,
//! whose contracted `a += b * c` statements our kernels fuse with `mul_add`; their unit tests
//! pin the order with a scalar model of it, `testutil::avx2_lanes_order`). The scalar and NEON kernels compute the
//! same exact block integers and differ from it only in f32 summation order. BF16 and F16
//! weights are dotted against f32 activations.
//!
//! Repacking: where a format runs faster in another layout, [`PackedWeights`] copies a matrix
//! into it once at load (today Q4_0, Q4_1 and Q8_0 on AVX2 and Q4_0 on NEON, 8 rows
//! interleaved per block, see `formats/q4x8.rs` and `formats/q8_0x8.rs`). Repacked Q4_1 keeps ggml's lane order, so it still equals llama.cpp bit
//! for bit; repacked Q4_0 keeps the scalar reference's order (as llama.cpp's own repacked Q4_0
//! leaves its row-dot order).
//!
//! Threads: call [`init_threads`] once, and run forward passes inside [`in_pool`] so matmuls
//! split their rows in place instead of waking the pool from outside on every call.

#[cfg(target_endian = "big")]
compile_error!(
    "kostant-kernels reads GGUF's little-endian data in place and needs a little-endian target"
);

pub mod attention;
pub mod attention_group;
mod attention_kv;
pub mod attention_q4;
pub mod attention_q8;
pub mod bandwidth;
mod block;
mod dispatch;
mod error;
mod exp;
mod formats;
pub mod gelu;
mod lora;
mod matmul;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod norm;
mod packed;
mod required;
pub mod rope;
mod threads;
mod types;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod testutil;

pub use dispatch::{
    cpu_features, kernel_table, set_force_scalar, CpuFeatures, KernelPath, KernelTable,
};
pub use error::KernelError;
pub use lora::{lora_add, lora_add_fused, lora_one_token_then, LoraPair, LoraSide};
pub use matmul::{matmul, matmul_input};
pub use norm::Input;
pub use packed::{matvec_fused, matvec_fused_then, PackedWeights, RowsThen};
pub use required::{cpu_has, required_cpu_features, test_needs, FEATURE_NAMES};
pub use threads::{in_pool, init_threads};
pub use types::{GgmlType, Weights};

use block::{cast_blocks, cast_blocks_mut};
use formats::{
    bf16, f16, f32 as f32_format, iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k,
    q6_k, q8_0,
};

/// Dot product of two equal-length f32 slices, SIMD-dispatched.
///
/// # Panics
/// If the lengths differ: the signature has no error channel, and a mismatch is a bug in the
/// caller's shapes that must not be silently truncated.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dispatch::kernels().dot_f32(a, b)
}

/// `y += alpha * x`, SIMD-dispatched.
///
/// # Panics
/// If the lengths differ, for the same reason as [`dot_f32`].
pub fn axpy_f32(alpha: f32, x: &[f32], y: &mut [f32]) {
    dispatch::kernels().axpy_f32(alpha, x, y)
}

/// Every element replaced by e^x, computed as ggml's vectorized exp computes it (see the `exp`
/// module): the same bits on every kernel path, so softmax and SiLU round like llama.cpp's.
pub fn exp_f32(x: &mut [f32]) {
    dispatch::kernels().exp_f32(x)
}

/// Number of whole blocks in `len` bytes of `ty`, or an error naming `what`.
fn whole_blocks(what: &'static str, ty: GgmlType, len: usize) -> Result<usize, KernelError> {
    let bb = ty.block_bytes();
    if !len.is_multiple_of(bb) {
        return Err(KernelError::PartialBlockBytes {
            what,
            ty,
            len,
            block_bytes: bb,
        });
    }
    Ok(len / bb)
}

/// Expands one or more whole blocks of `ty` from `src` into `dst`, which must hold exactly
/// `block_len` floats per block.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), KernelError> {
    let n_blocks = whole_blocks("src", ty, src.len())?;
    let expected = n_blocks * ty.block_len();
    if dst.len() != expected {
        return Err(KernelError::Length {
            what: "dst",
            unit: "floats",
            expected,
            got: dst.len(),
        });
    }
    match ty {
        GgmlType::F32 => f32_format::dequantize(src, dst),
        GgmlType::F16 => f16::dequantize(cast_blocks(src), dst),
        GgmlType::BF16 => bf16::dequantize(cast_blocks(src), dst),
        GgmlType::Q4_0 => q4_0::dequantize(cast_blocks(src), dst),
        GgmlType::Q4_1 => q4_1::dequantize(cast_blocks(src), dst),
        GgmlType::Q5_0 => q5_0::dequantize(cast_blocks(src), dst),
        GgmlType::Q5_1 => q5_1::dequantize(cast_blocks(src), dst),
        GgmlType::Q5_K => q5_k::dequantize(cast_blocks(src), dst),
        GgmlType::Q8_0 => q8_0::dequantize(cast_blocks(src), dst),
        GgmlType::Q4_K => q4_k::dequantize(cast_blocks(src), dst),
        GgmlType::Q6_K => q6_k::dequantize(cast_blocks(src), dst),
        GgmlType::IQ4_NL => iq4_nl::dequantize(cast_blocks(src), dst),
        GgmlType::IQ4_XS => iq4_xs::dequantize(cast_blocks(src), dst),
        GgmlType::Q3_K => q3_k::dequantize(cast_blocks(src), dst),
        GgmlType::Q2_K => q2_k::dequantize(cast_blocks(src), dst),
    }
    Ok(())
}

/// Packs `src` (a whole number of blocks of `ty`) into GGUF bytes with the reference quantizers:
/// for tests, synthetic models and requantization, not for hot paths.
pub fn quantize_row(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, KernelError> {
    let bytes = ty.checked_row_bytes("src", src.len())?;
    let mut out = vec![0u8; bytes];
    match ty {
        GgmlType::F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => f16::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::BF16 => bf16::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q4_0 => q4_0::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q4_1 => q4_1::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q5_0 => q5_0::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q5_1 => q5_1::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q5_K => q5_k::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q8_0 => q8_0::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q4_K => q4_k::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q6_K => q6_k::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::IQ4_NL => iq4_nl::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::IQ4_XS => iq4_xs::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q3_K => q3_k::quantize(src, cast_blocks_mut(&mut out)),
        GgmlType::Q2_K => q2_k::quantize(src, cast_blocks_mut(&mut out)),
    }
    Ok(out)
}
