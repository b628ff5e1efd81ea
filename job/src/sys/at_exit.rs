//! A function run when the process exits normally (`exit`, a return from
//! `main`, Fortran's `stop`), through the C library: glibc's `on_exit`,
//! which passes the exit status, elsewhere `atexit`, which does not.

use std::sync::OnceLock;

/// A function run at exit, given the exit status if known.
type Hook = fn(Option<i32>);

/// The functions to run at exit, in the order given: the job's health
/// (its goodbyes) and sode-shm's (its job directories).
static HOOKS: [OnceLock<Hook>; 4] = [const { OnceLock::new() }; 4];

/// Runs `f` once when the process exits normally, with the exit status
/// (`None` where the C library does not tell it), after the functions
/// given before it; a function given again is not run twice. Not run when
/// the process is killed or aborts. Whether it will run: the C library
/// may refuse the hook when out of memory, and there is room for four.
pub fn run_at_exit(f: Hook) -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    OWNER.get_or_init(std::process::id);
    let placed = HOOKS.iter().any(|slot| {
        let mut taken = false;
        slot.get_or_init(|| {
            taken = true;
            f
        });
        taken || slot.get().is_some_and(|&g| std::ptr::fn_addr_eq(g, f))
    });
    placed && *REGISTERED.get_or_init(register)
}

/// The process that registered the hooks: a child forked from it, which
/// shares its descriptors and locks, runs none of them at its exit.
static OWNER: OnceLock<u32> = OnceLock::new();

/// Runs the hooks; no unwinding may cross into the C library's exit.
fn call(status: Option<i32>) {
    if OWNER.get() != Some(&std::process::id()) {
        return;
    }
    for f in HOOKS.iter().filter_map(OnceLock::get) {
        let _ = std::panic::catch_unwind(|| f(status));
    }
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
