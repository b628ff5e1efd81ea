//! The state of the process's MPI library: its `MPI_Initialized` and
//! `MPI_Finalized`, looked up among the symbols the program loaded (sode
//! links no MPI).

use std::ffi::c_int;

use libloading::os::unix::{Library, Symbol};

/// `MPI_Initialized` and `MPI_Finalized`: `int (*)(int *flag)`.
type Query = unsafe extern "C" fn(*mut c_int) -> c_int;

/// Where the process's MPI library stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MpiState {
    /// `MPI_Init` was called (true after `MPI_Finalize` too).
    pub(crate) initialized: bool,
    /// `MPI_Finalize` was called.
    pub(crate) finalized: bool,
}

impl MpiState {
    /// Initialized and not finalized.
    pub(crate) fn running(self) -> bool {
        self.initialized && !self.finalized
    }
}

/// The state of the MPI library the program loaded; none when it loaded
/// none (or one without these calls).
pub(crate) fn query() -> Option<MpiState> {
    let program = Library::this();
    let ask = |name: &[u8]| -> Option<bool> {
        // SAFETY: every MPI's `MPI_Initialized` and `MPI_Finalized` have
        // this signature (the MPI standard), and may be called at any
        // time, from any thread, before `MPI_Init` and after
        // `MPI_Finalize` alike.
        let query: Symbol<Query> = unsafe { program.get(name) }.ok()?;
        let mut flag: c_int = 0;
        // SAFETY: as above; `flag` is valid for the write.
        let status = unsafe { query(&mut flag) };
        (status == 0).then_some(flag != 0)
    };
    Some(MpiState {
        initialized: ask(b"MPI_Initialized\0")?,
        finalized: ask(b"MPI_Finalized\0")?,
    })
}
