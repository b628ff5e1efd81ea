//! # sode-capi — the C ABI of sode
//!
//! `libsode.so` / `libsode.a` and `sode.h` for C, C++ and (through the
//! `sode` Fortran module) Fortran stencil codes. Every function returns a
//! status code (`SODE_OK` is 0) and leaves a message for
//! [`sode_last_error`](sys::sode_last_error) on the calling thread; no
//! panic crosses into C (one is caught and reported as
//! `SODE_ERR_INTERNAL`); collective calls fail on every rank alike.
//!
//! ```c
//! sode_comm *comm;            /* sode_comm_create_mpi(MPI_COMM_WORLD, 60, &comm) with libsode_mpi */
//! sode_comm_create_env(60.0, &comm);
//! sode_exchange *x;
//! int dims[2] = {2, 2}, coords[2] = {...}, periodic[2] = {1, 0}, h[2] = {1, 1};
//! sode_exchange_create_cart(comm, 2, dims, coords, periodic, h, h, SODE_BOX, &x);
//! int64_t ext[2] = {ny + 2, nx + 2}, lo[2] = {1, 1}, own[2] = {ny, nx};
//! sode_exchange_add_field(x, u, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C);
//! sode_exchange_commit(x);                       /* collective */
//! for (...) { sode_exchange_start(x); /* interior */ sode_exchange_wait(x, 10.0); /* boundary */ }
//! sode_exchange_free(&x); sode_comm_free(&comm);
//! ```
//!
//! The fields, the pattern and the packing are `sode`'s
//! ([`sode::field`], [`sode::pattern`]); this crate keeps the handles
//! ([`exchange`]), the job-wide agreement at commit ([`cart`],
//! [`explicit`]), status codes and messages; every `unsafe` (pointers from
//! C) in `sys`.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod cart;
pub mod comm;
pub mod error;
pub mod exchange;
pub mod explicit;
pub mod handle;
mod record;
pub mod stats;
#[allow(unsafe_code)]
pub mod sys;

use std::ffi::{c_int, CStr};

/// The version of this ABI: a program built against another refuses to run
/// (compare with `sode_abi_version()`).
pub const SODE_ABI_VERSION: c_int = 1;

/// The version of sode this library is, as `major.minor.patch`
/// (`sode_version()` gives it as a string). Within a major version (and,
/// before 1.0, within a minor one) the ABI only grows.
pub const SODE_VERSION_MAJOR: c_int = 0;
/// See `SODE_VERSION_MAJOR`.
pub const SODE_VERSION_MINOR: c_int = 1;
/// See `SODE_VERSION_MAJOR`.
pub const SODE_VERSION_PATCH: c_int = 0;

/// Success.
pub const SODE_OK: c_int = 0;
/// A required pointer argument was null.
pub const SODE_ERR_NULL: c_int = 1;
/// An invalid argument.
pub const SODE_ERR_ARG: c_int = 2;
/// A call in the wrong state (commit twice, start before commit, wait
/// without start, free while in flight, use after a failure).
pub const SODE_ERR_STATE: c_int = 3;
/// `sode_exchange_wait` reached its timeout; call it again.
pub const SODE_ERR_TIMEOUT: c_int = 4;
/// Finding or meeting the other ranks failed.
pub const SODE_ERR_BOOTSTRAP: c_int = 5;
/// The ranks described different exchanges.
pub const SODE_ERR_MISMATCH: c_int = 6;
/// A channel failed: a peer died (a neighbour, or any rank of the job, as
/// its health watcher found), the device or shared memory failed.
pub const SODE_ERR_CHANNEL: c_int = 7;
/// A bug in sode (a caught panic).
pub const SODE_ERR_INTERNAL: c_int = 8;

/// The name and meaning of a status code, for `sode_strerror`.
pub fn status_text(status: c_int) -> &'static CStr {
    match status {
        SODE_OK => c"SODE_OK: success",
        SODE_ERR_NULL => c"SODE_ERR_NULL: a required pointer argument was null",
        SODE_ERR_ARG => c"SODE_ERR_ARG: an invalid argument",
        SODE_ERR_STATE => c"SODE_ERR_STATE: a call in the wrong state",
        SODE_ERR_TIMEOUT => c"SODE_ERR_TIMEOUT: the wait reached its timeout; call it again",
        SODE_ERR_BOOTSTRAP => c"SODE_ERR_BOOTSTRAP: finding or meeting the other ranks failed",
        SODE_ERR_MISMATCH => c"SODE_ERR_MISMATCH: the ranks described different exchanges",
        SODE_ERR_CHANNEL => c"SODE_ERR_CHANNEL: a channel failed (a peer died, or the device or shared memory failed)",
        SODE_ERR_INTERNAL => c"SODE_ERR_INTERNAL: a bug in sode (please report it)",
        _ => c"not a sode status code",
    }
}

/// `float` / `real(real32)`.
pub const SODE_F32: c_int = 0;
/// `double` / `real(real64)`.
pub const SODE_F64: c_int = 1;
/// `int32_t` / `integer(int32)`.
pub const SODE_I32: c_int = 2;
/// `int64_t` / `integer(int64)`.
pub const SODE_I64: c_int = 3;
/// `float _Complex` / `complex(real32)`.
pub const SODE_C32: c_int = 4;
/// `double _Complex` / `complex(real64)`.
pub const SODE_C64: c_int = 5;
/// Most bytes an element may have in `SODE_BYTES(n)`, the element type of
/// `n`-byte elements copied as they are (a struct, a derived type): the
/// code `-n`.
pub const SODE_MAX_ELEM_BYTES: c_int = 4096;

/// Neighbours across faces only.
pub const SODE_STAR: c_int = 0;
/// Faces and edges, no corners (3-D; the same as `SODE_BOX` in 2-D).
pub const SODE_STAR_EDGES: c_int = 1;
/// Faces, edges and corners.
pub const SODE_BOX: c_int = 2;

/// Shared memory with ranks on this node; RDMA with the others where both
/// nodes have a working device, TCP otherwise (default).
pub const SODE_TRANSPORT_AUTO: c_int = 0;
/// Shared memory only (every neighbour on this node).
pub const SODE_TRANSPORT_SHM: c_int = 1;
/// RDMA with every other rank, on this node too.
pub const SODE_TRANSPORT_RDMA: c_int = 2;
/// TCP with every other rank, on this node too.
pub const SODE_TRANSPORT_TCP: c_int = 3;

/// Faces of long contiguous runs travel in place over RDMA (default).
pub const SODE_ZERO_COPY_AUTO: c_int = 0;
/// Every face travels in place over RDMA.
pub const SODE_ZERO_COPY_ALWAYS: c_int = 1;
/// Every face is packed and unpacked.
pub const SODE_ZERO_COPY_NEVER: c_int = 2;

/// A timeout meaning "the job's default": `SODE_TIMEOUT` seconds, or no
/// deadline when it is unset (`sode_exchange_wait`). `INFINITY` is no
/// deadline.
pub const SODE_TIMEOUT_DEFAULT: f64 = -1.0;

/// The last axis is contiguous (`a[i][j]`).
pub const SODE_ORDER_C: c_int = 0;
/// The first axis is contiguous (`a(i, j)`).
pub const SODE_ORDER_FORTRAN: c_int = 1;

/// A field's arrays are host memory (`sode_exchange_set_memory_kind`):
/// what the CPU reads and writes, pinned or registered for a device
/// included. The default, and the one kind sode exchanges today.
pub const SODE_MEMORY_HOST: c_int = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_macros_are_the_crate_version() {
        let parts: Vec<c_int> = env!("CARGO_PKG_VERSION")
            .split('.')
            .map(|p| p.parse().expect("a numeric version"))
            .collect();
        assert_eq!(
            parts,
            [SODE_VERSION_MAJOR, SODE_VERSION_MINOR, SODE_VERSION_PATCH]
        );
    }

    #[test]
    fn every_status_has_its_name() {
        let names = [
            (SODE_OK, "SODE_OK"),
            (SODE_ERR_NULL, "SODE_ERR_NULL"),
            (SODE_ERR_ARG, "SODE_ERR_ARG"),
            (SODE_ERR_STATE, "SODE_ERR_STATE"),
            (SODE_ERR_TIMEOUT, "SODE_ERR_TIMEOUT"),
            (SODE_ERR_BOOTSTRAP, "SODE_ERR_BOOTSTRAP"),
            (SODE_ERR_MISMATCH, "SODE_ERR_MISMATCH"),
            (SODE_ERR_CHANNEL, "SODE_ERR_CHANNEL"),
            (SODE_ERR_INTERNAL, "SODE_ERR_INTERNAL"),
        ];
        for (status, name) in names {
            let text = status_text(status).to_str().unwrap();
            assert!(text.starts_with(&format!("{name}: ")), "{status}: {text}");
        }
        assert_eq!(status_text(-7).to_str().unwrap(), "not a sode status code");
        assert_eq!(status_text(9).to_str().unwrap(), "not a sode status code");
    }
}
