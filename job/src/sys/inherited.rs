//! A socket a launcher left open for this process (`PMI_FD`).

use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// A stream on a duplicate of `fd`, after checking that it is an open
/// socket (not a file, nor a number that names nothing). The launcher's
/// descriptor stays open: the process's MPI library may speak on it too
/// (MPICH's, after `MPI_Init`), and a later world of this process meets
/// through it again.
pub(crate) fn socket(fd: RawFd) -> Result<UnixStream, String> {
    if fd < 0 {
        return Err(format!("PMI_FD={fd} is not a file descriptor"));
    }
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat only writes a `struct stat` into `stat`, valid for it;
    // any `fd` is safe to ask about.
    if unsafe { libc::fstat(fd, stat.as_mut_ptr()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("PMI_FD={fd} is not open in this process: {e}"));
    }
    // SAFETY: fstat succeeded, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("PMI_FD={fd} is not a socket"));
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor and touches no
    // memory; any `fd` is safe to ask for.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("PMI_FD={fd} cannot be duplicated: {e}"));
    }
    // SAFETY: `copy` was just made by fcntl and is owned by nothing else.
    Ok(unsafe { UnixStream::from_raw_fd(copy) })
}
