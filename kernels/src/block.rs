//! Reinterpreting GGUF bytes as quant blocks, and the f16 helpers every block format shares.

/// A quant block that can be read straight out of a GGUF byte buffer.
///
/// # Safety
/// Implementors must be `#[repr(C)]` structs made only of `u8`/`i8` arrays, so that their
/// alignment is 1, they have no padding, and every byte pattern is a valid value. Then any
/// byte slice whose length is a multiple of the block size is a valid slice of blocks.
pub(crate) unsafe trait ByteBlock: Sized + Sync + 'static {}

/// Views `bytes` as blocks. The caller has already checked the length; this asserts it again
/// because the cast below is only sound for whole blocks.
pub(crate) fn cast_blocks<B: ByteBlock>(bytes: &[u8]) -> &[B] {
    const { assert!(align_of::<B>() == 1) };
    assert!(
        bytes.len().is_multiple_of(size_of::<B>()),
        "byte length is not a whole number of blocks"
    );
    // SAFETY: `B: ByteBlock` has alignment 1 and accepts any bit pattern (see the trait), the
    // length is a whole number of blocks (asserted above), and the returned slice borrows
    // `bytes`, so it cannot outlive or alias a mutable use of the buffer.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size_of::<B>()) }
}

/// Views little-endian F32 bytes as f32s. GGUF aligns tensor data, so they can almost always
/// be viewed in place; a misaligned slice (only possible from a hand-built `Weights`) is
/// copied into `copy`, which the view then borrows.
pub(crate) fn f32_view<'a>(bytes: &'a [u8], copy: &'a mut Vec<f32>) -> &'a [f32] {
    // SAFETY: every bit pattern is a valid f32, and `align_to` only returns a middle part
    // that is correctly aligned for f32.
    let (pre, mid, post) = unsafe { bytes.align_to::<f32>() };
    if pre.is_empty() && post.is_empty() {
        return mid;
    }
    *copy = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    copy
}

/// Mutable twin of [`cast_blocks`], used by the quantizers to fill an output byte buffer.
pub(crate) fn cast_blocks_mut<B: ByteBlock>(bytes: &mut [u8]) -> &mut [B] {
    const { assert!(align_of::<B>() == 1) };
    assert!(
        bytes.len().is_multiple_of(size_of::<B>()),
        "byte length is not a whole number of blocks"
    );
    // SAFETY: as in `cast_blocks`; the exclusive borrow of `bytes` moves to the result, and
    // every value written through it is again a valid byte pattern.
    unsafe {
        std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), bytes.len() / size_of::<B>())
    }
}

/// Reads a little-endian IEEE half stored as two bytes.
#[inline]
pub(crate) fn f16_to_f32(bytes: [u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(bytes)).to_f32()
}

/// Rounds to the nearest IEEE half and stores it little endian.
#[inline]
pub(crate) fn f32_to_f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// The value `f32_to_f16` would store, read back: quantizers pick codes against the scale the
/// dequantizer will actually see, not the unrounded one.
#[inline]
pub(crate) fn round_to_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}
