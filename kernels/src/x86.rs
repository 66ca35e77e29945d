//! Small AVX2 building blocks shared by the per-format x86 kernels (horizontal sums, f16 scalar
//! conversion, nibble unpacking). Everything here needs avx2+fma+f16c, which the kernel table
//! only selects after detecting them.

use std::arch::x86_64::*;

/// Sum of the 8 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// [`hsum_ps`] of eight registers at once, lane by lane: lane r of the result is the sum of
/// lane r of `l[0..8]` in ggml's `hsum` order, `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 +
/// l7))`. The repacked kernels keep one row per lane and ggml's eight partial sums in eight
/// registers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_lanes(l: &[__m256; 8]) -> __m256 {
    let t4: [__m256; 4] = std::array::from_fn(|j| _mm256_add_ps(l[j], l[j + 4]));
    _mm256_add_ps(_mm256_add_ps(t4[0], t4[2]), _mm256_add_ps(t4[1], t4[3]))
}

/// A K-quant super-block unpacked once, against one token's Q8_K activations: eight vectors of
/// 32 unsigned codes, each pair of products summed to i16 and scaled by `scales[i]` (the i16
/// scale of each pair's sub-block), into 8 i32 lanes. Callers keep every pair's sum within
/// `maddubs`'s i16 range (codes at most 63 against activations of at least -127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn scaled_code_sums(
    codes: &[__m256i; 8],
    scales: &[__m256i; 8],
    qs: &[[i8; 32]; 8],
) -> __m256i {
    let mut s = _mm256_setzero_si256();
    for ((&q, &sc), a) in codes.iter().zip(scales).zip(qs) {
        let p = _mm256_maddubs_epi16(q, load_i8x32(a));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, sc));
    }
    s
}

/// [`scaled_code_sums`] on AVX-512 VNNI: `vpdpwssd` scales each pair sum and adds it in one
/// instruction (AVX2: `madd` then add). The same exact integers.
pub(crate) mod vnni {
    use std::arch::x86_64::*;

    use super::load_i8x32;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(crate) fn scaled_code_sums(
        codes: &[__m256i; 8],
        scales: &[__m256i; 8],
        qs: &[[i8; 32]; 8],
    ) -> __m256i {
        let mut s = _mm256_setzero_si256();
        for ((&q, &sc), a) in codes.iter().zip(scales).zip(qs) {
            s = _mm256_dpwssd_epi32(s, _mm256_maddubs_epi16(q, load_i8x32(a)), sc);
        }
        s
    }
}

/// A K-quant's tiled prompt kernel written once, compiled twice: `dot_tiled_multi` on AVX2 and
/// `dot_tiled_multi_vnni` on AVX-512 VNNI, the body calling whichever `scaled_code_sums` its
/// flavour brings into scope.
macro_rules! tiled_flavours {
    (fn dot_tiled_multi($w:ident: &[$block:ty], $a:ident: &[$act:ty], $out:ident: &mut [f32]) $body:block) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn dot_tiled_multi($w: &[$block], $a: &[$act], $out: &mut [f32]) {
            use crate::x86::scaled_code_sums;
            $body
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
        pub(crate) fn dot_tiled_multi_vnni($w: &[$block], $a: &[$act], $out: &mut [f32]) {
            use crate::x86::vnni::scaled_code_sums;
            $body
        }
    };
}
pub(crate) use tiled_flavours;

/// The paired prompt kernels' shared steps (two groups of 8 interleaved rows on 512-bit
/// registers, the first group's in the low half: `formats::x8_pairs`, `q5_0x8`, `q8_0x8`).
pub(crate) mod pairs {
    use std::arch::x86_64::*;

    /// Bytes, signed or not: what [`join`] loads.
    pub(crate) trait Byte: Copy {}
    impl Byte for u8 {}
    impl Byte for i8 {}

    /// 32 bytes from the start of `lo` and of `hi`, as one register (`lo`'s in the low half).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(crate) fn join<T: Byte>(lo: &[T], hi: &[T]) -> __m512i {
        assert!(size_of_val(lo) >= 32 && size_of_val(hi) >= 32);
        // SAFETY: both slices hold 32 readable bytes (asserted), the width of each load.
        unsafe {
            let l = _mm256_loadu_si256(lo.as_ptr().cast());
            let h = _mm256_loadu_si256(hi.as_ptr().cast());
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(l), h)
        }
    }

    /// Two groups' 8 f16 scales each, widened: `d0`'s in the low half.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(crate) fn scales(d0: &[[u8; 2]; 8], d1: &[[u8; 2]; 8]) -> __m512 {
        // SAFETY: 8 halves are 16 readable bytes, the width of each load.
        unsafe {
            let l = _mm_loadu_si128(d0.as_ptr().cast());
            let h = _mm_loadu_si128(d1.as_ptr().cast());
            _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(l), h))
        }
    }

    /// [`super::hsum_lanes`] on 512-bit registers: lane r is the sum of lane r of `l[0..8]`
    /// in ggml's `hsum` order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(crate) fn hsum_lanes(l: &[__m512; 8]) -> __m512 {
        let t4: [__m512; 4] = std::array::from_fn(|j| _mm512_add_ps(l[j], l[j + 4]));
        _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]))
    }
}

/// Lane j: the sum of activations 4j..4j+4 of a block (ggml's lanes; each at most 4·128).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quad_sums(q: &[i8; 32]) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), load_i8x32(q));
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// Sum of the 8 i32 lanes of `v` (wrapping, though no kernel comes near overflow).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b00_00_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// [`hsum_epi32`] of `a` and of `b`, reduced together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum2_epi32(a: __m256i, b: __m256i) -> (i32, i32) {
    // Pairs of both in each 128-bit half, the halves added, then the pairs.
    let h = _mm256_hadd_epi32(a, b);
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let s = _mm_hadd_epi32(s, s);
    (_mm_cvtsi128_si32(s), _mm_extract_epi32::<1>(s))
}

/// Largest of the 8 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hmax_ps(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

/// One little-endian half to f32 with F16C (the same rounding-free widening as `half`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16_to_f32(bytes: [u8; 2]) -> f32 {
    let v = _mm_cvtsi32_si128(i32::from(u16::from_le_bytes(bytes)));
    _mm_cvtss_f32(_mm_cvtph_ps(v))
}

/// Two halves stored back to back in `bytes` (e.g. a block's `d` and `m`), widened together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16x2_to_f32(bytes: &[u8; 4]) -> (f32, f32) {
    // SAFETY: `bytes` is exactly 4 readable bytes, the width of the 32-bit load.
    let v = _mm_cvtph_ps(unsafe { _mm_loadu_si32(bytes.as_ptr().cast()) });
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// 16 bytes of packed nibbles to 32 bytes 0..15: low nibbles in the low 128-bit lane (elements
/// 0..16), high nibbles in the high lane (elements 16..32), matching the legacy quant order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn unpack_nibbles_32(qs: &[u8; 16]) -> __m256i {
    // SAFETY: `qs` is exactly 16 readable bytes, the width of an unaligned 128-bit load.
    let q = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let both = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Loads 32 unsigned bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_u8x32(bytes: &[u8; 32]) -> __m256i {
    // SAFETY: the array is exactly 32 readable bytes, the width of an unaligned 256-bit load.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// Loads 32 signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_i8x32(bytes: &[i8; 32]) -> __m256i {
    // SAFETY: the array is exactly 32 readable bytes, the width of an unaligned 256-bit load.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// Products of signed bytes `x` and `y`, summed in groups of four into 8 i32 lanes. `maddubs`
/// needs one unsigned side, so `x`'s sign moves onto `y` (ggml's trick, giving the same lane
/// sums as ggml). `y` must not hold -128, whose negation overflows; activations stay within
/// ±127, and |x| <= 128 keeps every i16 pair sum within 2·128·127 = 32512.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn mul_sum_i8_i8(x: __m256i, y: __m256i) -> __m256i {
    mul_sum_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// Pairwise products of unsigned bytes `u` (each <= 128) and signed bytes `s` (each >= -127),
/// summed in groups of four into 8 i32 lanes. `maddubs` saturates i16 pairs, so callers keep
/// |u0*s0 + u1*s1| <= 32767: 2*128*127 = 32512 is the largest any format produces.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn mul_sum_u8_i8(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Runs a multi-token kernel over `out` in groups of up to four tokens (`a` holds `out.len()`
/// tokens of `w.len()` blocks each): `$one(w, a)` for a lone token, `$multi::<N>(w, a, out)`
/// otherwise. Four tokens share each weight block's unpacking while their accumulators still
/// fit in registers; the lone-token loop stays the plain decode kernel.
macro_rules! for_token_groups {
    ($one:ident, $multi:ident, $w:expr, $a:expr, $out:expr) => {{
        let (w, a, out) = ($w, $a, $out);
        let nb = w.len();
        if nb == 0 {
            out.fill(0.0);
        } else {
            for (o, a) in out.chunks_mut(4).zip(a.chunks(4 * nb)) {
                match o.len() {
                    1 => o[0] = $one(w, a),
                    2 => $multi::<2>(w, a, o),
                    3 => $multi::<3>(w, a, o),
                    _ => $multi::<4>(w, a, o),
                }
            }
        }
    }};
}
pub(crate) use for_token_groups;

/// How far ahead of the block being read a decode kernel asks for the weights it will read next.
/// Decode streams each weight byte once, and the hardware prefetcher alone left the kernels
/// short of the machine's read bandwidth. Measured (`cargo bench -p kostant-kernels --
/// decode_token_q4_1_model/packed`, AMD EPYC): 512, 1024 and 2048 bytes all beat none; 1024
/// was best (1 thread +8-10%, 2 threads +13-15%).
pub(crate) const PREFETCH_BYTES: usize = 1024;

/// The same for the K-quant dots (Q4_K, Q6_K), which read the GGUF layout and do more
/// arithmetic per byte, and so want their weights asked for earlier. Measured with `cargo bench
/// -p kostant-kernels --bench matvec -- decode_3b` (16384 x 3072 slices of a 3B output matrix),
/// GiB/s at 1 / 2 threads: Q6_K (three interleaved rounds) none 6.9 / 11.1, 1024 bytes
/// 8.1 / 14.1, 2048 bytes 8.8 / 15.7; Q4_K (alternating) none 6.6 / 12.7 and 6.5 / 12.5,
/// 2048 bytes 8.5 / 16.5 and 9.2 / 16.2.
pub(crate) const K_QUANT_PREFETCH_BYTES: usize = 2048;

/// Asks for the cache lines [`PREFETCH_BYTES`] past the start of `block`, as many as the block
/// spans. A hint only: an address past the end of the weights is never dereferenced.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_ahead<B>(block: &B) {
    prefetch_ahead_by::<PREFETCH_BYTES, B>(block);
}

/// [`prefetch_ahead`] at a distance of `AHEAD` bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_ahead_by<const AHEAD: usize, B>(block: &B) {
    let p = (block as *const B).cast::<i8>();
    for line in (0..size_of::<B>()).step_by(64) {
        // A prefetch never faults; wrapping_add keeps the address arithmetic defined even
        // past the end of the allocation.
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(AHEAD + line));
    }
}

/// The 32 bits of `qh` (little endian) spread over 32 bytes: byte `j` is 0xFF where bit `j` is
/// set and 0 where it is clear, in element order (the 5-bit quants' fifth bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn bits_to_bytes_32(qh: &[u8; 4]) -> __m256i {
    let all = _mm256_set1_epi32(i32::from_le_bytes(*qh));
    // Byte j takes source byte j / 8 (shuffles stay inside each 128-bit lane, and every lane
    // holds all four source bytes), then keeps only bit j % 8 of it.
    let which = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let picked = _mm256_and_si256(_mm256_shuffle_epi8(all, which), bit);
    _mm256_cmpeq_epi8(picked, bit)
}
