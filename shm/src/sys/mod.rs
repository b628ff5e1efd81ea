//! Every `unsafe` block of sode-shm lives under this module: the shared
//! mapping and its bounds-checked accessors, pidfd handles, the memory
//! policy system call, futexes, and the seccomp filter used to force the
//! cross-memory-attach fallback in tests.

pub(crate) mod futex;
pub(crate) mod mempolicy;
pub(crate) mod pidfd;
pub(crate) mod ptrace_permit;
pub mod seccomp;
pub(crate) mod shared;
