//! The job directories a process holds, removed when a signal ends it.
//!
//! A batch system ends a job with SIGTERM (Slurm at the time limit and on
//! `scancel`, `mpirun` when it is stopped), a terminal with SIGINT or
//! SIGHUP. No exit hook runs then, and every rank of a node ends at once,
//! so none is left to remove the job's directory: it stayed until the
//! user's next job on the node swept it. For each of these signals whose
//! action is still the default when a process first holds a directory,
//! a handler is installed that does what the last holder's release does
//! (an exclusive `flock`, which only the last holder of the node gets,
//! then clearing and removing the directory), in system calls that are
//! safe in a signal handler, and then lets the signal end the process as
//! it would have: the process ends killed by the same signal. A handler
//! the program installs, before or after, is left alone or takes over.

use std::ffi::{c_char, c_int, CString};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};

/// The signals whose default action ends a process, and which end jobs.
const ENDING: [c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// A directory held, as the handler reads it: the descriptor holding its
/// shared `flock`, and its path (never freed: the handler may read it on
/// another thread at any time).
struct Slot {
    fd: AtomicI32,
    path: AtomicPtr<c_char>,
}

/// Room for the directories a process holds at once (one per job it
/// belongs to; a program is in one job, or a few in tests).
static SLOTS: [Slot; 8] = [const {
    Slot {
        fd: AtomicI32::new(-1),
        path: AtomicPtr::new(std::ptr::null_mut()),
    }
}; 8];

/// How many paths have been given to slots: each is kept for the life of
/// the process, so a process that joins jobs without end stops at this.
const MOST_PATHS: usize = 256;
static PATHS: AtomicUsize = AtomicUsize::new(0);

/// The process that installed the handler: a child forked from it shares
/// its locks, and releasing them would release the parent's hold.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Installs the handler for each ending signal whose action is the
/// default; called once a process (by the first hold of a job directory).
pub(crate) fn install() {
    OWNER.store(std::process::id() as c_int, Ordering::Release);
    for sig in ENDING {
        if !install_for(sig) {
            tracing::debug!(sig, "a handler is set for this signal: a job directory held when it ends the process is left to the next job's sweep");
        }
    }
}

/// Installs [`on_ending_signal`] for `sig` if its action is the default.
fn install_for(sig: c_int) -> bool {
    // SAFETY: a zeroed `sigaction` is a valid value of the C struct.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the action of `sig` into `old`, a valid struct.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
        return false;
    }
    if old.sa_sigaction != libc::SIG_DFL {
        return false;
    }
    // SAFETY: as above.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = on_ending_signal as extern "C" fn(c_int) as libc::sighandler_t;
    // Back to the default on entry, so that the signal raised again at
    // the end ends the process, and a second one during it too.
    new.sa_flags = libc::SA_RESETHAND;
    // SAFETY: `new` is initialised; its handler is an `extern "C" fn(c_int)`
    // that makes only async-signal-safe calls and never unwinds.
    unsafe {
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(sig, &new, std::ptr::null_mut()) == 0
    }
}

/// Tells the handler about the directory `path`, held through `fd`; the
/// slot to [`forget`] before `fd` is closed, or `None` when there is no
/// room (the directory is then left to the next job's sweep).
pub(crate) fn remember(fd: RawFd, path: &Path) -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    if fd < 0 || PATHS.fetch_add(1, Ordering::Relaxed) >= MOST_PATHS {
        return None;
    }
    // A slot is free at -1, claimed at -2 (which the handler skips too).
    let (i, slot) = SLOTS.iter().enumerate().find(|(_, slot)| {
        slot.fd
            .compare_exchange(-1, -2, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })?;
    // The path it had is not freed: a handler may be reading it.
    slot.path.store(path.into_raw(), Ordering::Release);
    slot.fd.store(fd, Ordering::Release);
    Some(i)
}

/// The handler stops using slot `i`'s descriptor.
pub(crate) fn forget(i: usize) {
    SLOTS[i].fd.store(-1, Ordering::Release);
}

/// Releases every directory remembered, then raises `sig` again: its
/// action is the default again, so the process ends by it once this
/// returns (it is blocked until then).
extern "C" fn on_ending_signal(sig: c_int) {
    // SAFETY: getpid and raise are async-signal-safe and take no memory.
    unsafe {
        if libc::getpid() == OWNER.load(Ordering::Acquire) {
            for i in 0..SLOTS.len() {
                release(i);
            }
        }
        libc::raise(sig);
    }
}

/// What `HeldDir::release` does for slot `i`'s directory, in
/// async-signal-safe calls: takes its lock exclusively (only the last
/// holder can), then, if it is still the directory at its path, removes
/// our files in it and it.
pub(crate) fn release(i: usize) {
    let slot = &SLOTS[i];
    let fd = slot.fd.load(Ordering::Acquire);
    let path = slot.path.load(Ordering::Acquire);
    if fd < 0 || path.is_null() {
        return;
    }
    // SAFETY: flock, fstat and lstat take a descriptor or a NUL-terminated
    // path (leaked, never freed) and write only into the stat buffers.
    let same = unsafe {
        if libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) != 0 {
            return;
        }
        let (mut held, mut there) = (std::mem::zeroed(), std::mem::zeroed());
        libc::fstat(fd, &mut held) == 0
            && libc::lstat(path, &mut there) == 0
            && (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)
    };
    if same {
        clear(fd);
        // SAFETY: `path` is NUL-terminated and alive (see above).
        unsafe { libc::rmdir(path) };
    }
}

/// Where the record length and the name sit in a `struct linux_dirent64`
/// (an inode number and an offset of 8 bytes each, the length, a type
/// byte, then the NUL-terminated name).
const RECLEN_AT: usize = 16;
const NAME_AT: usize = 19;

/// Removes the regular files of ours in the open directory `dir` (the
/// locators a setup in flight left).
fn clear(dir: RawFd) {
    #[repr(C, align(8))]
    struct Buf([u8; 4096]);
    let mut buf = Buf([0; 4096]);
    // SAFETY: openat, getdents64, fstatat, unlinkat and close are
    // async-signal-safe system calls; the names passed point into `buf`,
    // within what getdents64 wrote, and are NUL-terminated by it.
    unsafe {
        let d = libc::openat(
            dir,
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if d < 0 {
            return;
        }
        let me = libc::geteuid();
        loop {
            let n = libc::syscall(libc::SYS_getdents64, d, buf.0.as_mut_ptr(), buf.0.len());
            if n <= 0 {
                break;
            }
            let mut at = 0usize;
            while at + NAME_AT < n as usize {
                let reclen =
                    u16::from_ne_bytes([buf.0[at + RECLEN_AT], buf.0[at + RECLEN_AT + 1]]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = buf.0.as_ptr().add(at + NAME_AT).cast::<c_char>();
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstatat(d, name, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
                    && st.st_mode & libc::S_IFMT == libc::S_IFREG
                    && st.st_uid == me
                {
                    libc::unlinkat(d, name, 0);
                }
                at += reclen;
            }
        }
        libc::close(d);
    }
}
