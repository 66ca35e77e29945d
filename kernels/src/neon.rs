//! Small NEON building blocks shared by the per-format aarch64 kernels. NEON is part of the
//! aarch64 baseline, so these need no run-time detection.
//!
//! The integer dots come in two flavours, [`widen`] (baseline) and [`sdot`] (dotprod), and
//! reduce each block to an exact i32 (`vaddvq_s32` is cheap on aarch64) and
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

pub(crate) use widen::sum_i8x32;

/// The exact integer dots on baseline NEON: widening multiplies, pairwise adds.
pub(crate) mod widen {
    use std::arch::aarch64::*;

    /// Products of 16 signed byte pairs, summed into 4 i32 lanes. Each i16 lane holds the sum
    /// of two products, at most 2·128·127 = 32512, so nothing overflows for any input this
    /// crate builds (activations stay within ±127).
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

    /// `acc` plus, in lane j, the products of byte pairs 4j..4j+4 summed (what SDOT computes):
    /// the interleaved layouts keep one row's four codes per lane.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn quads_i8x16(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // Pairs summed to i32 lanes (0+1, 2+3 | 4+5, 6+7 | …), then neighbouring lanes added.
        let lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
        let hi = vpaddlq_s16(vmull_high_s8(a, b));
        vaddq_s32(acc, vpaddq_s32(lo, hi))
    }

    /// Exact `Σ a·b` over 32 signed byte pairs given as two halves each.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn sum_i8x32(a: (int8x16_t, int8x16_t), b: (int8x16_t, int8x16_t)) -> i32 {
        vaddvq_s32(vaddq_s32(dot_i8x16(a.0, b.0), dot_i8x16(a.1, b.1)))
    }
}

/// The same dots on SDOT (the dotprod extension of ARMv8.2, in most phones since 2018): one
/// instruction per 16 pairs instead of four. Lanes hold other partial sums than [`widen`]'s,
/// but every sum here is exact, so the totals are the same integers. Through `asm!` because the
/// `vdotq_s32` intrinsic is not stable yet.
pub(crate) mod sdot {
    use std::arch::aarch64::*;
    use std::arch::asm;

    /// Products of 16 signed byte pairs, each four adjacent ones summed into an i32 lane.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    pub(crate) fn dot_i8x16(a: int8x16_t, b: int8x16_t) -> int32x4_t {
        quads_i8x16(vdupq_n_s32(0), a, b)
    }

    /// Exact `Σ a·b` over 16 signed byte pairs.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    pub(crate) fn sum_i8x16(a: int8x16_t, b: int8x16_t) -> i32 {
        vaddvq_s32(dot_i8x16(a, b))
    }

    /// `acc` plus, in lane j, the products of byte pairs 4j..4j+4 summed: one SDOT.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    pub(crate) fn quads_i8x16(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: SDOT reads and writes only these vector registers (no memory, no flags), and
        // this function only runs where dotprod is enabled (its target feature, detected at
        // dispatch).
        unsafe {
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        acc
    }

    /// Exact `Σ a·b` over 32 signed byte pairs given as two halves each.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    pub(crate) fn sum_i8x32(a: (int8x16_t, int8x16_t), b: (int8x16_t, int8x16_t)) -> i32 {
        vaddvq_s32(vaddq_s32(dot_i8x16(a.0, b.0), dot_i8x16(a.1, b.1)))
    }
}

/// SMMLA (the int8 matrix multiply of ARMv8.6, FEAT_I8MM): a 2×8 by 8×2 integer product per
/// instruction, twice SDOT's multiply-adds. Through `asm!` because its intrinsic is not stable.
pub(crate) mod i8mm {
    use std::arch::aarch64::*;
    use std::arch::asm;

    /// `acc` (2×2, row-major) plus `a · bᵀ`, where `a` and `b` each hold two rows of 8 signed
    /// bytes: lane `2i + j` gains `Σ_k a[8i + k]·b[8j + k]`.
    #[inline]
    #[target_feature(enable = "neon,i8mm")]
    pub(crate) fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: SMMLA reads and writes only these vector registers (no memory, no flags), and
        // this function only runs where i8mm is enabled (its target feature, detected at
        // dispatch).
        unsafe {
            asm!(
                "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        acc
    }
}

/// The 32 bits of `qh` (little endian) as 32 bytes in element order: `set` where bit `j` is
/// set and 0 where it is clear (the 5-bit quants' fifth bits), as two halves.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn bits_to_bytes_32(qh: &[u8; 4], set: u8) -> (uint8x16_t, uint8x16_t) {
    let bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
    let half = |b0: u8, b1: u8| {
        // Bytes 0..8 repeat source byte b0, bytes 8..16 repeat b1; each keeps its own bit.
        let src = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
        vandq_u8(vtstq_u8(src, bit), vdupq_n_u8(set))
    };
    (half(qh[0], qh[1]), half(qh[2], qh[3]))
}
