//! Every `unsafe` block of sode-shm lives under this module: the shared
//! mapping and its bounds-checked accessors, process handles, the memory
//! policy system call, futexes, and the seccomp filter that tests use to
//! show that no path needs cross-memory attach.

pub(crate) mod ending_signal;
pub(crate) mod futex;
pub(crate) mod mempolicy;
pub(crate) mod process;
pub mod seccomp;
pub(crate) mod shared;
