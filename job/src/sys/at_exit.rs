//! A function run when the process exits normally (`exit`, a return from
//! `main`, Fortran's `stop`), through the C library: glibc's `on_exit`,
//! which passes the exit status, elsewhere `atexit`, which does not.

/// Runs `f` once when the process exits normally, with the exit status
/// (`None` where the C library does not tell it); the first `f` given:
/// later calls register nothing. Not run when the process is killed or
/// aborts. Whether the C library took it (it may refuse when out of
/// memory).
pub(crate) fn run_at_exit(f: fn(Option<i32>)) -> bool {
    static HOOK: std::sync::OnceLock<fn(Option<i32>)> = std::sync::OnceLock::new();
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    fn call(status: Option<i32>) {
        // No unwinding may cross into the C library's exit.
        let _ = std::panic::catch_unwind(|| {
            if let Some(f) = HOOK.get() {
                f(status);
            }
        });
    }
    let _ = HOOK.set(f);
    *REGISTERED.get_or_init(register(call))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn register(call: fn(Option<i32>)) -> impl FnOnce() -> bool {
    use std::ffi::{c_int, c_void};
    extern "C" {
        /// glibc: `int on_exit(void (*)(int, void *), void *)`.
        fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
    }
    static CALL: std::sync::OnceLock<fn(Option<i32>)> = std::sync::OnceLock::new();
    extern "C" fn at_exit(status: c_int, _: *mut c_void) {
        if let Some(call) = CALL.get() {
            call(Some(status));
        }
    }
    move || {
        let _ = CALL.set(call);
        // SAFETY: `at_exit` has the signature `on_exit` requires and never
        // unwinds (`call` catches every panic); its argument is unused.
        unsafe { on_exit(at_exit, std::ptr::null_mut()) == 0 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn register(call: fn(Option<i32>)) -> impl FnOnce() -> bool {
    static CALL: std::sync::OnceLock<fn(Option<i32>)> = std::sync::OnceLock::new();
    extern "C" fn at_exit() {
        if let Some(call) = CALL.get() {
            call(None);
        }
    }
    move || {
        let _ = CALL.set(call);
        // SAFETY: `at_exit` is a plain `extern "C" fn()` that never
        // unwinds (`call` catches every panic), as `atexit` requires.
        unsafe { libc::atexit(at_exit) == 0 }
    }
}
