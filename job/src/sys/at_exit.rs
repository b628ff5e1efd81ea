//! A function run when the process exits normally (`exit`, a return from
//! `main`, Fortran's `stop`), through the C library: glibc's `on_exit`,
//! which passes the exit status, elsewhere `atexit`, which does not.

use std::sync::OnceLock;

/// The function to run at exit.
static HOOK: OnceLock<fn(Option<i32>)> = OnceLock::new();

/// Runs `f` once when the process exits normally, with the exit status
/// (`None` where the C library does not tell it); the first `f` given:
/// later calls register nothing. Not run when the process is killed or
/// aborts. Whether the C library took it (it may refuse when out of
/// memory).
pub(crate) fn run_at_exit(f: fn(Option<i32>)) -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let _ = HOOK.set(f);
    *REGISTERED.get_or_init(register)
}

/// Runs the hook; no unwinding may cross into the C library's exit.
fn call(status: Option<i32>) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(f) = HOOK.get() {
            f(status);
        }
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn register() -> bool {
    use std::ffi::{c_int, c_void};
    extern "C" {
        /// glibc: `int on_exit(void (*)(int, void *), void *)`.
        fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
    }
    extern "C" fn at_exit(status: c_int, _: *mut c_void) {
        call(Some(status));
    }
    // SAFETY: `at_exit` has the signature `on_exit` requires and never
    // unwinds (`call` catches every panic); its argument is unused.
    unsafe { on_exit(at_exit, std::ptr::null_mut()) == 0 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn register() -> bool {
    extern "C" fn at_exit() {
        call(None);
    }
    // SAFETY: `at_exit` is a plain `extern "C" fn()` that never unwinds
    // (`call` catches every panic), as `atexit` requires.
    unsafe { libc::atexit(at_exit) == 0 }
}
