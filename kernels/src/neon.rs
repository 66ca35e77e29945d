//! Small NEON building blocks shared by the per-format aarch64 kernels. NEON is part of the
//! aarch64 baseline, so these need no run-time detection.
//!
//! The integer dots reduce each block to an exact i32 (`vaddvq_s32` is cheap on aarch64) and
//! then combine blocks in f32 in the same order as the scalar reference, so the NEON kernels
//! match the reference bit for bit.

use std::arch::aarch64::*;

/// Loads 16 unsigned bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_u8x16(p: &[u8; 16]) -> uint8x16_t {
    // SAFETY: the array is exactly 16 readable bytes, the width of the load.
    unsafe { vld1q_u8(p.as_ptr()) }
}

/// Loads 32 unsigned bytes as two halves.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_u8x32(p: &[u8; 32]) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the array is 32 readable bytes; each load reads 16 of them.
    unsafe { (vld1q_u8(p.as_ptr()), vld1q_u8(p.as_ptr().add(16))) }
}

/// Loads 32 signed bytes as two halves.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_i8x32(p: &[i8; 32]) -> (int8x16_t, int8x16_t) {
    // SAFETY: the array is 32 readable bytes; each load reads 16 of them.
    unsafe { (vld1q_s8(p.as_ptr()), vld1q_s8(p.as_ptr().add(16))) }
}

/// Products of 16 signed byte pairs, summed into 4 i32 lanes. Each i16 lane holds the sum of two
/// products, at most 2·128·127 = 32512, so nothing overflows for any input this crate builds
/// (activations stay within ±127).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn dot_i8x16(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let hi = vmull_high_s8(a, b);
    vpaddlq_s16(vaddq_s16(lo, hi))
}

/// Exact `Σ a·b` over 16 signed byte pairs.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn sum_i8x16(a: int8x16_t, b: int8x16_t) -> i32 {
    vaddvq_s32(dot_i8x16(a, b))
}

/// Exact `Σ a·b` over 32 signed byte pairs given as two halves each.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn sum_i8x32(a: (int8x16_t, int8x16_t), b: (int8x16_t, int8x16_t)) -> i32 {
    vaddvq_s32(vaddq_s32(dot_i8x16(a.0, b.0), dot_i8x16(a.1, b.1)))
}
