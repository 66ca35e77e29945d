//! Android shows a process's stderr nowhere: the app's own errors go to logcat through liblog
//! (`adb logcat -s kostant`).

use std::ffi::CString;

/// Writes `msg` to logcat at error priority, tagged `kostant`.
pub fn error(msg: &str) {
    #[link(name = "log")]
    extern "C" {
        fn __android_log_write(
            prio: i32,
            tag: *const std::ffi::c_char,
            text: *const std::ffi::c_char,
        ) -> i32;
    }
    const ANDROID_LOG_ERROR: i32 = 6;
    let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: both pointers are NUL-terminated strings that outlive the call.
    #[allow(unsafe_code)]
    unsafe {
        __android_log_write(ANDROID_LOG_ERROR, c"kostant".as_ptr(), text.as_ptr());
    }
}
