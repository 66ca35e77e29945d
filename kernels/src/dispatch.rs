//! Run-time CPU dispatch: the kernel table is chosen once from the detected CPU features, and
//! every hot call goes through it. A scalar table can be forced (for tests and benchmarks) with
//! `set_force_scalar` or `KOSTANT_FORCE_SCALAR=1`.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::attention::F16SumOrder;
use crate::exp;
use crate::formats::bf16::BF16;
use crate::formats::each_row;
use crate::formats::f16::F16;
use crate::formats::iq4_nl::BlockIq4Nl;
use crate::formats::iq4_nlx8::{self, BlockIq4Nlx8};
use crate::formats::iq4_xs::BlockIq4Xs;
#[cfg(target_arch = "x86_64")]
use crate::formats::k_lanes::{self, LaneFormat, Q8KLanes, Unpacked};
use crate::formats::q2_k::BlockQ2K;
use crate::formats::q3_k::BlockQ3K;
use crate::formats::q4_0::BlockQ4_0;
use crate::formats::q4_1::BlockQ4_1;
use crate::formats::q4_k::BlockQ4K;
use crate::formats::q4_kx8::{self, BlockQ4Kx8};
use crate::formats::q4x8::{self, BlockQ4_0x8, BlockQ4_1x8};
use crate::formats::q5_0::BlockQ5_0;
use crate::formats::q5_0x8::{self, BlockQ5_0x8};
use crate::formats::q5_1::BlockQ5_1;
#[cfg(target_arch = "x86_64")]
use crate::formats::q5_1_lanes;
use crate::formats::q5_k::BlockQ5K;
use crate::formats::q6_k::BlockQ6K;
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_0x8::{self, BlockQ8_0x8};
use crate::formats::q8_1::BlockQ8_1;
use crate::formats::q8_k::BlockQ8K;
use crate::formats::{
    bf16, f16, f32, iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0,
    q8_1, q8_k,
};
#[cfg(target_arch = "x86_64")]
use crate::formats::{bf16_pairs, x8_pairs};
use crate::lora;

/// Which family of kernels the dispatcher runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelPath {
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (Haswell and later).
    Avx2Fma,
    /// [`KernelPath::Avx2Fma`] with the repacked 4-bit weights' integer dots on AVX-512 VNNI
    /// (`vpdpbusd`; Ice Lake, Zen 4 and later).
    Avx512Vnni,
    /// [`KernelPath::Avx512Vnni`] with BF16 weights on AVX512_BF16's `vdpbf16ps`, in the
    /// orders of llama.cpp's AVX-512 builds (Cooper Lake, Sapphire Rapids, Zen 4 and later).
    Avx512Bf16,
    /// aarch64 baseline NEON (F16 weights still use the scalar dot: the f16 vector types are
    /// not stable in Rust yet).
    Neon,
    /// NEON with the integer dots on SDOT (the dotprod extension, ARMv8.2 and later).
    NeonDotprod,
    /// [`KernelPath::NeonDotprod`] with prefill's repacked Q4_0 on SMMLA (i8mm, ARMv8.6).
    NeonI8mm,
}

impl KernelPath {
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2Fma => "avx2+fma",
            KernelPath::Avx512Vnni => "avx2+fma+avx512vnni",
            KernelPath::Avx512Bf16 => "avx2+fma+avx512vnni+bf16",
            KernelPath::Neon => "neon",
            KernelPath::NeonDotprod => "neon+dotprod",
            KernelPath::NeonI8mm => "neon+dotprod+i8mm",
        }
    }

    /// Any x86 SIMD path (they share every kernel but the repacked 4-bit weights' dots).
    pub fn is_x86_simd(self) -> bool {
        matches!(
            self,
            KernelPath::Avx2Fma | KernelPath::Avx512Vnni | KernelPath::Avx512Bf16
        )
    }

    /// Any NEON path (they share every kernel but the quantized weights' dots).
    pub fn is_neon(self) -> bool {
        matches!(
            self,
            KernelPath::Neon | KernelPath::NeonDotprod | KernelPath::NeonI8mm
        )
    }
}

impl fmt::Display for KernelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the CPU offers and which kernels the dispatcher picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuFeatures {
    /// The kernels in use right now (scalar if forced).
    pub path: KernelPath,
    /// The best kernels this CPU supports, whatever is forced.
    pub best: KernelPath,
    pub forced_scalar: bool,
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    /// AVX-512 F, VL, BW and VNNI, all four.
    pub avx512vnni: bool,
    /// Those and AVX512_BF16.
    pub avx512bf16: bool,
    pub neon: bool,
    pub dotprod: bool,
}

/// Displays the path in use: "avx2+fma", "scalar".
impl fmt::Display for CpuFeatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path.name())
    }
}

type DotFn<W, A> = unsafe fn(&[W], &[A]) -> f32;
/// One weight row against several tokens: `out[t] = dot(w, token t of a)`.
type MultiFn<W, A> = unsafe fn(&[W], &[A], &mut [f32]);
/// Several weight rows against one token: `out[r] = dot(row r of w, a)` (decode).
type RowsFn<W, A> = unsafe fn(&[W], &[A], &mut [f32]);
/// One interleaved group of rows against a few tokens and their integer activation sums.
type GemmFn<W, A> = unsafe fn(&[W], &[A], &[i32], &mut [f32]);

/// One implementation of every hot kernel. The function pointers are `unsafe fn` because the
/// SIMD ones may only run on a CPU with their features; a table is only reachable through
/// [`kernels`], which hands out the SIMD table only after detecting those features, so the
/// safe wrapper methods below can call through it.
pub(crate) struct Kernels {
    pub path: KernelPath,
    dot_f32: unsafe fn(&[f32], &[f32]) -> f32,
    axpy_f32: unsafe fn(f32, &[f32], &mut [f32]),
    exp_f32: unsafe fn(&mut [f32]),
    dot_f16: DotFn<F16, f32>,
    /// Rows' dots in llamafile's tinyBLAS order (`f16::tiny_blas_dot_scalar`).
    dots_f16_tiny_blas: RowsFn<F16, f32>,
    /// A BF16 matmul's dots against bfloat16-rounded activations: one token in the order of
    /// ggml's `ggml_vec_dot_bf16`, a batch in llamafile tinyBLAS's (both on x86; elsewhere the
    /// row dot's order).
    dot_bf16_token: DotFn<BF16, f32>,
    dot_bf16_batch: MultiFn<BF16, f32>,
    /// BF16 weights against packed bfloat16 activations on `vdpbf16ps`, where the CPU has it.
    bf16_pairs: Option<Bf16Pairs>,
    /// The prompt kernels with tokens in the lanes (K-quants and Q5_1), where the CPU has
    /// AVX-512 VNNI.
    #[cfg(target_arch = "x86_64")]
    k_lanes: Option<KLanes>,
    /// A LoRA pair's B rows against one token: `out[i] += dot(row i, x) * scale`, each dot in
    /// tinyBLAS's order or `dot_f16`'s as the order says.
    lora_rows_f16: unsafe fn(&[F16], &[f32], f32, &mut [f32], F16SumOrder),
    /// The same B rows against several tokens of `r` values each, in tinyBLAS's order.
    lora_tokens_f16: unsafe fn(&[F16], &[f32], usize, f32, &mut [f32]),
    quantize_q8_1: unsafe fn(&[f32], &mut [BlockQ8_1]),
    quantize_q8_k: unsafe fn(&[f32], &mut [BlockQ8K]),
    dot_q4_0: MultiFn<BlockQ4_0, BlockQ8_1>,
    dot_q4_1: MultiFn<BlockQ4_1, BlockQ8_1>,
    dot_q5_0: MultiFn<BlockQ5_0, BlockQ8_1>,
    dot_q5_1: MultiFn<BlockQ5_1, BlockQ8_1>,
    dot_iq4_nl: MultiFn<BlockIq4Nl, BlockQ8_1>,
    dot_q8_0: MultiFn<BlockQ8_0, BlockQ8_1>,
    dot_q4_k: MultiFn<BlockQ4K, BlockQ8K>,
    dot_q5_k: MultiFn<BlockQ5K, BlockQ8K>,
    /// As `dot_q6_k_batch`, for Q5_K.
    dot_q5_k_batch: MultiFn<BlockQ5K, BlockQ8K>,
    dot_q6_k: MultiFn<BlockQ6K, BlockQ8K>,
    /// Q6_K against [`crate::matmul::TILED_MIN_TOKENS`] or more tokens: on x86 in the order of
    /// ggml's tiled K-quant matmul, which llama.cpp runs for such batches.
    dot_q6_k_batch: MultiFn<BlockQ6K, BlockQ8K>,
    dot_iq4_xs: MultiFn<BlockIq4Xs, BlockQ8K>,
    /// As `dot_q6_k_batch`, for IQ4_XS.
    dot_iq4_xs_batch: MultiFn<BlockIq4Xs, BlockQ8K>,
    dot_q2_k: MultiFn<BlockQ2K, BlockQ8K>,
    /// As `dot_q6_k_batch`, for Q2_K.
    dot_q2_k_batch: MultiFn<BlockQ2K, BlockQ8K>,
    dot_q3_k: MultiFn<BlockQ3K, BlockQ8K>,
    /// Q3_K decode where a table has a kernel of its own for many rows against one token
    /// (else one `dot_q3_k` per row); likewise Q2_K.
    rows_q3_k: Option<RowsFn<BlockQ3K, BlockQ8K>>,
    rows_q2_k: Option<RowsFn<BlockQ2K, BlockQ8K>>,
    rows_iq4_xs: Option<RowsFn<BlockIq4Xs, BlockQ8K>>,
    /// As `dot_q6_k_batch`, for Q3_K.
    dot_q3_k_batch: MultiFn<BlockQ3K, BlockQ8K>,
    rows_q4_0: RowsFn<BlockQ4_0, BlockQ8_1>,
    rows_q4_1: RowsFn<BlockQ4_1, BlockQ8_1>,
    rows_q5_0: RowsFn<BlockQ5_0, BlockQ8_1>,
    rows_q5_1: RowsFn<BlockQ5_1, BlockQ8_1>,
    rows_iq4_nl: RowsFn<BlockIq4Nl, BlockQ8_1>,
    rows_q8_0: RowsFn<BlockQ8_0, BlockQ8_1>,
    gemm_q4_0x8: GemmFn<BlockQ4_0x8, BlockQ8_1>,
    gemm_q4_1x8: GemmFn<BlockQ4_1x8, BlockQ8_1>,
    gemm_q8_0x8: GemmFn<BlockQ8_0x8, BlockQ8_1>,
    gemm_q5_0x8: GemmFn<BlockQ5_0x8, BlockQ8_1>,
    gemm_iq4_nlx8: GemmFn<BlockIq4Nlx8, BlockQ8_1>,
    /// Two groups of IQ4_NL at once (512-bit registers), where the CPU has them.
    gemm_iq4_nlx8_pairs: Option<GemmFn<BlockIq4Nlx8, BlockQ8_1>>,
    /// Two groups of Q4_0 at once, likewise.
    gemm_q4_0x8_pairs: Option<GemmFn<BlockQ4_0x8, BlockQ8_1>>,
    /// Two groups of Q5_0 at once, likewise.
    gemm_q5_0x8_pairs: Option<GemmFn<BlockQ5_0x8, BlockQ8_1>>,
    /// Two groups of Q8_0 at once, likewise.
    gemm_q8_0x8_pairs: Option<GemmFn<BlockQ8_0x8, BlockQ8_1>>,
    gemv_q4_0x8: GemmFn<BlockQ4_0x8, BlockQ8_1>,
    gemv_q4_1x8: GemmFn<BlockQ4_1x8, BlockQ8_1>,
    gemv_q8_0x8: GemmFn<BlockQ8_0x8, BlockQ8_1>,
    gemv_q5_0x8: GemmFn<BlockQ5_0x8, BlockQ8_1>,
    gemv_iq4_nlx8: GemmFn<BlockIq4Nlx8, BlockQ8_1>,
    /// Q8_K with the sign rule of ggml's 4-row gemm quantizer ([`q8_k::Ties::Positive`]).
    quantize_q8_k_4x8: unsafe fn(&[f32], &mut [BlockQ8K]),
    gemm_q4_kx8: MultiFn<BlockQ4Kx8, BlockQ8K>,
    gemv_q4_kx8: RowsFn<BlockQ4Kx8, BlockQ8K>,
}

static SCALAR: Kernels = Kernels {
    path: KernelPath::Scalar,
    dot_f32: f32::dot_scalar,
    axpy_f32: f32::axpy_scalar,
    exp_f32: exp::exp_scalar,
    dot_f16: f16::dot_scalar,
    dots_f16_tiny_blas: f16::tiny_blas_dots_scalar,
    lora_rows_f16: lora::rows_f16_scalar,
    lora_tokens_f16: lora::tokens_f16_scalar,
    dot_bf16_token: bf16::vec_dot_scalar,
    dot_bf16_batch: bf16::tiny_blas_multi_scalar,
    bf16_pairs: None,
    #[cfg(target_arch = "x86_64")]
    k_lanes: None,
    quantize_q8_1: q8_1::quantize_scalar,
    quantize_q8_k: q8_k::quantize_scalar,
    dot_q4_0: q4_0::dot_multi_scalar,
    dot_q4_1: q4_1::dot_multi_scalar,
    dot_q5_0: q5_0::dot_multi_scalar,
    dot_q5_1: q5_1::dot_multi_scalar,
    dot_iq4_nl: iq4_nl::dot_multi_scalar,
    dot_q8_0: q8_0::dot_multi_scalar,
    dot_q4_k: q4_k::dot_multi_scalar,
    dot_q5_k: q5_k::dot_multi_scalar,
    dot_q5_k_batch: q5_k::dot_tiled_multi_scalar,
    dot_q6_k: q6_k::dot_multi_scalar,
    dot_q6_k_batch: q6_k::dot_tiled_multi_scalar,
    dot_iq4_xs: iq4_xs::dot_multi_scalar,
    dot_iq4_xs_batch: iq4_xs::dot_tiled_multi_scalar,
    dot_q2_k: q2_k::dot_multi_scalar,
    dot_q2_k_batch: q2_k::dot_tiled_multi_scalar,
    dot_q3_k: q3_k::dot_multi_scalar,
    rows_q3_k: None,
    rows_q2_k: None,
    rows_iq4_xs: None,
    dot_q3_k_batch: q3_k::dot_tiled_multi_scalar,
    rows_q4_0: q4_0::dot_rows_scalar,
    rows_q4_1: q4_1::dot_rows_scalar,
    rows_q5_0: q5_0::dot_rows_scalar,
    rows_q5_1: q5_1::dot_rows_scalar,
    rows_iq4_nl: iq4_nl::dot_rows_scalar,
    rows_q8_0: q8_0::dot_rows_scalar,
    gemm_q4_0x8: q4x8::gemm_scalar,
    gemm_q4_1x8: q4x8::gemm_scalar,
    gemm_q8_0x8: q8_0x8::gemm_scalar,
    gemv_q4_0x8: q4x8::gemv_scalar,
    gemv_q4_1x8: q4x8::gemv_scalar,
    gemv_q8_0x8: q8_0x8::gemv_scalar,
    gemm_q5_0x8: q5_0x8::gemm_scalar,
    gemv_q5_0x8: q5_0x8::gemv_scalar,
    gemm_iq4_nlx8: iq4_nlx8::gemm_scalar,
    gemm_iq4_nlx8_pairs: None,
    gemm_q4_0x8_pairs: None,
    gemm_q5_0x8_pairs: None,
    gemm_q8_0x8_pairs: None,
    gemv_iq4_nlx8: iq4_nlx8::gemv_scalar,
    quantize_q8_k_4x8: q8_k::quantize_4x8_scalar,
    gemm_q4_kx8: q4_kx8::gemm_scalar,
    gemv_q4_kx8: q4_kx8::gemv_scalar,
};

#[cfg(target_arch = "x86_64")]
static AVX2: Kernels = Kernels {
    path: KernelPath::Avx2Fma,
    dot_f32: f32::avx2::dot,
    axpy_f32: f32::avx2::axpy,
    exp_f32: exp::avx2::exp,
    dot_f16: f16::avx2::dot,
    dots_f16_tiny_blas: f16::avx2::tiny_blas_dots,
    lora_rows_f16: lora::avx2::rows_f16,
    lora_tokens_f16: lora::avx2::tokens_f16,
    dot_bf16_token: bf16::avx2::vec_dot,
    dot_bf16_batch: bf16::avx2::tiny_blas_multi,
    bf16_pairs: None,
    #[cfg(target_arch = "x86_64")]
    k_lanes: None,
    quantize_q8_1: q8_1::avx2::quantize,
    quantize_q8_k: q8_k::avx2::quantize,
    dot_q4_0: q4_0::avx2::dot_multi,
    dot_q4_1: q4_1::avx2::dot_multi,
    dot_q5_0: q5_0::avx2::dot_multi,
    dot_q5_1: q5_1::avx2::dot_multi,
    dot_iq4_nl: iq4_nl::avx2::dot_multi,
    dot_q8_0: q8_0::avx2::dot_multi,
    dot_q4_k: q4_k::avx2::dot_multi,
    dot_q5_k: q5_k::avx2::dot_multi,
    dot_q5_k_batch: q5_k::avx2::dot_tiled_multi,
    dot_q6_k: q6_k::avx2::dot_multi,
    dot_q6_k_batch: q6_k::avx2::dot_tiled_multi,
    dot_iq4_xs: iq4_xs::avx2::dot_multi,
    dot_iq4_xs_batch: iq4_xs::avx2::dot_tiled_multi,
    dot_q2_k: q2_k::avx2::dot_multi,
    dot_q2_k_batch: q2_k::avx2::dot_tiled_multi,
    dot_q3_k: q3_k::avx2::dot_multi,
    rows_q3_k: None,
    rows_q2_k: None,
    rows_iq4_xs: None,
    dot_q3_k_batch: q3_k::avx2::dot_tiled_multi,
    rows_q4_0: q4_0::avx2::dot_rows,
    rows_q4_1: q4_1::avx2::dot_rows,
    rows_q5_0: q5_0::avx2::dot_rows,
    rows_q5_1: q5_1::avx2::dot_rows,
    rows_iq4_nl: iq4_nl::avx2::dot_rows,
    rows_q8_0: q8_0::avx2::dot_rows,
    gemm_q4_0x8: q4x8::avx2::gemm,
    gemm_q4_1x8: q4x8::avx2::gemm,
    gemm_q8_0x8: q8_0x8::avx2::gemm,
    gemv_q4_0x8: q4x8::avx2::gemv,
    gemv_q4_1x8: q4x8::avx2::gemv,
    gemv_q8_0x8: q8_0x8::avx2::gemv,
    gemm_q5_0x8: q5_0x8::avx2::gemm,
    gemv_q5_0x8: q5_0x8::avx2::gemv,
    gemm_iq4_nlx8: iq4_nlx8::avx2::gemm,
    gemm_iq4_nlx8_pairs: None,
    gemm_q4_0x8_pairs: None,
    gemm_q5_0x8_pairs: None,
    gemm_q8_0x8_pairs: None,
    gemv_iq4_nlx8: iq4_nlx8::avx2::gemv,
    quantize_q8_k_4x8: q8_k::avx2::quantize_4x8,
    gemm_q4_kx8: q4_kx8::avx2::gemm,
    gemv_q4_kx8: q4_kx8::avx2::gemv,
};

/// [`AVX2`] with the repacked Q4_0, Q4_1, Q5_0 and IQ4_NL on `vpdpbusd`, and the prompt kernels
/// of IQ4_XS, Q2_K, Q3_K, Q5_K and Q6_K on `vpdpwssd`: the same exact integers, so the same
/// bits.
#[cfg(target_arch = "x86_64")]
static AVX512_VNNI: Kernels = Kernels {
    path: KernelPath::Avx512Vnni,
    gemm_q4_0x8: q4x8::avx512vnni::gemm,
    gemm_q4_1x8: q4x8::avx512vnni::gemm,
    gemm_q5_0x8: q5_0x8::avx512vnni::gemm,
    gemv_q4_0x8: q4x8::avx512vnni::gemv,
    gemv_q4_1x8: q4x8::avx512vnni::gemv,
    gemv_q5_0x8: q5_0x8::avx512vnni::gemv,
    gemm_iq4_nlx8: iq4_nlx8::avx512vnni::gemm,
    gemm_iq4_nlx8_pairs: Some(x8_pairs::avx512vnni::gemm),
    gemm_q4_0x8_pairs: Some(x8_pairs::avx512vnni::gemm),
    gemm_q5_0x8_pairs: Some(q5_0x8::avx512vnni_pairs::gemm),
    gemm_q8_0x8_pairs: Some(q8_0x8::avx512vnni_pairs::gemm),
    gemv_iq4_nlx8: iq4_nlx8::avx512vnni::gemv,
    gemv_q8_0x8: q8_0x8::avx512vnni::gemv,
    rows_q5_1: q5_1::avx512vnni::dot_rows,
    dot_q5_k: q5_k::avx512vnni::dot_multi,
    dot_iq4_xs_batch: iq4_xs::avx2::dot_tiled_multi_vnni,
    dot_q2_k_batch: q2_k::avx2::dot_tiled_multi_vnni,
    dot_q3_k_batch: q3_k::avx2::dot_tiled_multi_vnni,
    dot_q5_k_batch: q5_k::avx2::dot_tiled_multi_vnni,
    dot_q6_k_batch: q6_k::avx2::dot_tiled_multi_vnni,
    rows_q3_k: Some(q3_k::avx512vnni::dot_rows),
    rows_q2_k: Some(q2_k::avx512vnni::dot_rows),
    rows_iq4_xs: Some(iq4_xs::avx512vnni::dot_rows),
    k_lanes: Some(KLanes { _detected: () }),
    ..AVX2
};

/// [`AVX512_VNNI`] with BF16 weights on `vdpbf16ps`: other sums than AVX2's (llama.cpp's
/// AVX-512 build's, see `formats::bf16_pairs`), and half the activation bytes.
#[cfg(target_arch = "x86_64")]
static AVX512_BF16: Kernels = Kernels {
    path: KernelPath::Avx512Bf16,
    bf16_pairs: Some(Bf16Pairs {
        pack: bf16::avx2::quantize,
        rows: bf16_pairs::avx512bf16::vec_dot_rows,
        tile: bf16_pairs::avx512bf16::tile,
    }),
    ..AVX512_VNNI
};

/// A BF16 matmul's kernels over packed bfloat16 activations (`formats::bf16_pairs`). Only
/// a table handed out after detecting AVX512_BF16 holds one.
#[derive(Clone, Copy)]
pub(crate) struct Bf16Pairs {
    /// f32 activations rounded to bfloat16 as ggml rounds them.
    pack: unsafe fn(&[f32], &mut [BF16]),
    /// `out.len()` rows against one token, each in `ggml_vec_dot_bf16`'s order.
    rows: RowsFn<BF16, BF16>,
    /// `bf16_pairs::TILE_ROWS` rows against 1 to `bf16_pairs::TILE_TOKENS` tokens, each in
    /// tinyBLAS's order, token `t`'s results at `out[t·ld..]`.
    tile: unsafe fn(&[BF16], &[BF16], &mut [f32], usize),
}

impl Bf16Pairs {
    /// `x` rounded to bfloat16 into `out` (ggml's `GGML_FP32_TO_BF16`).
    #[inline]
    pub fn pack(&self, x: &[f32], out: &mut [BF16]) {
        assert_eq!(x.len(), out.len(), "bf16 pack: length mismatch");
        // SAFETY: as in `rows`.
        unsafe { (self.pack)(x, out) }
    }

    /// Rows of `w` (each `x.len()` long) against the token `x`, one per `out` entry.
    #[inline]
    pub fn rows(&self, w: &[BF16], x: &[BF16], out: &mut [f32]) {
        assert_eq!(w.len(), x.len() * out.len(), "bf16 rows: length mismatch");
        // SAFETY: a `Bf16Pairs` exists only in a table `kernels` hands out after detecting
        // the features its kernels need.
        unsafe { (self.rows)(w, x, out) }
    }

    /// `bf16_pairs::TILE_ROWS` rows of `w` against the 1 to `bf16_pairs::TILE_TOKENS` tokens
    /// of `x`; token `t`'s results go to `out[t·ld..t·ld + TILE_ROWS]`.
    #[inline]
    pub fn tile(&self, w: &[BF16], x: &[BF16], out: &mut [f32], ld: usize) {
        // The kernel checks the shape (it runs on a hot path only through this wrapper).
        // SAFETY: as in `rows`.
        unsafe { (self.tile)(w, x, out, ld) }
    }
}

/// The prompt kernels with tokens in the lanes (`formats::k_lanes`, `formats::q5_1_lanes`).
/// Only a table handed out after detecting AVX-512 VNNI holds one, so its safe methods may run
/// them.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct KLanes {
    _detected: (),
}

#[cfg(target_arch = "x86_64")]
impl KLanes {
    /// One weight super-block unpacked for [`KLanes::rows`].
    #[inline]
    pub fn unpack<F: LaneFormat>(&self, block: &F, u: &mut Unpacked) {
        // SAFETY: AVX2, FMA and F16C were detected before this table was handed out.
        unsafe { block.unpack(u) }
    }

    /// One Q5_1 block unpacked for [`KLanes::row_q5_1`].
    #[inline]
    pub fn unpack_q5_1(&self, block: &BlockQ5_1, u: &mut q5_1_lanes::Unpacked) {
        // SAFETY: AVX-512 VNNI (with F, VL and BW) was detected before this table was handed
        // out.
        unsafe { q5_1_lanes::avx512vnni::unpack(block, u) }
    }

    /// One Q5_1 row (`u`, `a.len()` unpacked blocks) against one group of
    /// [`q5_1_lanes::LANES`] tokens.
    #[inline]
    pub fn row_q5_1(
        &self,
        u: &[q5_1_lanes::Unpacked],
        a: &[q5_1_lanes::Q8_1Lanes],
        out: &mut [f32; q5_1_lanes::LANES],
    ) {
        // SAFETY: as in `unpack_q5_1`; the kernel checks the buffers' lengths.
        unsafe { q5_1_lanes::avx512vnni::row(u, a, out) }
    }

    /// `R` rows (`u`, `a.len()` unpacked super-blocks each) against one group of
    /// [`k_lanes::LANES`] tokens (`a`); `out[r][t]` is row r dot token t.
    #[inline]
    pub fn rows<F: LaneFormat, const R: usize>(
        &self,
        u: &[Unpacked],
        a: &[Q8KLanes],
        out: &mut [[f32; k_lanes::LANES]],
    ) {
        // SAFETY: AVX-512 VNNI (with F, VL and BW) was detected before this table was handed
        // out; the kernel checks the buffers' lengths.
        unsafe { k_lanes::avx512vnni::rows::<F, R>(u, a, out) }
    }
}

/// Rows of `w` (each `a.len()` blocks) against the one token `a`: the table's decode kernel
/// where it has one, else one `dot` (a one-token multi-token call) per row.
fn rows_or_dots<W, A>(
    what: &str,
    rows: Option<RowsFn<W, A>>,
    dot: impl Fn(&[W], &[A], &mut [f32]),
    w: &[W],
    a: &[A],
    out: &mut [f32],
) {
    assert_eq!(w.len(), a.len() * out.len(), "{what}: block count mismatch");
    match rows {
        // SAFETY: a table holds a kernel only if `kernels` handed it out after detecting the
        // kernel's features, as in `dot_f32`.
        Some(rows) => unsafe { rows(w, a, out) },
        None => each_row(
            |w, a| {
                let mut o = 0.0;
                dot(w, a, std::slice::from_mut(&mut o));
                o
            },
            w,
            a,
            out,
        ),
    }
}

#[cfg(target_arch = "aarch64")]
static NEON: Kernels = Kernels {
    path: KernelPath::Neon,
    dot_f32: f32::neon::dot,
    axpy_f32: f32::neon::axpy,
    exp_f32: exp::exp_scalar,
    dot_f16: f16::dot_scalar,
    dots_f16_tiny_blas: f16::tiny_blas_dots_scalar,
    lora_rows_f16: lora::rows_f16_scalar,
    lora_tokens_f16: lora::tokens_f16_scalar,
    dot_bf16_token: bf16::neon::dot,
    dot_bf16_batch: bf16::neon::dot_multi,
    bf16_pairs: None,
    quantize_q8_1: q8_1::neon::quantize,
    quantize_q8_k: q8_k::neon::quantize,
    dot_q4_0: q4_0::neon::dot_multi,
    dot_q4_1: q4_1::neon::dot_multi,
    dot_q5_0: q5_0::neon::dot_multi,
    dot_q5_1: q5_1::neon::dot_multi,
    dot_iq4_nl: iq4_nl::neon::dot_multi,
    dot_q8_0: q8_0::neon::dot_multi,
    dot_q4_k: q4_k::neon::dot_multi,
    dot_q5_k: q5_k::neon::dot_multi,
    dot_q5_k_batch: q5_k::neon::dot_multi,
    dot_q6_k: q6_k::neon::dot_multi,
    // ggml's tiled matmul is x86-only: batches keep the row dot's order.
    dot_q6_k_batch: q6_k::neon::dot_multi,
    dot_iq4_xs: iq4_xs::neon::dot_multi,
    dot_iq4_xs_batch: iq4_xs::neon::dot_multi,
    dot_q2_k: q2_k::neon::dot_multi,
    dot_q2_k_batch: q2_k::neon::dot_multi,
    dot_q3_k: q3_k::neon::dot_multi,
    rows_q3_k: None,
    rows_q2_k: None,
    rows_iq4_xs: None,
    dot_q3_k_batch: q3_k::neon::dot_multi,
    rows_q4_0: q4_0::neon::dot_rows,
    rows_q4_1: q4_1::neon::dot_rows,
    rows_q5_0: q5_0::neon::dot_rows,
    rows_q5_1: q5_1::neon::dot_rows,
    rows_iq4_nl: iq4_nl::neon::dot_rows,
    rows_q8_0: q8_0::neon::dot_rows,
    // Only Q4_0 is repacked on NEON; the other entries serve a forced repack.
    gemm_q4_0x8: q4x8::neon::gemm,
    gemm_q4_1x8: q4x8::gemm_scalar,
    gemm_q8_0x8: q8_0x8::gemm_scalar,
    gemv_q4_0x8: q4x8::neon::gemv,
    gemv_q4_1x8: q4x8::gemv_scalar,
    gemv_q8_0x8: q8_0x8::gemv_scalar,
    gemm_q5_0x8: q5_0x8::gemm_scalar,
    gemv_q5_0x8: q5_0x8::gemv_scalar,
    gemm_iq4_nlx8: iq4_nlx8::gemm_scalar,
    gemm_iq4_nlx8_pairs: None,
    gemm_q4_0x8_pairs: None,
    gemm_q5_0x8_pairs: None,
    gemm_q8_0x8_pairs: None,
    gemv_iq4_nlx8: iq4_nlx8::gemv_scalar,
    // Q4_K is not repacked on NEON (ggml's NEON kernels sum in another order); the scalar
    // reference serves a forced repack.
    quantize_q8_k_4x8: q8_k::neon::quantize_4x8,
    gemm_q4_kx8: q4_kx8::gemm_scalar,
    gemv_q4_kx8: q4_kx8::gemv_scalar,
};

/// [`NEON`] with the quantized weights' dots on SDOT: the same exact integers, so the same
/// bits, in fewer instructions.
#[cfg(target_arch = "aarch64")]
static NEON_DOTPROD: Kernels = Kernels {
    path: KernelPath::NeonDotprod,
    dot_q4_0: q4_0::neon::dotprod::dot_multi,
    dot_q4_1: q4_1::neon::dotprod::dot_multi,
    dot_q5_0: q5_0::neon::dotprod::dot_multi,
    dot_q5_1: q5_1::neon::dotprod::dot_multi,
    dot_iq4_nl: iq4_nl::neon::dotprod::dot_multi,
    dot_q8_0: q8_0::neon::dotprod::dot_multi,
    dot_q4_k: q4_k::neon::dotprod::dot_multi,
    dot_q5_k: q5_k::neon::dotprod::dot_multi,
    dot_q5_k_batch: q5_k::neon::dotprod::dot_multi,
    dot_q6_k: q6_k::neon::dotprod::dot_multi,
    dot_q6_k_batch: q6_k::neon::dotprod::dot_multi,
    dot_iq4_xs: iq4_xs::neon::dotprod::dot_multi,
    dot_iq4_xs_batch: iq4_xs::neon::dotprod::dot_multi,
    dot_q2_k: q2_k::neon::dotprod::dot_multi,
    dot_q2_k_batch: q2_k::neon::dotprod::dot_multi,
    dot_q3_k: q3_k::neon::dotprod::dot_multi,
    rows_q3_k: None,
    rows_q2_k: None,
    rows_iq4_xs: None,
    dot_q3_k_batch: q3_k::neon::dotprod::dot_multi,
    rows_q4_0: q4_0::neon::dotprod::dot_rows,
    rows_q4_1: q4_1::neon::dotprod::dot_rows,
    rows_q5_0: q5_0::neon::dotprod::dot_rows,
    rows_q5_1: q5_1::neon::dotprod::dot_rows,
    rows_iq4_nl: iq4_nl::neon::dotprod::dot_rows,
    rows_q8_0: q8_0::neon::dotprod::dot_rows,
    gemm_q4_0x8: q4x8::neon::dotprod::gemm,
    gemv_q4_0x8: q4x8::neon::dotprod::gemv,
    ..NEON
};

/// [`NEON_DOTPROD`] with the repacked Q4_0 prefill on SMMLA: twice SDOT's multiply-adds per
/// instruction, the same exact integers, so the same bits. (Decode multiplies one token, which
/// a 2×2 matrix instruction cannot fill: it stays on SDOT.)
#[cfg(target_arch = "aarch64")]
static NEON_I8MM: Kernels = Kernels {
    path: KernelPath::NeonI8mm,
    gemm_q4_0x8: q4x8::neon::i8mm::gemm,
    ..NEON_DOTPROD
};

/// True when the AVX2 kernels may run here.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// AVX-512 F, VL, BW and VNNI: what `vpdpbusd` on 256-bit registers needs, and the byte masks of
/// Q5_1's decode (every CPU with VNNI has BW).
#[cfg(target_arch = "x86_64")]
fn has_avx512vnni_features() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// True when the AVX-512 VNNI kernels may run here (on top of [`has_avx2`]).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512vnni() -> bool {
    has_avx2() && has_avx512vnni_features()
}

/// True when the BF16 kernels on `vdpbf16ps` may run here (on top of [`has_avx512vnni`]).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512bf16() -> bool {
    has_avx512vnni() && is_x86_feature_detected!("avx512bf16")
}

fn best() -> &'static Kernels {
    static BEST: OnceLock<&'static Kernels> = OnceLock::new();
    BEST.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if has_avx512bf16() {
            return &AVX512_BF16;
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx512vnni() {
            return &AVX512_VNNI;
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            return &AVX2;
        }
        // NEON is part of the aarch64 baseline; checked anyway so a soft-float build stays
        // on the scalar kernels.
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("neon") {
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                if std::arch::is_aarch64_feature_detected!("i8mm") {
                    return &NEON_I8MM;
                }
                return &NEON_DOTPROD;
            }
            return &NEON;
        }
        &SCALAR
    })
}

/// Forcing starts from `KOSTANT_FORCE_SCALAR` (read once) and can be changed at run time.
fn force_flag() -> &'static AtomicBool {
    static FORCE: OnceLock<AtomicBool> = OnceLock::new();
    FORCE.get_or_init(|| {
        let on = std::env::var("KOSTANT_FORCE_SCALAR").is_ok_and(|v| v == "1" || v == "true");
        AtomicBool::new(on)
    })
}

/// Makes every later kernel call use (or stop using) the scalar reference kernels. Calls
/// already running finish on the table they started with. The switch is process-wide, so
/// tests switch it through a held [`kernel_table`], never this.
pub fn set_force_scalar(on: bool) {
    force_flag().store(on, Ordering::Relaxed);
}

/// The process-wide kernel table, held by one test at a time: a test binary's tests run on
/// parallel threads, and one test's switch to the scalar table would otherwise land in the
/// middle of another's (a repack count of 14 where 0 was due, seen in CI). Dropping it (a
/// panic's unwinding included) hands the next holder the SIMD table.
pub struct KernelTable {
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl KernelTable {
    /// Switches every later kernel call to the scalar reference kernels (`true`) or back to
    /// this CPU's best ([`set_force_scalar`]).
    pub fn set_scalar(&self, on: bool) {
        set_force_scalar(on);
    }
}

impl Drop for KernelTable {
    fn drop(&mut self) {
        set_force_scalar(false);
    }
}

/// Waits for the kernel table and holds it until the returned guard is dropped. Every holder
/// hands it back on this CPU's best kernels (its drop), so the next finds them; a holder that
/// panicked does not poison it for the rest.
pub fn kernel_table() -> KernelTable {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    KernelTable { _lock: lock }
}

/// The kernel table to use now.
pub(crate) fn kernels() -> &'static Kernels {
    if force_flag().load(Ordering::Relaxed) {
        &SCALAR
    } else {
        best()
    }
}

/// The detected features and the kernel path in use.
pub fn cpu_features() -> CpuFeatures {
    let forced = force_flag().load(Ordering::Relaxed);
    #[cfg(target_arch = "x86_64")]
    let (avx2, fma, f16c) = (
        is_x86_feature_detected!("avx2"),
        is_x86_feature_detected!("fma"),
        is_x86_feature_detected!("f16c"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    let (avx2, fma, f16c) = (false, false, false);
    #[cfg(target_arch = "x86_64")]
    let (avx512vnni, avx512bf16) = (
        has_avx512vnni_features(),
        has_avx512vnni_features() && is_x86_feature_detected!("avx512bf16"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    let (avx512vnni, avx512bf16) = (false, false);
    #[cfg(target_arch = "aarch64")]
    let (neon, dotprod) = (
        std::arch::is_aarch64_feature_detected!("neon"),
        std::arch::is_aarch64_feature_detected!("dotprod"),
    );
    #[cfg(not(target_arch = "aarch64"))]
    let (neon, dotprod) = (false, false);
    CpuFeatures {
        path: kernels().path,
        best: best().path,
        forced_scalar: forced,
        avx2,
        fma,
        f16c,
        avx512vnni,
        avx512bf16,
        neon,
        dotprod,
    }
}

/// Panics unless `len` values hold `rows` rows of `cols`: the check before a kernel reads
/// `rows` rows of its weights unchecked.
fn assert_holds_rows(what: &str, len: usize, rows: usize, cols: usize) {
    assert!(
        len >= rows * cols,
        "{what}: {rows} rows of {cols} need {} values, got {len}",
        rows * cols
    );
}

impl Kernels {
    #[inline]
    pub fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
        // SAFETY: this table was handed out by `kernels`, which only selects SIMD kernels after
        // detecting their CPU features; lengths were checked above.
        unsafe { (self.dot_f32)(a, b) }
    }

    #[inline]
    pub fn axpy_f32(&self, alpha: f32, x: &[f32], y: &mut [f32]) {
        assert_eq!(x.len(), y.len(), "axpy_f32: length mismatch");
        // SAFETY: as in `dot_f32`.
        unsafe { (self.axpy_f32)(alpha, x, y) }
    }

    #[inline]
    pub fn exp_f32(&self, x: &mut [f32]) {
        // SAFETY: as in `dot_f32`; there is a single slice, so no lengths to check.
        unsafe { (self.exp_f32)(x) }
    }

    #[inline]
    pub fn dot_f16(&self, w: &[F16], x: &[f32]) -> f32 {
        assert_eq!(w.len(), x.len(), "dot_f16: length mismatch");
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_f16)(w, x) }
    }

    /// `out[i] = dot(row i of w, x)` for the `out.len()` rows of `x.len()` values in `w`, each
    /// in llamafile's tinyBLAS order (`f16::tiny_blas_dot_scalar`), not [`Self::dot_f16`]'s.
    #[inline]
    pub fn dots_f16_tiny_blas(&self, w: &[F16], x: &[f32], out: &mut [f32]) {
        assert_holds_rows("dots_f16_tiny_blas", w.len(), out.len(), x.len());
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dots_f16_tiny_blas)(w, x, out) }
    }

    /// `out[i] += dot(row i of w, x) * scale` for the `out.len()` rows of `x.len()` values in
    /// `w`, each dot in [`Self::dots_f16_tiny_blas`]'s order or [`Self::dot_f16`]'s as `order`
    /// says.
    #[inline]
    pub fn lora_rows_f16(
        &self,
        w: &[F16],
        x: &[f32],
        scale: f32,
        out: &mut [f32],
        order: F16SumOrder,
    ) {
        assert_holds_rows("lora_rows_f16", w.len(), out.len(), x.len());
        // SAFETY: as in `dot_f32`.
        unsafe { (self.lora_rows_f16)(w, x, scale, out, order) }
    }

    /// For each token of `x` (`r` values each), [`Self::lora_rows_f16`] in tinyBLAS order into
    /// that token's `out.len() / tokens` rows.
    #[inline]
    pub fn lora_tokens_f16(&self, w: &[F16], x: &[f32], r: usize, scale: f32, out: &mut [f32]) {
        let tokens = x.len() / r.max(1);
        assert_eq!(tokens * r, x.len(), "lora_tokens_f16: tokens of {r} values");
        if let Some(rows) = out.len().checked_div(tokens) {
            assert_holds_rows("lora_tokens_f16", w.len(), rows, r);
        }
        // SAFETY: as in `dot_f32`.
        unsafe { (self.lora_tokens_f16)(w, x, r, scale, out) }
    }

    /// One row of a BF16 matmul against one token of bfloat16-rounded activations.
    #[inline]
    pub fn dot_bf16_token(&self, w: &[BF16], x: &[f32]) -> f32 {
        assert_eq!(w.len(), x.len(), "dot_bf16_token: length mismatch");
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_bf16_token)(w, x) }
    }

    /// The K-quant prompt kernels with tokens in the lanes, where the CPU has them.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub fn k_lanes(&self) -> Option<KLanes> {
        self.k_lanes
    }

    /// The BF16 kernels over packed bfloat16 activations, where the CPU has them.
    #[inline]
    pub fn bf16_pairs(&self) -> Option<&Bf16Pairs> {
        self.bf16_pairs.as_ref()
    }

    /// One row of a BF16 matmul against `out.len()` tokens of a batch (two or more).
    #[inline]
    pub fn dot_bf16_batch(&self, w: &[BF16], x: &[f32], out: &mut [f32]) {
        assert_eq!(
            x.len(),
            w.len() * out.len(),
            "dot_bf16_batch: length mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_bf16_batch)(w, x, out) }
    }

    #[inline]
    pub fn quantize_q8_1(&self, x: &[f32], out: &mut [BlockQ8_1]) {
        assert_eq!(x.len(), 32 * out.len(), "quantize_q8_1: length mismatch");
        // SAFETY: as in `dot_f32`.
        unsafe { (self.quantize_q8_1)(x, out) }
    }

    #[inline]
    pub fn quantize_q8_k(&self, x: &[f32], out: &mut [BlockQ8K]) {
        assert_eq!(x.len(), 256 * out.len(), "quantize_q8_k: length mismatch");
        // SAFETY: as in `dot_f32`.
        unsafe { (self.quantize_q8_k)(x, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q4_0(&self, w: &[BlockQ4_0], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q4_0: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q4_0)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q4_1(&self, w: &[BlockQ4_1], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q4_1: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q4_1)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q5_0(&self, w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q5_0: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q5_0)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q5_1(&self, w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q5_1: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q5_1)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_iq4_nl(&self, w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_iq4_nl: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_iq4_nl)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q8_0(&self, w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q8_0: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q8_0)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q4_k(&self, w: &[BlockQ4K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q4_k: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q4_k)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q5_k(&self, w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q5_k: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q5_k)(w, a, out) }
    }

    /// [`Kernels::dot_q5_k`] for a matmul of a batch of at least
    /// [`crate::matmul::TILED_MIN_TOKENS`] tokens.
    #[inline]
    pub fn dot_q5_k_batch(&self, w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q5_k_batch: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q5_k_batch)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q6_k(&self, w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q6_k: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q6_k)(w, a, out) }
    }

    /// [`Kernels::dot_q6_k`] for a matmul of a batch of at least
    /// [`crate::matmul::TILED_MIN_TOKENS`] tokens.
    #[inline]
    pub fn dot_q6_k_batch(&self, w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q6_k_batch: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q6_k_batch)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_iq4_xs(&self, w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_iq4_xs: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_iq4_xs)(w, a, out) }
    }

    /// [`Kernels::dot_iq4_xs`] for a matmul of a batch of at least
    /// [`crate::matmul::TILED_MIN_TOKENS`] tokens.
    #[inline]
    pub fn dot_iq4_xs_batch(&self, w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_iq4_xs_batch: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_iq4_xs_batch)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q2_k(&self, w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q2_k: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q2_k)(w, a, out) }
    }

    /// [`Kernels::dot_q2_k`] for a matmul of a batch of at least
    /// [`crate::matmul::TILED_MIN_TOKENS`] tokens.
    #[inline]
    pub fn dot_q2_k_batch(&self, w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q2_k_batch: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q2_k_batch)(w, a, out) }
    }

    /// One weight row against `out.len()` tokens stored one after another in `a`.
    #[inline]
    pub fn dot_q3_k(&self, w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q3_k: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q3_k)(w, a, out) }
    }

    /// Rows of `w` (each `a.len()` blocks) against the one token `a`, one per `out` entry.
    #[inline]
    pub fn rows_q3_k(&self, w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
        let dot = |w: &[BlockQ3K], a: &[BlockQ8K], o: &mut [f32]| self.dot_q3_k(w, a, o);
        rows_or_dots("rows_q3_k", self.rows_q3_k, dot, w, a, out);
    }

    /// As [`Kernels::rows_q3_k`], for IQ4_XS.
    #[inline]
    pub fn rows_iq4_xs(&self, w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        let dot = |w: &[BlockIq4Xs], a: &[BlockQ8K], o: &mut [f32]| self.dot_iq4_xs(w, a, o);
        rows_or_dots("rows_iq4_xs", self.rows_iq4_xs, dot, w, a, out);
    }

    /// As [`Kernels::rows_q3_k`], for Q2_K.
    #[inline]
    pub fn rows_q2_k(&self, w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
        let dot = |w: &[BlockQ2K], a: &[BlockQ8K], o: &mut [f32]| self.dot_q2_k(w, a, o);
        rows_or_dots("rows_q2_k", self.rows_q2_k, dot, w, a, out);
    }

    /// [`Kernels::dot_q3_k`] for a matmul of a batch of at least
    /// [`crate::matmul::TILED_MIN_TOKENS`] tokens.
    #[inline]
    pub fn dot_q3_k_batch(&self, w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
        assert_eq!(
            a.len(),
            w.len() * out.len(),
            "dot_q3_k_batch: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.dot_q3_k_batch)(w, a, out) }
    }

    /// Several weight rows (`out.len()` rows of `a.len()` blocks) against one token.
    #[inline]
    pub fn rows_q4_0(&self, w: &[BlockQ4_0], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            w.len(),
            a.len() * out.len(),
            "rows_q4_0: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.rows_q4_0)(w, a, out) }
    }

    /// Several weight rows (`out.len()` rows of `a.len()` blocks) against one token.
    #[inline]
    pub fn rows_q4_1(&self, w: &[BlockQ4_1], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            w.len(),
            a.len() * out.len(),
            "rows_q4_1: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.rows_q4_1)(w, a, out) }
    }

    /// Several weight rows (`out.len()` rows of `a.len()` blocks) against one token.
    #[inline]
    pub fn rows_q5_0(&self, w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            w.len(),
            a.len() * out.len(),
            "rows_q5_0: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.rows_q5_0)(w, a, out) }
    }

    /// Several weight rows (`out.len()` rows of `a.len()` blocks) against one token.
    #[inline]
    pub fn rows_q5_1(&self, w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            w.len(),
            a.len() * out.len(),
            "rows_q5_1: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.rows_q5_1)(w, a, out) }
    }

    /// Several weight rows (`out.len()` rows of `a.len()` blocks) against one token.
    #[inline]
    pub fn rows_iq4_nl(&self, w: &[BlockIq4Nl], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            w.len(),
            a.len() * out.len(),
            "rows_iq4_nl: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.rows_iq4_nl)(w, a, out) }
    }

    /// Several weight rows (`out.len()` rows of `a.len()` blocks) against one token.
    #[inline]
    pub fn rows_q8_0(&self, w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
        assert_eq!(
            w.len(),
            a.len() * out.len(),
            "rows_q8_0: block count mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.rows_q8_0)(w, a, out) }
    }

    /// One group of 8 interleaved rows (`w`, one block per column block) against
    /// `out.len() / 8` tokens (at most [`GemmEntry::TOKENS`]) of `w.len()` blocks each, with their
    /// [`GemmEntry::sums`].
    #[inline]
    pub fn gemm_x8<B: GemmEntry>(&self, w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
        let t = out.len() / q4x8::ROWS;
        assert!(
            out.len().is_multiple_of(q4x8::ROWS)
                && t <= B::TOKENS
                && a.len() == w.len() * t
                && sums.len() == a.len() * B::SUMS_PER_BLOCK,
            "gemm_x8: shape mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (B::entry(self))(w, a, sums, out) }
    }

    /// Whether [`Kernels::gemm_x8_pairs`] runs for `B` here.
    #[inline]
    pub fn has_gemm_x8_pairs<B: GemmEntry>(&self) -> bool {
        B::pairs(self).is_some()
    }

    /// [`Kernels::gemm_x8`] for two groups at once: `w` holds two consecutive groups (their
    /// `2·nb` blocks), `out` each token's 16 rows. Only where [`Kernels::has_gemm_x8_pairs`].
    #[inline]
    pub fn gemm_x8_pairs<B: GemmEntry>(
        &self,
        w: &[B],
        a: &[BlockQ8_1],
        sums: &[i32],
        out: &mut [f32],
    ) {
        const R: usize = 2 * q4x8::ROWS;
        let t = out.len() / R;
        let nb = w.len() / 2;
        assert!(
            out.len().is_multiple_of(R)
                && w.len().is_multiple_of(2)
                && t <= B::TOKENS
                && a.len() == nb * t
                && sums.len() == a.len() * B::SUMS_PER_BLOCK,
            "gemm_x8_pairs: shape mismatch"
        );
        let f = B::pairs(self).expect("gemm_x8_pairs: no paired kernel (has_gemm_x8_pairs)");
        // SAFETY: as in `dot_f32`.
        unsafe { f(w, a, sums, out) }
    }

    /// Decode: every group of 8 interleaved rows in `w` (`out.len() / 8` groups of `a.len()`
    /// blocks, group after group) against one token `a` with its [`GemmEntry::sums`].
    #[inline]
    pub fn gemv_x8<B: GemmEntry>(&self, w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
        assert!(
            out.len().is_multiple_of(q4x8::ROWS)
                && w.len() == a.len() * (out.len() / q4x8::ROWS)
                && sums.len() == a.len() * B::SUMS_PER_BLOCK,
            "gemv_x8: shape mismatch"
        );
        if a.is_empty() {
            // Rows of no columns: every dot is an empty sum (and the kernels' walk over groups
            // of `a.len()` blocks needs a nonzero length).
            out.fill(0.0);
            return;
        }
        // SAFETY: as in `dot_f32`.
        unsafe { (B::gemv(self))(w, a, sums, out) }
    }
}

impl Kernels {
    /// [`Kernels::quantize_q8_k`] with the sign rule of ggml's 4-row gemm quantizer.
    #[inline]
    pub fn quantize_q8_k_4x8(&self, x: &[f32], out: &mut [BlockQ8K]) {
        assert_eq!(
            x.len(),
            256 * out.len(),
            "quantize_q8_k_4x8: length mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.quantize_q8_k_4x8)(x, out) }
    }

    /// One group of 8 interleaved Q4_K rows (`w`, one block per super-block) against
    /// `out.len() / 8` tokens (at most 4) in ggml's gemm order.
    #[inline]
    pub fn gemm_q4_kx8(&self, w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
        let t = out.len() / q4_kx8::ROWS;
        assert!(
            out.len().is_multiple_of(q4_kx8::ROWS)
                && t <= q4_kx8::GEMM_TOKENS
                && a.len() == w.len() * t,
            "gemm_q4_kx8: shape mismatch"
        );
        // SAFETY: as in `dot_f32`.
        unsafe { (self.gemm_q4_kx8)(w, a, out) }
    }

    /// Every group of 8 interleaved Q4_K rows in `w` (`out.len() / 8` groups of `a.len()`
    /// blocks) against one token, in ggml's gemv order.
    #[inline]
    pub fn gemv_q4_kx8(&self, w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
        assert!(
            out.len().is_multiple_of(q4_kx8::ROWS)
                && w.len() == a.len() * (out.len() / q4_kx8::ROWS),
            "gemv_q4_kx8: shape mismatch"
        );
        if a.is_empty() {
            out.fill(0.0);
            return;
        }
        // SAFETY: as in `dot_f32`.
        unsafe { (self.gemv_q4_kx8)(w, a, out) }
    }
}

/// The kernel-table entry for an interleaved block type.
pub(crate) trait GemmEntry: Copy + Sync + 'static {
    /// Integers per activation block the kernel reads beside the block ([`Self::sums`]).
    const SUMS_PER_BLOCK: usize;
    /// Most tokens one call of its gemm takes (at most [`q4x8::MAX_CALL_TOKENS`]).
    const TOKENS: usize = q4x8::MAX_TOKENS;
    /// The activation blocks' integer sums the kernel folds an offset in with:
    /// `out.len() == a.len() * SUMS_PER_BLOCK`.
    fn sums(_a: &[BlockQ8_1], _out: &mut [i32]) {}
    fn entry(k: &Kernels) -> GemmFn<Self, BlockQ8_1>;
    /// Its two-groups entry ([`Kernels::gemm_x8_pairs`]), where the table has one.
    fn pairs(_k: &Kernels) -> Option<GemmFn<Self, BlockQ8_1>> {
        None
    }
    /// Its many-groups, one-token entry ([`Kernels::gemv_x8`]).
    fn gemv(k: &Kernels) -> GemmFn<Self, BlockQ8_1>;
}

impl GemmEntry for BlockQ4_0x8 {
    /// Each block's sum: Q4_0's offset of 8.
    const SUMS_PER_BLOCK: usize = 1;

    fn sums(a: &[BlockQ8_1], out: &mut [i32]) {
        q4x8::activation_sums(a, out)
    }
    fn entry(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemm_q4_0x8
    }
    fn pairs(k: &Kernels) -> Option<GemmFn<Self, BlockQ8_1>> {
        k.gemm_q4_0x8_pairs
    }
    fn gemv(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemv_q4_0x8
    }
}

impl GemmEntry for BlockQ4_1x8 {
    const SUMS_PER_BLOCK: usize = 0;
    fn entry(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemm_q4_1x8
    }
    fn gemv(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemv_q4_1x8
    }
}

impl GemmEntry for BlockQ5_0x8 {
    /// Q5_0's offset of 16 in each of ggml's eight lanes.
    const SUMS_PER_BLOCK: usize = q5_0x8::OFFSETS_PER_BLOCK;
    fn sums(a: &[BlockQ8_1], out: &mut [i32]) {
        q5_0x8::lane_offsets(a, out)
    }
    fn entry(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemm_q5_0x8
    }
    fn pairs(k: &Kernels) -> Option<GemmFn<Self, BlockQ8_1>> {
        k.gemm_q5_0x8_pairs
    }
    fn gemv(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemv_q5_0x8
    }
}

impl GemmEntry for BlockIq4Nlx8 {
    /// Each block's sum: the VNNI kernel reads its table shifted by 128.
    const SUMS_PER_BLOCK: usize = 1;
    const TOKENS: usize = iq4_nlx8::TOKENS_PER_CALL;
    fn sums(a: &[BlockQ8_1], out: &mut [i32]) {
        q4x8::activation_sums(a, out)
    }
    fn entry(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemm_iq4_nlx8
    }
    fn pairs(k: &Kernels) -> Option<GemmFn<Self, BlockQ8_1>> {
        k.gemm_iq4_nlx8_pairs
    }
    fn gemv(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemv_iq4_nlx8
    }
}

impl GemmEntry for BlockQ8_0x8 {
    const SUMS_PER_BLOCK: usize = 0;
    fn entry(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemm_q8_0x8
    }
    fn pairs(k: &Kernels) -> Option<GemmFn<Self, BlockQ8_1>> {
        k.gemm_q8_0x8_pairs
    }
    fn gemv(k: &Kernels) -> GemmFn<Self, BlockQ8_1> {
        k.gemv_q8_0x8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under qemu this runs twice in CI: on qemu's `max` CPU (dotprod and i8mm) and on
    /// cortex-a53 (neither).
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn the_neon_path_follows_the_dotprod_and_i8mm_features() {
        use std::arch::is_aarch64_feature_detected as has;
        let want = match (has!("dotprod"), has!("i8mm")) {
            (true, true) => KernelPath::NeonI8mm,
            (true, false) => KernelPath::NeonDotprod,
            (false, _) => KernelPath::Neon,
        };
        eprintln!("kernel path on this CPU: {want}");
        assert_eq!(cpu_features().best, want);
        assert!(want.is_neon());
    }

    #[test]
    fn every_path_has_a_name() {
        let paths = [
            KernelPath::Scalar,
            KernelPath::Avx2Fma,
            KernelPath::Avx512Vnni,
            KernelPath::Avx512Bf16,
            KernelPath::Neon,
            KernelPath::NeonDotprod,
            KernelPath::NeonI8mm,
        ];
        let names: std::collections::HashSet<_> = paths.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), paths.len());
    }
}
