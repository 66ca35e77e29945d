//! Slint on a NativeActivity without Skia or Java: one window (the activity's), drawn by the
//! software renderer and copied into the native window's buffers (`framebuffer.rs`); input read
//! from android-activity's queue and mapped by `events.rs`; an event loop over
//! `AndroidApp::poll_events` that also runs Slint's timers and what worker threads post with
//! `slint::invoke_from_event_loop` (a reply's tokens).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use android_activity::input::{InputEvent, KeyAction, KeyMapChar, MetaState, MotionAction};
use android_activity::{AndroidApp, InputStatus, MainEvent, PollEvent};
use ndk::hardware_buffer_format::HardwareBufferFormat;
use ndk::native_window::NativeWindow;
use slint::platform::software_renderer::{MinimalSoftwareWindow, RepaintBufferType};
use slint::platform::{EventLoopProxy, Platform, PlatformError, WindowAdapter, WindowEvent};
use slint::EventLoopError;

use crate::controllers::lifecycle::Lifecycle;

use super::clipboard::SystemClipboard;
use super::events::{meta_for_char, KeyChar, KeyMapper, Touch, TouchPhase, TouchTracker, Viewport};
use super::framebuffer::{blit, Frame, WindowBuffer};
use super::log;

type Job = Box<dyn FnOnce() + Send>;
type LifecycleHandler = Box<dyn Fn(Lifecycle) -> Option<Vec<u8>>>;

/// What worker threads hand to the UI thread, and the flag that ends the loop.
#[derive(Default)]
struct Mailbox {
    jobs: VecDeque<Job>,
    quit: bool,
}

pub struct AndroidPlatform {
    app: AndroidApp,
    window: Rc<MinimalSoftwareWindow>,
    mailbox: Arc<Mutex<Mailbox>>,
    start: Instant,
    /// The last copy, for when the system clipboard fails.
    clipboard: RefCell<String>,
    system_clipboard: SystemClipboard,
    /// Asked after input: whether a text field has focus (the soft keyboard follows it).
    wants_keyboard: RefCell<Option<Box<dyn Fn() -> bool>>>,
    /// Told of the app's life (`controllers::lifecycle`); returns the bytes to keep on SaveState.
    on_lifecycle: RefCell<Option<LifecycleHandler>>,
    /// Given the state kept from the process before, once, at the first resume.
    on_restore: RefCell<Option<Box<dyn Fn(&[u8])>>>,
    /// The background colour around the app (under the system bars).
    background: Cell<[u8; 3]>,
}

impl AndroidPlatform {
    pub fn new(app: AndroidApp) -> Rc<Self> {
        Rc::new(AndroidPlatform {
            system_clipboard: SystemClipboard::new(app.clone()),
            app,
            window: MinimalSoftwareWindow::new(RepaintBufferType::ReusedBuffer),
            mailbox: Arc::default(),
            start: Instant::now(),
            clipboard: RefCell::default(),
            wants_keyboard: RefCell::default(),
            on_lifecycle: RefCell::default(),
            on_restore: RefCell::default(),
            background: Cell::new([255, 255, 255]),
        })
    }

    pub fn set_keyboard_probe(&self, probe: impl Fn() -> bool + 'static) {
        *self.wants_keyboard.borrow_mut() = Some(Box::new(probe));
    }

    pub fn set_lifecycle_handler(&self, f: impl Fn(Lifecycle) -> Option<Vec<u8>> + 'static) {
        *self.on_lifecycle.borrow_mut() = Some(Box::new(f));
    }

    pub fn set_restore_handler(&self, f: impl Fn(&[u8]) + 'static) {
        *self.on_restore.borrow_mut() = Some(Box::new(f));
    }

    fn lifecycle(&self, event: Lifecycle) -> Option<Vec<u8>> {
        self.on_lifecycle.borrow().as_ref().and_then(|f| f(event))
    }

    pub fn set_background(&self, rgb: [u8; 3]) {
        self.background.set(rgb);
    }
}

/// Slint's `set_platform` takes a Box; the activity keeps an Rc to set its hooks.
pub struct SharedPlatform(pub Rc<AndroidPlatform>);

impl Platform for SharedPlatform {
    fn create_window_adapter(&self) -> Result<Rc<dyn WindowAdapter>, PlatformError> {
        Ok(self.0.window.clone())
    }

    fn duration_since_start(&self) -> Duration {
        self.0.start.elapsed()
    }

    fn new_event_loop_proxy(&self) -> Option<Box<dyn EventLoopProxy>> {
        Some(Box::new(Proxy {
            mailbox: self.0.mailbox.clone(),
            waker: self.0.app.create_waker(),
        }))
    }

    // The system clipboard through JNI; if a call fails, a clipboard within the app (copy and
    // paste between its own fields) so that Copy never does nothing.
    fn set_clipboard_text(&self, text: &str, clipboard: slint::platform::Clipboard) {
        if clipboard != slint::platform::Clipboard::DefaultClipboard {
            return;
        }
        *self.0.clipboard.borrow_mut() = text.to_string();
        if let Err(e) = self.0.system_clipboard.set(text) {
            log::error(&format!(
                "the system clipboard refused the copy ({e}); kept in the app"
            ));
        }
    }

    fn clipboard_text(&self, clipboard: slint::platform::Clipboard) -> Option<String> {
        if clipboard != slint::platform::Clipboard::DefaultClipboard {
            return None;
        }
        match self.0.system_clipboard.get() {
            Ok(text) => text,
            Err(e) => {
                log::error(&format!(
                    "the system clipboard could not be read ({e}); the app's own copy is used"
                ));
                Some(self.0.clipboard.borrow().clone())
            }
        }
        .filter(|t| !t.is_empty())
    }

    fn run_event_loop(&self) -> Result<(), PlatformError> {
        EventLoop::new(&self.0).run()
    }
}

struct Proxy {
    mailbox: Arc<Mutex<Mailbox>>,
    waker: android_activity::AndroidAppWaker,
}

impl EventLoopProxy for Proxy {
    fn quit_event_loop(&self) -> Result<(), EventLoopError> {
        self.mailbox
            .lock()
            .map_err(|_| EventLoopError::EventLoopTerminated)?
            .quit = true;
        self.waker.wake();
        Ok(())
    }

    fn invoke_from_event_loop(&self, job: Job) -> Result<(), EventLoopError> {
        self.mailbox
            .lock()
            .map_err(|_| EventLoopError::EventLoopTerminated)?
            .jobs
            .push_back(job);
        self.waker.wake();
        Ok(())
    }
}

struct EventLoop<'a> {
    p: &'a AndroidPlatform,
    native: Option<NativeWindow>,
    viewport: Option<Viewport>,
    frame: Frame,
    touch: TouchTracker,
    keys: KeyMapper,
    keyboard_shown: bool,
    /// The window's buffer lacks the frame (a new window, a resize, Android asked to redraw).
    needs_copy: bool,
    /// What the last SaveState kept (Android copies it; the saver borrows it meanwhile).
    saved: Vec<u8>,
    /// Whether the state of the process before has been offered (once, at the first resume).
    restored: bool,
    destroyed: bool,
}

impl<'a> EventLoop<'a> {
    fn new(p: &'a AndroidPlatform) -> Self {
        EventLoop {
            p,
            native: None,
            viewport: None,
            frame: Frame::default(),
            touch: TouchTracker::new(),
            keys: KeyMapper::new(),
            keyboard_shown: false,
            needs_copy: false,
            saved: Vec::new(),
            restored: false,
            destroyed: false,
        }
    }

    fn run(mut self) -> Result<(), PlatformError> {
        loop {
            slint::platform::update_timers_and_animations();
            let timeout = if self.p.window.window().has_active_animations() {
                Some(Duration::from_millis(16))
            } else {
                slint::platform::duration_until_next_timer_update()
            };
            let app = self.p.app.clone();
            let mut input = false;
            app.poll_events(timeout, |event| {
                if let PollEvent::Main(main) = event {
                    input |= self.main_event(main);
                }
            });
            if input {
                self.read_input();
            }
            let (jobs, quit) = {
                let mut mb = self.p.mailbox.lock().map_err(|_| {
                    PlatformError::Other("a worker thread panicked holding the UI's queue".into())
                })?;
                (std::mem::take(&mut mb.jobs), mb.quit)
            };
            for job in jobs {
                job();
            }
            if quit || self.destroyed {
                return Ok(());
            }
            self.sync_keyboard();
            self.draw();
        }
    }

    /// Handles one lifecycle or window event; returns whether input is waiting.
    fn main_event<'s>(&'s mut self, event: MainEvent<'s>) -> bool {
        match event {
            MainEvent::InputAvailable => return true,
            MainEvent::InitWindow { .. } => {
                self.native = self.p.app.native_window();
                if let Some(w) = &self.native {
                    // Our pixels are R, G, B, A bytes; the window's size stays the screen's.
                    let _ =
                        w.set_buffers_geometry(0, 0, Some(HardwareBufferFormat::R8G8B8A8_UNORM));
                }
                self.needs_copy = true;
                self.layout();
            }
            MainEvent::TerminateWindow { .. } => self.native = None,
            MainEvent::WindowResized { .. }
            | MainEvent::ContentRectChanged { .. }
            | MainEvent::ConfigChanged { .. }
            | MainEvent::InsetsChanged { .. } => self.layout(),
            MainEvent::RedrawNeeded { .. } => {
                self.needs_copy = true;
                self.draw();
            }
            // In the background the loop goes on: a reply in flight keeps streaming into the
            // chat and is saved, with its context snapshot, when it ends, as every reply is.
            MainEvent::Pause => {
                self.p.lifecycle(Lifecycle::Pause);
            }
            MainEvent::Stop => {
                self.p.lifecycle(Lifecycle::Stop);
            }
            MainEvent::SaveState { saver, .. } => {
                if let Some(bytes) = self.p.lifecycle(Lifecycle::SaveState) {
                    self.saved = bytes;
                    saver.store(&self.saved);
                }
            }
            MainEvent::Resume { loader, .. } => {
                if !self.restored {
                    self.restored = true;
                    if let (Some(bytes), Some(f)) =
                        (loader.load(), self.p.on_restore.borrow().as_ref())
                    {
                        f(&bytes);
                    }
                }
                self.p.lifecycle(Lifecycle::Resume);
            }
            MainEvent::Destroy => {
                self.p.lifecycle(Lifecycle::Destroy);
                self.destroyed = true;
            }
            _ => {}
        }
        false
    }

    /// Sizes the app to the window's content rectangle at the screen's density.
    fn layout(&mut self) {
        let Some(w) = &self.native else { return };
        let r = self.p.app.content_rect();
        let v = Viewport::new(
            (w.width(), w.height()),
            (r.left, r.top, r.right, r.bottom),
            self.p.app.config().density(),
        );
        if self.viewport == Some(v) {
            return;
        }
        let window = self.p.window.window();
        if self.viewport.map(|o| o.scale) != Some(v.scale) {
            window.dispatch_event(WindowEvent::ScaleFactorChanged {
                scale_factor: v.scale,
            });
        }
        self.viewport = Some(v);
        self.needs_copy = true;
        self.p
            .window
            .set_size(slint::PhysicalSize::new(v.width, v.height));
        window.dispatch_event(WindowEvent::Resized {
            size: v.logical_size(),
        });
        self.p.window.request_redraw();
    }

    fn read_input(&mut self) {
        let Ok(mut iter) = self.p.app.input_events_iter() else {
            return;
        };
        let window = self.p.window.clone();
        let viewport = self.viewport;
        loop {
            let mut events = Vec::new();
            let more = iter.next(|event| {
                let status;
                (events, status) = match event {
                    InputEvent::MotionEvent(m) => {
                        let Some(v) = viewport else {
                            return InputStatus::Unhandled;
                        };
                        let phase = match m.action() {
                            MotionAction::Down => TouchPhase::Down,
                            MotionAction::PointerDown => TouchPhase::PointerDown,
                            MotionAction::Move => TouchPhase::Move,
                            MotionAction::PointerUp => TouchPhase::PointerUp,
                            MotionAction::Up => TouchPhase::Up,
                            MotionAction::Cancel => TouchPhase::Cancel,
                            _ => TouchPhase::Other,
                        };
                        // The action's finger (its index is meaningful for downs and ups).
                        let index = m.pointer_index();
                        let action_pointer = if index < m.pointer_count() {
                            m.pointer_at_index(index).pointer_id()
                        } else {
                            -1
                        };
                        let touch = Touch {
                            phase,
                            action_pointer,
                            pointers: m
                                .pointers()
                                .map(|p| (p.pointer_id(), p.x(), p.y()))
                                .collect(),
                        };
                        (self.touch.events(&touch, &v), InputStatus::Handled)
                    }
                    InputEvent::KeyEvent(k) => {
                        let down = match k.action() {
                            KeyAction::Down => true,
                            KeyAction::Up => false,
                            _ => return InputStatus::Unhandled,
                        };
                        let code: u32 = k.key_code().into();
                        let meta = MetaState(meta_for_char(k.meta_state().0));
                        let ch = match self
                            .p
                            .app
                            .device_key_character_map(k.device_id())
                            .and_then(|map| map.get(k.key_code(), meta))
                        {
                            Ok(KeyMapChar::Unicode(c)) => KeyChar::Unicode(c),
                            Ok(KeyMapChar::CombiningAccent(c)) => KeyChar::CombiningAccent(c),
                            _ => KeyChar::None,
                        };
                        match self.keys.event(code as i32, down, k.repeat_count() > 0, ch) {
                            Some(e) => (vec![e], InputStatus::Handled),
                            None => (Vec::new(), InputStatus::Unhandled),
                        }
                    }
                    _ => (Vec::new(), InputStatus::Unhandled),
                };
                status
            });
            for e in events {
                window.window().dispatch_event(e);
            }
            if !more {
                break;
            }
        }
    }

    /// Shows the soft keyboard while a text field has focus, and hides it after.
    fn sync_keyboard(&mut self) {
        let wanted = self.p.wants_keyboard.borrow().as_ref().is_some_and(|f| f());
        if wanted != self.keyboard_shown {
            if wanted {
                // Shown as asked for (not "implicitly"): the user tapped a field.
                self.p.app.show_soft_input(false);
            } else {
                self.p.app.hide_soft_input(false);
            }
            self.keyboard_shown = wanted;
        }
    }

    /// Renders what changed into the frame, and copies the frame into the window when it was
    /// rendered or the window needs it whole (a new window, a resize, a redraw request).
    fn draw(&mut self) {
        let (Some(native), Some(v)) = (&self.native, self.viewport) else {
            return;
        };
        let frame = &mut self.frame;
        let rendered = self.p.window.draw_if_needed(|renderer| {
            if frame.resize(v.width as usize, v.height as usize) {
                // A new buffer: forget what the renderer thinks it holds.
                renderer.set_repaint_buffer_type(RepaintBufferType::NewBuffer);
                renderer.set_repaint_buffer_type(RepaintBufferType::ReusedBuffer);
            }
            renderer.render(&mut frame.pixels, frame.width);
        });
        if !(rendered || self.needs_copy) || frame.pixels.is_empty() {
            return;
        }
        let Ok(mut locked) = native.lock(None) else {
            return;
        };
        if locked.format().bytes_per_pixel() != Some(4) {
            return;
        }
        let (width, height, stride) = (locked.width(), locked.height(), locked.stride());
        if let Some(bytes) = locked.bytes() {
            let dst = WindowBuffer {
                bytes,
                width,
                height,
                stride,
            };
            let (left, top) = (v.left.max(0) as usize, v.top.max(0) as usize);
            blit(frame, dst, left, top, self.p.background.get());
            self.needs_copy = false;
        }
        // The lock guard posts the buffer when dropped.
    }
}
