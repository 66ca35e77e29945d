//! A fixed orthonormal rotation of each 32-value block of keys and values before the Q4_0
//! cache stores them (after sign flips, a normalized Walsh–Hadamard transform). A block of
//! keys often has one or two channels far larger than the rest; Q4_0 gives a block one scale,
//! so those few set it and the others lose most of their 16 levels. Rotated, a block's energy
//! is spread over all 32 values and the scale fits them all (the idea behind QuaRot's rotated
//! caches). Dot products are unchanged by an orthonormal rotation applied to both sides, so
//! queries are rotated the same way before they meet the keys, and an attention output made
//! of rotated values is rotated back.

/// Values per rotated block: a Q4_0 block.
pub(crate) const BLOCK: usize = 32;

/// Signs flipped before the transform (a fixed pseudo-random pattern: without it, a block
/// that is already spread evenly could be gathered into a few values instead).
const SIGNS: u32 = 0x9e37_79b9;

fn flip(block: &mut [f32]) {
    for (i, x) in block.iter_mut().enumerate() {
        if SIGNS >> i & 1 == 1 {
            *x = -*x;
        }
    }
}

/// The normalized Walsh–Hadamard transform of 32 values, in place (its own inverse).
fn hadamard(block: &mut [f32]) {
    let mut h = 1;
    while h < BLOCK {
        for i in (0..BLOCK).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (block[j], block[j + h]);
                block[j] = a + b;
                block[j + h] = a - b;
            }
        }
        h *= 2;
    }
    // 1 / sqrt(32)
    let norm = 1.0 / (BLOCK as f32).sqrt();
    block.iter_mut().for_each(|x| *x *= norm);
}

/// Rotates every 32-value block of `x` (a multiple of 32 long).
pub(crate) fn rotate(x: &mut [f32]) {
    for block in x.chunks_exact_mut(BLOCK) {
        flip(block);
        hadamard(block);
    }
}

/// Undoes [`rotate`].
pub(crate) fn unrotate(x: &mut [f32]) {
    for block in x.chunks_exact_mut(BLOCK) {
        hadamard(block);
        flip(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_dot_products_and_undoes_itself() {
        let a: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3)
            .collect();
        let mut b: Vec<f32> = (0..64).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.7).collect();
        b[5] = 40.0; // an outlier channel
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        let (mut ra, mut rb) = (a.clone(), b.clone());
        rotate(&mut ra);
        rotate(&mut rb);
        assert!((dot(&a, &b) - dot(&ra, &rb)).abs() < 1e-3);
        // The outlier is spread: the rotated block's largest value is far below it.
        let max = rb[..32].iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(max < 40.0 / 3.0, "{max}");
        unrotate(&mut rb);
        assert!(b.iter().zip(&rb).all(|(x, y)| (x - y).abs() < 1e-4));
    }
}
