//! The app's pixels into a native window buffer. Slint's software renderer draws into a buffer
//! of our own that outlives frames, so it repaints only what changed; each frame is then copied
//! into the window's locked buffer (which Android swaps between frames, so it cannot be drawn
//! into partially) at the content rectangle's offset, and the rest of the window (under the
//! status and navigation bars) is filled with the background.

use std::mem::MaybeUninit;

use slint::platform::software_renderer::PremultipliedRgbaColor;

/// The app's frame: `width * height` pixels, row after row (empty until the first resize).
#[derive(Default)]
pub struct Frame {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<PremultipliedRgbaColor>,
}

impl Frame {
    /// Resizes to `width` x `height`; returns whether the size changed (the next render must
    /// then repaint everything).
    pub fn resize(&mut self, width: usize, height: usize) -> bool {
        if (width, height) == (self.width, self.height) {
            return false;
        }
        self.width = width;
        self.height = height;
        self.pixels = vec![PremultipliedRgbaColor::default(); width * height];
        true
    }
}

/// A byte of a window buffer: the locked buffer's bytes are `MaybeUninit<u8>` (written, never
/// read); tests blit into plain bytes to read them back.
pub trait Byte {
    fn set(&mut self, value: u8);
}

impl Byte for u8 {
    fn set(&mut self, value: u8) {
        *self = value;
    }
}

impl Byte for MaybeUninit<u8> {
    fn set(&mut self, value: u8) {
        self.write(value);
    }
}

/// A locked window buffer with 4 bytes per pixel in R, G, B, A order (RGBA_8888 or
/// RGBX_8888): `stride` pixels per row, of which `width` are shown, `height` rows.
pub struct WindowBuffer<'a, B: Byte> {
    pub bytes: &'a mut [B],
    pub width: usize,
    pub height: usize,
    pub stride: usize,
}

/// Copies `frame` into `dst` with its top-left corner at (`left`, `top`), clipped to the
/// window, and fills every other shown pixel with `background` (opaque R, G, B).
pub fn blit<B: Byte>(
    frame: &Frame,
    dst: WindowBuffer<'_, B>,
    left: usize,
    top: usize,
    background: [u8; 3],
) {
    let bg = [background[0], background[1], background[2], 255];
    let row_bytes = dst.stride * 4;
    for (y, row) in dst.bytes.chunks_mut(row_bytes).take(dst.height).enumerate() {
        let shown_len = (dst.width * 4).min(row.len());
        let shown = &mut row[..shown_len];
        let src_row = y
            .checked_sub(top)
            .filter(|&sy| sy < frame.height)
            .map(|sy| &frame.pixels[sy * frame.width..(sy + 1) * frame.width]);
        for (x, px) in shown.chunks_exact_mut(4).enumerate() {
            let rgba = match src_row.and_then(|r| x.checked_sub(left).and_then(|sx| r.get(sx))) {
                Some(p) => [p.red, p.green, p.blue, 255],
                None => bg,
            };
            for (d, s) in px.iter_mut().zip(rgba) {
                d.set(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn px(v: u8) -> PremultipliedRgbaColor {
        PremultipliedRgbaColor {
            red: v,
            green: v + 1,
            blue: v + 2,
            alpha: 255,
        }
    }

    /// `frame` blitted at (`left`, `top`) into a `width` x `height` window of `stride`
    /// pixels per row, whose bytes start as 7 (to tell padding left alone).
    fn blitted(
        frame: &Frame,
        (width, height, stride): (usize, usize, usize),
        left: usize,
        top: usize,
    ) -> Vec<u8> {
        let mut bytes = vec![7u8; stride * height * 4];
        let dst = WindowBuffer {
            bytes: &mut bytes,
            width,
            height,
            stride,
        };
        blit(frame, dst, left, top, [1, 2, 3]);
        bytes
    }

    #[test]
    fn the_frame_lands_at_the_content_offset_and_the_rest_is_background() {
        let mut frame = Frame::default();
        assert!(frame.resize(2, 2));
        assert!(!frame.resize(2, 2));
        frame.pixels = vec![px(10), px(20), px(30), px(40)];
        // A 3x4 window with a stride of 5: the frame at (1, 1).
        let got = blitted(&frame, (3, 4, 5), 1, 1);
        let at = |x: usize, y: usize| &got[(y * 5 + x) * 4..(y * 5 + x) * 4 + 4];
        assert_eq!(at(0, 0), [1, 2, 3, 255]);
        assert_eq!(at(1, 1), [10, 11, 12, 255]);
        assert_eq!(at(2, 1), [20, 21, 22, 255]);
        assert_eq!(at(1, 2), [30, 31, 32, 255]);
        assert_eq!(at(2, 2), [40, 41, 42, 255]);
        assert_eq!(at(0, 2), [1, 2, 3, 255]);
        assert_eq!(at(1, 3), [1, 2, 3, 255]);
        // The padding past the shown width is left alone.
        assert_eq!(at(3, 1), [7, 7, 7, 7]);
        assert_eq!(at(4, 3), [7, 7, 7, 7]);
    }

    #[test]
    fn a_frame_larger_than_the_window_is_clipped() {
        let mut frame = Frame::default();
        frame.resize(3, 1);
        frame.pixels = vec![px(10), px(20), px(30)];
        assert_eq!(
            blitted(&frame, (2, 1, 2), 0, 0),
            [10, 11, 12, 255, 20, 21, 22, 255]
        );
    }
}
