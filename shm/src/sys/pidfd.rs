//! Process handles that notice a peer's death without racing pid reuse.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// A pidfd (Linux 5.3+): readable once the process has exited, zombie or not.
#[derive(Debug)]
pub(crate) struct PidFd(OwnedFd);

impl PidFd {
    pub(crate) fn open(pid: i32) -> io::Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new file
        // descriptor or -1; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }
}

/// Returns the indices of `fds` whose processes have exited.
pub(crate) fn exited(fds: &[&PidFd]) -> io::Result<Vec<usize>> {
    let mut polls: Vec<PollFd<'_>> = fds
        .iter()
        .map(|f| PollFd::new(f.0.as_fd(), PollFlags::POLLIN))
        .collect();
    poll(&mut polls, PollTimeout::ZERO).map_err(io::Error::from)?;
    Ok(polls
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents().is_some_and(|r| !r.is_empty()))
        .map(|(i, _)| i)
        .collect())
}
