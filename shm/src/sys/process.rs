//! Process handles that notice a peer's death without racing pid reuse.
//!
//! A handle is a pidfd (Linux 5.3+) where the system gives one. Where
//! `pidfd_open` is refused (a kernel before 5.3, valgrind 3.19, a seccomp
//! profile that does not pass it), it is the process's `/proc/<pid>/stat`,
//! held open: that file stays bound to the process it was opened for, as a
//! pidfd does. It reads state `Z` once the process has exited, and fails
//! with `ESRCH` once it is reaped, even when the pid names another process
//! by then. Which kind this process uses is decided by the first
//! `pidfd_open` (see [`handles`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// What a handle's descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A pidfd: readable (`POLLIN`) once the process has exited.
    Pidfd,
    /// `/proc/<pid>/stat`, open.
    Stat,
}

/// Set once `pidfd_open` was refused: every handle since is a stat file.
static NO_PIDFD: AtomicBool = AtomicBool::new(false);

/// How this process holds its peers' processes: `Ok` with pidfds, or why
/// not, for the capability report. Probes once, on this process's own pid.
pub(crate) fn handles() -> Result<(), String> {
    if !NO_PIDFD.load(Ordering::Relaxed) {
        // The probe settles NO_PIDFD when the call is refused.
        drop(Process::open(std::process::id() as i32));
    }
    match NO_PIDFD.load(Ordering::Relaxed) {
        false => Ok(()),
        true => Err("pidfd_open is refused (an older kernel, valgrind, or a seccomp profile): peer processes are held through /proc/<pid>/stat".into()),
    }
}

/// A handle on one process, readable for its exit whatever its pid
/// becomes.
#[derive(Debug)]
pub(crate) struct Process {
    fd: OwnedFd,
    kind: Kind,
}

impl Process {
    /// A handle on `pid`. `ESRCH` when no such process exists.
    pub(crate) fn open(pid: i32) -> io::Result<Process> {
        if !NO_PIDFD.load(Ordering::Relaxed) {
            match pidfd_open(pid) {
                Ok(fd) => {
                    return Ok(Process {
                        fd,
                        kind: Kind::Pidfd,
                    })
                }
                Err(e) if refused(&e) => {
                    if !NO_PIDFD.swap(true, Ordering::Relaxed) {
                        tracing::debug!(error = %e, "pidfd_open is refused: peer processes are held through /proc/<pid>/stat");
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let fd = std::fs::File::open(format!("/proc/{pid}/stat")).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::from_raw_os_error(libc::ESRCH),
            _ => e,
        })?;
        Ok(Process {
            fd: fd.into(),
            kind: Kind::Stat,
        })
    }

    /// A handle on `pid` shared by every exchange of this process that
    /// watches it: one descriptor a peer process, not one a peer of each
    /// exchange (a code that keeps a hundred exchanges to 26 neighbours
    /// would otherwise hold 2,600). A kept handle whose process has exited
    /// is not handed out: the pid may name another process now.
    pub(crate) fn shared(pid: i32) -> io::Result<Arc<Process>> {
        static OPEN: Mutex<Vec<(i32, Weak<Process>)>> = Mutex::new(Vec::new());
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, w)| w.strong_count() > 0);
        let kept = open
            .iter()
            .filter(|(p, _)| *p == pid)
            .find_map(|(_, w)| w.upgrade())
            .filter(|h| matches!(h.exited(), Ok(false)));
        if let Some(h) = kept {
            return Ok(h);
        }
        let h = Arc::new(Process::open(pid)?);
        open.push((pid, Arc::downgrade(&h)));
        Ok(h)
    }

    /// Whether the process has exited (no waiting, nothing allocated).
    pub(crate) fn exited(&self) -> io::Result<bool> {
        match self.kind {
            Kind::Pidfd => {
                let mut p = [pollfd(self.fd.as_raw_fd())];
                poll_now(&mut p)?;
                Ok(p[0].revents != 0)
            }
            Kind::Stat => stat_says_exited(self.fd.as_raw_fd()),
        }
    }
}

/// Whether `e` says the system gives no pidfds here, rather than that this
/// call failed (no such process, no descriptors left).
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS | libc::EPERM | libc::EACCES)
    )
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new file
    // descriptor or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Polls `polls` once without waiting; an interrupted poll is retried.
fn poll_now(polls: &mut [libc::pollfd]) -> io::Result<()> {
    loop {
        // SAFETY: `polls` is a live array of `len` pollfd structs; the
        // timeout 0 makes the call return at once; the descriptors belong
        // to handles the caller keeps open (a closed one shows as
        // POLLNVAL, never as memory access).
        let rc = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 0) };
        if rc >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether the process whose `/proc/<pid>/stat` is open as `fd` has
/// exited: reaped (`ESRCH`, or nothing to read), dead (`X`), or a zombie
/// (`Z`) with no thread left (a main thread that ended by `pthread_exit`
/// is a zombie too, while the process's other threads run on).
fn stat_says_exited(fd: RawFd) -> io::Result<bool> {
    let mut buf = [0u8; 512];
    let n = loop {
        // SAFETY: `buf` is a live stack array of `len` bytes; `fd` belongs
        // to a handle the caller keeps open.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ESRCH) => return Ok(true),
            _ => return Err(e),
        }
    };
    Ok(stat_says_ended(&buf[..n]))
}

/// Whether a `/proc/<pid>/stat` line (empty: the process is reaped) says
/// its process has ended: dead (`X`), or a zombie (`Z`) with no thread
/// left.
pub(crate) fn stat_says_ended(stat: &[u8]) -> bool {
    match state_of_stat(stat) {
        None => true,
        Some(Stat { state, threads }) => match state {
            b'X' | b'x' => true,
            b'Z' => threads <= 1,
            _ => false,
        },
    }
}

/// What a `/proc/<pid>/stat` line says of a process's life.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    /// Its state letter (`R`, `S`, `Z`, ...).
    state: u8,
    /// Its threads (field 20), 0 when unreadable.
    threads: u64,
}

/// The state and thread count of a `/proc/<pid>/stat` line: the fields
/// after the last `)` (the command name may hold spaces and parentheses)
/// are the state, then 16 others, then the threads.
fn state_of_stat(stat: &[u8]) -> Option<Stat> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat
        .get(close + 1..)?
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let threads = fields
        .nth(16)
        .and_then(|f| std::str::from_utf8(f).ok()?.parse().ok())
        .unwrap_or(0);
    Some(Stat { state, threads })
}

/// Several handles checked at once, with the poll array built once:
/// checking on peers allocates nothing. Pidfds take one `poll` for all;
/// stat files one read each.
#[derive(Debug)]
pub(crate) struct Watch {
    /// Every pidfd, in the handles' order among the pidfds.
    polls: Vec<libc::pollfd>,
    /// Per handle, in the order given: where it is checked.
    checks: Vec<Check>,
}

#[derive(Debug, Clone, Copy)]
enum Check {
    /// `polls[i]`.
    Polled(usize),
    /// A stat file, and whether the last check found it exited.
    Read { fd: RawFd, exited: bool },
}

impl Watch {
    /// A watch over `handles`; they must outlive it (the caller keeps both
    /// in one struct, the handles dropped after or with the watch).
    pub(crate) fn new<'a>(handles: impl IntoIterator<Item = &'a Process>) -> Watch {
        let (mut polls, mut checks) = (Vec::new(), Vec::new());
        for h in handles {
            let fd = h.fd.as_raw_fd();
            checks.push(match h.kind {
                Kind::Pidfd => {
                    polls.push(pollfd(fd));
                    Check::Polled(polls.len() - 1)
                }
                Kind::Stat => Check::Read { fd, exited: false },
            });
        }
        Watch { polls, checks }
    }

    /// Checks every handle once without waiting. An interrupted poll
    /// reports no exits (the next check will see them).
    pub(crate) fn poll(&mut self) -> io::Result<()> {
        for p in &mut self.polls {
            p.revents = 0;
        }
        if !self.polls.is_empty() {
            poll_now(&mut self.polls)?;
        }
        for c in &mut self.checks {
            if let Check::Read { fd, exited } = c {
                *exited = stat_says_exited(*fd)?;
            }
        }
        Ok(())
    }

    /// Whether process `i` was seen exited by the last [`poll`](Watch::poll).
    pub(crate) fn exited(&self, i: usize) -> bool {
        match self.checks.get(i) {
            Some(Check::Polled(p)) => self.polls.get(*p).is_some_and(|p| p.revents != 0),
            Some(Check::Read { exited, .. }) => *exited,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    fn stat_handle(pid: i32) -> Process {
        let fd = std::fs::File::open(format!("/proc/{pid}/stat")).unwrap();
        Process {
            fd: fd.into(),
            kind: Kind::Stat,
        }
    }

    /// Polls `exited` until it says so, for at most 5 s.
    fn comes_true(mut exited: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if exited() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn the_state_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let line = |name: &str, state: &str, threads: u64| {
            format!("42 ({name}) {state} 1 2 3 0 -1 4 5 6 7 8 9 10 11 12 20 0 {threads} 0 99")
        };
        let stat = |state, threads| Some(Stat { state, threads });
        assert_eq!(
            state_of_stat(line("a) b) c", "S", 1).as_bytes()),
            stat(b'S', 1)
        );
        assert_eq!(
            state_of_stat(line("ring1d", "Z", 2).as_bytes()),
            stat(b'Z', 2)
        );
        assert_eq!(state_of_stat(b"42 (ring1d) Z 1"), stat(b'Z', 0));
        assert_eq!(state_of_stat(b"42 (cut"), None);
    }

    /// A main thread that ended by `pthread_exit` leaves its process a
    /// zombie leader with its other threads running: not exited, until the
    /// last thread ends.
    #[test]
    fn a_zombie_leader_with_threads_left_is_alive() {
        let dir = std::env::temp_dir().join(format!("sode-zl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("zl.c");
        std::fs::write(
            &src,
            "#include <pthread.h>\n#include <unistd.h>\n\
             static void *run(void *a) { (void)a; sleep(2); return 0; }\n\
             int main(void) { pthread_t t; pthread_create(&t, 0, run, 0); pthread_exit(0); }\n",
        )
        .unwrap();
        let exe = dir.join("zl");
        let built = Command::new("cc")
            .args(["-pthread", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("a C compiler (cc)");
        assert!(built.success());
        let mut child = Command::new(&exe).spawn().unwrap();
        let h = stat_handle(child.id() as i32);
        let leader_gone = |h: &Process| {
            let mut buf = [0u8; 512];
            let n = std::fs::File::open(format!("/proc/{}/stat", child.id()))
                .and_then(|mut f| std::io::Read::read(&mut f, &mut buf))
                .unwrap_or(0);
            state_of_stat(&buf[..n]).is_some_and(|s| s.state == b'Z') && !h.exited().unwrap()
        };
        assert!(
            comes_true(|| leader_gone(&h)),
            "never a zombie leader with a thread running"
        );
        assert!(
            comes_true(|| h.exited().unwrap()),
            "the process's end is not seen"
        );
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stat handle sees its process as alive, then exited once it is a
    /// zombie, and still once it is reaped, in a watch and alone, and a
    /// pid that no longer exists gives no handle.
    #[test]
    fn a_stat_handle_sees_its_process_exit_and_be_reaped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let h = stat_handle(pid);
        let mut watch = Watch::new([&h]);
        watch.poll().unwrap();
        assert!(!watch.exited(0));
        assert!(!h.exited().unwrap());
        child.kill().unwrap();
        // Not reaped yet: a zombie.
        assert!(comes_true(|| h.exited().unwrap()), "the zombie is not seen");
        watch.poll().unwrap();
        assert!(watch.exited(0));
        child.wait().unwrap();
        assert!(h.exited().unwrap(), "the reaped process is not seen");
        watch.poll().unwrap();
        assert!(watch.exited(0));
        let gone = Process::open(pid).map(|_| ()).unwrap_err();
        assert_eq!(gone.raw_os_error(), Some(libc::ESRCH));
    }

    /// Pidfds and stat files in one watch answer for their own processes.
    #[test]
    fn a_watch_of_both_kinds_tells_its_processes_apart() {
        let mut dying = Command::new("sleep").arg("30").spawn().unwrap();
        let mut living = Command::new("sleep").arg("30").spawn().unwrap();
        let stat = stat_handle(dying.id() as i32);
        let fd = match pidfd_open(living.id() as i32) {
            Ok(fd) => Some(Process {
                fd,
                kind: Kind::Pidfd,
            }),
            // Nothing to mix with where the system gives no pidfds.
            Err(e) if refused(&e) => None,
            Err(e) => panic!("pidfd_open: {e}"),
        };
        let handles: Vec<&Process> = [Some(&stat), fd.as_ref()].into_iter().flatten().collect();
        let mut watch = Watch::new(handles);
        dying.kill().unwrap();
        dying.wait().unwrap();
        assert!(comes_true(|| {
            watch.poll().unwrap();
            watch.exited(0)
        }));
        if fd.is_some() {
            assert!(!watch.exited(1), "the living process was seen exited");
        }
        living.kill().unwrap();
        living.wait().unwrap();
        if fd.is_some() {
            assert!(comes_true(|| {
                watch.poll().unwrap();
                watch.exited(1)
            }));
        }
    }
}
