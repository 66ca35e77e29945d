//! Android input, as Slint window events. Plain data in, `WindowEvent`s out, so the mapping is
//! tested on the desktop with synthetic events (nothing here can run on a device in CI); the
//! activity (`activity.rs`) only reads the NDK's events into these types.
//!
//! What a NativeActivity delivers and what becomes of it:
//! - Touch: the first finger down is the pointer (press, moves, release); other fingers are
//!   ignored until it lifts, since the app's screens have no multi-touch gesture. Slint's
//!   Flickable turns a drag into scrolling, so lists scroll by touch.
//! - Keys: hardware keyboards, and soft keyboards as far as they send key events (Android's
//!   NativeActivity has no text-input connection, so an IME's composed text, predictions, swipe
//!   and voice typing never arrive; typed characters, Backspace and Enter do). A character is
//!   what the device's key character map gives for the key and meta state; a dead key (accent)
//!   is composed with the next character.
//! - Back is left to the system (it closes or backgrounds the activity).

use slint::platform::{Key, PointerEventButton, WindowEvent};
use slint::{LogicalPosition, LogicalSize, SharedString};

/// Android's key codes (AKEYCODE_*) that are not characters.
pub mod keycode {
    pub const BACK: i32 = 4;
    pub const DPAD_UP: i32 = 19;
    pub const DPAD_DOWN: i32 = 20;
    pub const DPAD_LEFT: i32 = 21;
    pub const DPAD_RIGHT: i32 = 22;
    pub const ALT_LEFT: i32 = 57;
    pub const ALT_RIGHT: i32 = 58;
    pub const SHIFT_LEFT: i32 = 59;
    pub const SHIFT_RIGHT: i32 = 60;
    pub const TAB: i32 = 61;
    pub const ENTER: i32 = 66;
    pub const DEL: i32 = 67;
    pub const PAGE_UP: i32 = 92;
    pub const PAGE_DOWN: i32 = 93;
    pub const ESCAPE: i32 = 111;
    pub const FORWARD_DEL: i32 = 112;
    pub const CTRL_LEFT: i32 = 113;
    pub const CTRL_RIGHT: i32 = 114;
    pub const MOVE_HOME: i32 = 122;
    pub const MOVE_END: i32 = 123;
    pub const NUMPAD_ENTER: i32 = 160;
}

/// Android's DENSITY_DEFAULT: the dots per inch at which one density-independent pixel is one
/// physical pixel.
const DENSITY_DEFAULT: f32 = 160.0;

/// Where the app draws inside the native window, in physical pixels (the window's content
/// rectangle: the part not under the status bar, navigation bar or soft keyboard), and how many
/// physical pixels make one logical pixel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Viewport {
    pub left: i32,
    pub top: i32,
    pub width: u32,
    pub height: u32,
    pub scale: f32,
}

impl Viewport {
    /// From the window's size, its content rectangle (left, top, right, bottom) and the
    /// screen's density in dpi. A content rectangle that is empty (not reported yet) or outside
    /// the window means the whole window; an unknown density means Android's default.
    pub fn new(
        window: (i32, i32),
        content: (i32, i32, i32, i32),
        density_dpi: Option<u32>,
    ) -> Self {
        let (w, h) = (window.0.max(0), window.1.max(0));
        let (l, t) = (content.0.clamp(0, w), content.1.clamp(0, h));
        let (r, b) = (content.2.clamp(0, w), content.3.clamp(0, h));
        let (left, top, right, bottom) = if r > l && b > t {
            (l, t, r, b)
        } else {
            (0, 0, w, h)
        };
        let scale = density_dpi
            .filter(|&d| d > 0)
            .map_or(1.0, |d| d as f32 / DENSITY_DEFAULT)
            .clamp(0.5, 8.0);
        Viewport {
            left,
            top,
            width: (right - left) as u32,
            height: (bottom - top) as u32,
            scale,
        }
    }

    /// A point of the native window (physical pixels) in the app's logical coordinates.
    pub fn logical(&self, x: f32, y: f32) -> LogicalPosition {
        LogicalPosition::new(
            (x - self.left as f32) / self.scale,
            (y - self.top as f32) / self.scale,
        )
    }

    /// The app's size in logical pixels.
    pub fn logical_size(&self) -> LogicalSize {
        LogicalSize::new(
            self.width as f32 / self.scale,
            self.height as f32 / self.scale,
        )
    }
}

/// A motion event's action, as far as touch needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchPhase {
    /// The first finger touched (ACTION_DOWN).
    Down,
    /// Another finger touched (ACTION_POINTER_DOWN).
    PointerDown,
    /// Fingers moved (ACTION_MOVE).
    Move,
    /// A finger lifted while others stay (ACTION_POINTER_UP).
    PointerUp,
    /// The last finger lifted (ACTION_UP).
    Up,
    /// The system took the gesture (ACTION_CANCEL).
    Cancel,
    /// Hover, scroll wheels, buttons: not touch.
    Other,
}

/// One motion event: its phase, the id of the finger the action is about, and where each
/// finger is (id, x, y in the native window's physical pixels).
#[derive(Clone, Debug, PartialEq)]
pub struct Touch {
    pub phase: TouchPhase,
    pub action_pointer: i32,
    pub pointers: Vec<(i32, f32, f32)>,
}

/// Follows one finger from down to up.
#[derive(Debug, Default)]
pub struct TouchTracker {
    finger: Option<i32>,
}

impl TouchTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The window events of one motion event (none for fingers other than the tracked one).
    pub fn events(&mut self, touch: &Touch, viewport: &Viewport) -> Vec<WindowEvent> {
        let at = |id: i32| {
            touch
                .pointers
                .iter()
                .find(|p| p.0 == id)
                .map(|&(_, x, y)| viewport.logical(x, y))
        };
        let button = PointerEventButton::Left;
        match touch.phase {
            TouchPhase::Down | TouchPhase::PointerDown if self.finger.is_none() => {
                let Some(position) = at(touch.action_pointer) else {
                    return Vec::new();
                };
                self.finger = Some(touch.action_pointer);
                vec![
                    WindowEvent::PointerMoved { position },
                    WindowEvent::PointerPressed { position, button },
                ]
            }
            TouchPhase::Move => match self.finger.and_then(at) {
                Some(position) => vec![WindowEvent::PointerMoved { position }],
                None => Vec::new(),
            },
            TouchPhase::PointerUp | TouchPhase::Up if self.finger == Some(touch.action_pointer) => {
                self.finger = None;
                match at(touch.action_pointer) {
                    // A finger that lifts leaves no hover behind.
                    Some(position) => vec![
                        WindowEvent::PointerReleased { position, button },
                        WindowEvent::PointerExited,
                    ],
                    None => vec![WindowEvent::PointerExited],
                }
            }
            // A lifted last finger ends whatever was tracked, whichever id it had.
            TouchPhase::Up | TouchPhase::Cancel if self.finger.is_some() => {
                self.finger = None;
                vec![WindowEvent::PointerExited]
            }
            _ => Vec::new(),
        }
    }
}

/// What the device's key character map gives for a key (KeyCharacterMap.get).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyChar {
    None,
    Unicode(char),
    /// A dead key: this combining accent goes on the next character.
    CombiningAccent(char),
}

/// Android's meta-state bits for Control (META_CTRL_ON | META_CTRL_LEFT_ON | META_CTRL_RIGHT_ON).
const META_CTRL_MASK: u32 = 0x1000 | 0x2000 | 0x4000;

/// The meta state to look a key's character up with: Control masked off, since the character
/// map gives no character under Control and Slint wants Ctrl+C as Control then "c".
pub fn meta_for_char(meta_state: u32) -> u32 {
    meta_state & !META_CTRL_MASK
}

/// Turns key events into Slint's key events, composing dead keys.
#[derive(Debug, Default)]
pub struct KeyMapper {
    accent: Option<char>,
}

impl KeyMapper {
    pub fn new() -> Self {
        Self::default()
    }

    /// The window event for a key going down (`down`) or up, or `None` for keys left to the
    /// system (Back) and keys that carry nothing (a dead key waits for the next character).
    pub fn event(
        &mut self,
        code: i32,
        down: bool,
        repeat: bool,
        ch: KeyChar,
    ) -> Option<WindowEvent> {
        let text: SharedString = match named_key(code) {
            Some(key) => key.into(),
            None if code == keycode::BACK => return None,
            None => match ch {
                KeyChar::None => return None,
                KeyChar::CombiningAccent(accent) => {
                    if down {
                        self.accent = Some(accent);
                    }
                    return None;
                }
                KeyChar::Unicode(c) if down => match self.accent.take() {
                    Some(accent) => compose(c, accent),
                    None => c.into(),
                },
                KeyChar::Unicode(c) => c.into(),
            },
        };
        Some(match (down, repeat) {
            (true, false) => WindowEvent::KeyPressed { text },
            (true, true) => WindowEvent::KeyPressRepeated { text },
            (false, _) => WindowEvent::KeyReleased { text },
        })
    }
}

/// A base character with a combining accent: the precomposed character when Unicode has one
/// (e + ◌́ = é), else both.
fn compose(base: char, accent: char) -> SharedString {
    match unicode_normalization::char::compose(base, accent) {
        Some(c) => c.into(),
        None => format!("{base}{accent}").into(),
    }
}

/// Slint's key for the Android keys that are not characters.
fn named_key(code: i32) -> Option<Key> {
    use keycode::*;
    Some(match code {
        DEL => Key::Backspace,
        FORWARD_DEL => Key::Delete,
        ENTER | NUMPAD_ENTER => Key::Return,
        TAB => Key::Tab,
        ESCAPE => Key::Escape,
        DPAD_LEFT => Key::LeftArrow,
        DPAD_RIGHT => Key::RightArrow,
        DPAD_UP => Key::UpArrow,
        DPAD_DOWN => Key::DownArrow,
        MOVE_HOME => Key::Home,
        MOVE_END => Key::End,
        PAGE_UP => Key::PageUp,
        PAGE_DOWN => Key::PageDown,
        SHIFT_LEFT | SHIFT_RIGHT => Key::Shift,
        CTRL_LEFT | CTRL_RIGHT => Key::Control,
        ALT_LEFT | ALT_RIGHT => Key::Alt,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phone() -> Viewport {
        // A 1080x2400 screen at 420 dpi with a 63 px status bar and a 126 px navigation bar.
        Viewport::new((1080, 2400), (0, 63, 1080, 2274), Some(420))
    }

    fn touch(phase: TouchPhase, id: i32, pointers: &[(i32, f32, f32)]) -> Touch {
        Touch {
            phase,
            action_pointer: id,
            pointers: pointers.to_vec(),
        }
    }

    fn pos(e: &WindowEvent) -> (f32, f32) {
        let p = e.position().expect("a pointer event");
        (p.x, p.y)
    }

    #[test]
    fn the_viewport_is_the_content_rectangle_in_density_independent_pixels() {
        let v = phone();
        assert_eq!((v.left, v.top, v.width, v.height), (0, 63, 1080, 2211));
        assert!((v.scale - 2.625).abs() < 1e-6);
        let s = v.logical_size();
        assert!((s.width - 1080.0 / 2.625).abs() < 1e-3);
        assert!((s.height - 2211.0 / 2.625).abs() < 1e-3);
        // The top-left of the content is the app's origin.
        let p = v.logical(0.0, 63.0);
        assert_eq!((p.x, p.y), (0.0, 0.0));
    }

    #[test]
    fn an_unreported_content_rectangle_or_density_means_the_whole_window_at_scale_one() {
        let v = Viewport::new((720, 1280), (0, 0, 0, 0), None);
        assert_eq!((v.left, v.top, v.width, v.height), (0, 0, 720, 1280));
        assert_eq!(v.scale, 1.0);
        // Out of the window: clamped, and empty means the whole window again.
        let v = Viewport::new((720, 1280), (800, 10, 900, 20), Some(0));
        assert_eq!((v.width, v.height, v.scale), (720, 1280, 1.0));
        // The soft keyboard shrinks the content: the bottom moves up.
        let v = Viewport::new((720, 1280), (0, 40, 720, 700), Some(320));
        assert_eq!((v.top, v.height, v.scale), (40, 660, 2.0));
    }

    #[test]
    fn a_tap_is_a_press_and_release_where_the_finger_was() {
        let v = phone();
        let mut t = TouchTracker::new();
        let down = t.events(&touch(TouchPhase::Down, 0, &[(0, 525.0, 588.0)]), &v);
        assert_eq!(down.len(), 2);
        assert!(matches!(down[0], WindowEvent::PointerMoved { .. }));
        assert!(matches!(
            down[1],
            WindowEvent::PointerPressed {
                button: PointerEventButton::Left,
                ..
            }
        ));
        assert_eq!(pos(&down[1]), (200.0, 200.0));
        let up = t.events(&touch(TouchPhase::Up, 0, &[(0, 525.0, 588.0)]), &v);
        assert!(matches!(up[0], WindowEvent::PointerReleased { .. }));
        assert_eq!(pos(&up[0]), (200.0, 200.0));
        assert_eq!(up[1], WindowEvent::PointerExited);
    }

    #[test]
    fn a_drag_moves_the_pointer_and_a_second_finger_is_ignored() {
        let v = Viewport::new((400, 800), (0, 0, 400, 800), Some(160));
        let mut t = TouchTracker::new();
        t.events(&touch(TouchPhase::Down, 3, &[(3, 10.0, 500.0)]), &v);
        let second = t.events(
            &touch(
                TouchPhase::PointerDown,
                7,
                &[(3, 10.0, 480.0), (7, 300.0, 300.0)],
            ),
            &v,
        );
        assert!(second.is_empty());
        // The tracked finger's position is read by id, whatever its index.
        let moved = t.events(
            &touch(TouchPhase::Move, 3, &[(7, 300.0, 310.0), (3, 10.0, 400.0)]),
            &v,
        );
        assert_eq!(moved.len(), 1);
        assert_eq!(pos(&moved[0]), (10.0, 400.0));
        // The other finger lifting releases nothing; ours lifting does.
        assert!(t
            .events(
                &touch(
                    TouchPhase::PointerUp,
                    7,
                    &[(3, 10.0, 400.0), (7, 300.0, 310.0)]
                ),
                &v
            )
            .is_empty());
        let up = t.events(&touch(TouchPhase::Up, 3, &[(3, 10.0, 390.0)]), &v);
        assert!(matches!(up[0], WindowEvent::PointerReleased { .. }));
        // Moves after the lift go nowhere.
        assert!(t
            .events(&touch(TouchPhase::Move, 3, &[(3, 1.0, 1.0)]), &v)
            .is_empty());
    }

    #[test]
    fn a_cancelled_gesture_clicks_nothing() {
        let v = phone();
        let mut t = TouchTracker::new();
        t.events(&touch(TouchPhase::Down, 0, &[(0, 100.0, 500.0)]), &v);
        let cancel = t.events(&touch(TouchPhase::Cancel, 0, &[(0, 100.0, 500.0)]), &v);
        assert_eq!(cancel, vec![WindowEvent::PointerExited]);
        // Hover and the like are not touch.
        assert!(t
            .events(&touch(TouchPhase::Other, 0, &[(0, 1.0, 1.0)]), &v)
            .is_empty());
    }

    #[test]
    fn keys_become_slint_text_and_back_is_the_systems() {
        let mut k = KeyMapper::new();
        let typed = k.event(29, true, false, KeyChar::Unicode('a'));
        assert_eq!(typed, Some(WindowEvent::KeyPressed { text: "a".into() }));
        let released = k.event(29, false, false, KeyChar::Unicode('a'));
        assert_eq!(
            released,
            Some(WindowEvent::KeyReleased { text: "a".into() })
        );
        let held = k.event(keycode::DEL, true, true, KeyChar::None);
        assert_eq!(
            held,
            Some(WindowEvent::KeyPressRepeated {
                text: Key::Backspace.into()
            })
        );
        // Enter is Return whatever the map says about it.
        assert_eq!(
            k.event(keycode::ENTER, true, false, KeyChar::Unicode('\n')),
            Some(WindowEvent::KeyPressed {
                text: Key::Return.into()
            })
        );
        assert_eq!(k.event(keycode::BACK, true, false, KeyChar::None), None);
        // A key with no character and no name (volume, camera) carries nothing.
        assert_eq!(k.event(24, true, false, KeyChar::None), None);
    }

    #[test]
    fn a_dead_key_accents_the_next_character() {
        let mut k = KeyMapper::new();
        assert_eq!(
            k.event(33, true, false, KeyChar::CombiningAccent('\u{301}')),
            None
        );
        assert_eq!(
            k.event(33, false, false, KeyChar::CombiningAccent('\u{301}')),
            None
        );
        assert_eq!(
            k.event(33, true, false, KeyChar::Unicode('e')),
            Some(WindowEvent::KeyPressed { text: "é".into() })
        );
        // Used once: the next e is plain.
        assert_eq!(
            k.event(33, true, false, KeyChar::Unicode('e')),
            Some(WindowEvent::KeyPressed { text: "e".into() })
        );
        // No precomposed form: both characters.
        k.event(33, true, false, KeyChar::CombiningAccent('\u{301}'));
        assert_eq!(
            k.event(52, true, false, KeyChar::Unicode('x')),
            Some(WindowEvent::KeyPressed {
                text: "x\u{301}".into()
            })
        );
    }

    #[test]
    fn control_is_masked_off_when_looking_up_a_character() {
        // META_SHIFT_ON (1) | META_CTRL_ON | META_CTRL_LEFT_ON
        assert_eq!(meta_for_char(0x1 | 0x1000 | 0x2000), 0x1);
        assert_eq!(meta_for_char(0x1), 0x1);
        let mut k = KeyMapper::new();
        assert_eq!(
            k.event(keycode::CTRL_LEFT, true, false, KeyChar::None),
            Some(WindowEvent::KeyPressed {
                text: Key::Control.into()
            })
        );
    }
}
