//! A hook the C library runs when this process exits normally.

/// Has the C library run `hook` when the process exits through `exit`: a
/// C or Fortran main program returning or ending (`end program`, `stop`,
/// `error stop`), `exit`, or Rust's `std::process::exit`. Not on `_exit`
/// or a death by a signal. `false` when the C library has no room for it
/// (it guarantees 32).
pub(crate) fn at_exit(hook: extern "C" fn()) -> bool {
    // SAFETY: `hook` is a function of the program, callable with no
    // arguments for as long as the process lives; atexit only stores it.
    unsafe { libc::atexit(hook) == 0 }
}
