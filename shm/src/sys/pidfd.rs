//! Process handles that notice a peer's death without racing pid reuse.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError, Weak};

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

    /// A pidfd of `pid` shared by every exchange of this process that
    /// watches it: one descriptor a peer process, not one a peer of each
    /// exchange (a code that keeps a hundred exchanges to 26 neighbours
    /// would otherwise hold 2,600). A kept pidfd whose process has exited
    /// is not handed out: the pid may name another process now.
    pub(crate) fn shared(pid: i32) -> io::Result<Arc<PidFd>> {
        static OPEN: Mutex<Vec<(i32, Weak<PidFd>)>> = Mutex::new(Vec::new());
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, w)| w.strong_count() > 0);
        let kept = open
            .iter()
            .filter(|(p, _)| *p == pid)
            .find_map(|(_, w)| w.upgrade())
            .filter(|fd| matches!(fd.exited(), Ok(false)));
        if let Some(fd) = kept {
            return Ok(fd);
        }
        let fd = Arc::new(PidFd::open(pid)?);
        open.push((pid, Arc::downgrade(&fd)));
        Ok(fd)
    }

    /// Whether the process has exited (one `poll`, no waiting, nothing
    /// allocated). An interrupted poll is retried.
    pub(crate) fn exited(&self) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one live pollfd on the stack, timeout 0; the pidfd is
            // owned by `self` and open for the call.
            let rc = unsafe { libc::poll(&mut p, 1, 0) };
            if rc >= 0 {
                return Ok(p.revents != 0);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Several pidfds polled at once, with the poll array built once: checking
/// on peers allocates nothing.
#[derive(Debug)]
pub(crate) struct Watch {
    polls: Vec<libc::pollfd>,
}

impl Watch {
    /// A watch over `fds`; they must outlive it (the caller keeps both in
    /// one struct, the pidfds dropped after or with the watch).
    pub(crate) fn new<'a>(fds: impl IntoIterator<Item = &'a PidFd>) -> Watch {
        Watch {
            polls: fds
                .into_iter()
                .map(|f| libc::pollfd {
                    fd: f.0.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }

    /// Polls every pidfd once without waiting. An interrupted poll reports
    /// no exits (the next check will see them).
    pub(crate) fn poll(&mut self) -> io::Result<()> {
        for p in &mut self.polls {
            p.revents = 0;
        }
        // SAFETY: `polls` is a live array of `len` pollfd structs; the
        // timeout 0 makes the call return at once; the descriptors belong
        // to PidFds the caller keeps open (a closed one shows as POLLNVAL,
        // never as memory access).
        let rc =
            unsafe { libc::poll(self.polls.as_mut_ptr(), self.polls.len() as libc::nfds_t, 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Whether process `i` was seen exited by the last [`poll`](Watch::poll).
    pub(crate) fn exited(&self, i: usize) -> bool {
        self.polls.get(i).is_some_and(|p| p.revents != 0)
    }
}
