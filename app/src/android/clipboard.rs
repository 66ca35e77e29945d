//! The system clipboard (Android's `ClipboardManager`, through JNI), so that Copy reaches other
//! apps and Paste takes what they copied. Compiled, not run here (no device); the platform
//! falls back to a clipboard within the app when a call fails, and says so in logcat.

use android_activity::AndroidApp;
use jni::objects::{JObject, JString, JValue};
use jni::refs::Global;
use jni::{jni_sig, jni_str, Env, JavaVM};

/// The activity's clipboard.
pub struct SystemClipboard {
    app: AndroidApp,
}

impl SystemClipboard {
    pub fn new(app: AndroidApp) -> Self {
        SystemClipboard { app }
    }

    /// Runs `f` with the activity and its `ClipboardManager`.
    fn with_manager<T>(
        &self,
        f: impl FnOnce(&mut Env, &JObject, &JObject) -> jni::errors::Result<T>,
    ) -> Result<T, String> {
        let vm = JavaVM::singleton().map_err(|e| e.to_string())?;
        let raw = self.app.activity_as_ptr() as jni::sys::jobject;
        vm.attach_current_thread(|env| {
            // SAFETY: android-activity holds this global reference to the activity for as long
            // as `self.app` lives (it is borrowed here, never deleted or kept).
            #[allow(unsafe_code)]
            let activity = unsafe { env.as_cast_raw::<Global<JObject>>(&raw)? };
            let name = env.new_string("clipboard")?;
            let manager = env
                .call_method(
                    &*activity,
                    jni_str!("getSystemService"),
                    jni_sig!("(Ljava/lang/String;)Ljava/lang/Object;"),
                    &[JValue::Object(&name)],
                )?
                .l()?;
            f(env, &activity, &manager)
        })
        .map_err(|e: jni::errors::Error| e.to_string())
    }

    /// Puts `text` on the system clipboard.
    pub fn set(&self, text: &str) -> Result<(), String> {
        self.with_manager(|env, _, manager| {
            let (label, text) = (env.new_string("Kostant")?, env.new_string(text)?);
            let clip = env
                .call_static_method(
                    jni_str!("android/content/ClipData"),
                    jni_str!("newPlainText"),
                    jni_sig!(
                        "(Ljava/lang/CharSequence;Ljava/lang/CharSequence;)Landroid/content/ClipData;"
                    ),
                    &[JValue::Object(&label), JValue::Object(&text)],
                )?
                .l()?;
            env.call_method(
                manager,
                jni_str!("setPrimaryClip"),
                jni_sig!("(Landroid/content/ClipData;)V"),
                &[JValue::Object(&clip)],
            )?;
            Ok(())
        })
    }

    /// The system clipboard's text, if it holds any.
    pub fn get(&self) -> Result<Option<String>, String> {
        self.with_manager(|env, activity, manager| {
            let clip = env
                .call_method(
                    manager,
                    jni_str!("getPrimaryClip"),
                    jni_sig!("()Landroid/content/ClipData;"),
                    &[],
                )?
                .l()?;
            if clip.is_null() {
                return Ok(None);
            }
            let count = env
                .call_method(&clip, jni_str!("getItemCount"), jni_sig!("()I"), &[])?
                .i()?;
            if count < 1 {
                return Ok(None);
            }
            let item = env
                .call_method(
                    &clip,
                    jni_str!("getItemAt"),
                    jni_sig!("(I)Landroid/content/ClipData$Item;"),
                    &[JValue::Int(0)],
                )?
                .l()?;
            let text = env
                .call_method(
                    &item,
                    jni_str!("coerceToText"),
                    jni_sig!("(Landroid/content/Context;)Ljava/lang/CharSequence;"),
                    &[JValue::Object(activity)],
                )?
                .l()?;
            if text.is_null() {
                return Ok(None);
            }
            let text = env
                .call_method(
                    &text,
                    jni_str!("toString"),
                    jni_sig!("()Ljava/lang/String;"),
                    &[],
                )?
                .l()?;
            let text = env.cast_local::<JString>(text)?;
            let text: String = text.mutf8_chars(env)?.into();
            Ok(Some(text))
        })
    }
}
