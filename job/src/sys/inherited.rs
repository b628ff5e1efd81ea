//! A socket a launcher left open for this process (`PMI_FD`).

use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Takes ownership of `fd` as a stream socket, after checking that it is
/// an open socket (not a file, nor a number that names nothing) and that
/// no other part of this process adopted it first.
pub(crate) fn socket(fd: RawFd) -> Result<UnixStream, String> {
    use std::sync::Mutex;
    static TAKEN: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());
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
    let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    if taken.contains(&fd) {
        return Err(format!(
            "PMI_FD={fd} is already in use by an earlier job in this process: the PMI server speaks to one client per rank"
        ));
    }
    taken.push(fd);
    // SAFETY: `fd` is an open socket of this process (fstat above), taken
    // once (TAKEN): the launcher handed it to this process for PMI, and
    // nothing else in sode uses it, so the stream is its only owner.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}
