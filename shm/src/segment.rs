//! Segments. A segment's memory is a sealed memfd: it can never shrink or
//! grow, so no process, not even one of our own user, can truncate it under
//! a peer's mapping and raise SIGBUS there. Peers find it through a small
//! locator file (the owner's pid, the memfd's descriptor number and the
//! length) in the job's 0700 directory, created 0600 under a temporary name
//! and published by an atomic rename once the segment's tables are written.
//! A peer opens the memfd through `/proc/<pid>/fd/<n>`, checks its seals,
//! owner, length and header, and that the owner was alive throughout, then
//! maps it. Once every peer has mapped it the locator is removed and the
//! descriptor closed: the kernel frees the memory when the last process
//! unmaps it, including when processes die.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, Flock, FlockArg, SealFlag};

use crate::error::{Result, ShmError};
use crate::layout;
use crate::sys::process::Process;
use crate::sys::shared::SharedMap;

/// The seals every segment carries: no resizing, and no lifting of that.
fn required_seals() -> SealFlag {
    SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

/// The file name of a rank's segment for one exchange of one job, inside
/// the job's directory.
pub(crate) fn segment_path(dir: &Path, job: &str, exchange: &str, rank: usize) -> PathBuf {
    job_dir(dir, job).join(format!("{exchange}-r{rank}"))
}

/// The job's segment directory under `dir`: one per user and job, mode
/// 0700, so no other user can plant, read or replace a segment in it.
pub(crate) fn job_dir(dir: &Path, job: &str) -> PathBuf {
    dir.join(format!("sode-{}-{job}", nix::unistd::geteuid()))
}

/// Creates the job's directory (mode 0700), or checks the one that exists:
/// a directory, not a symlink, ours, mode 0700.
pub(crate) fn ensure_job_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut attempts = 0;
    loop {
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                let dir = path.parent().unwrap_or(Path::new("/"));
                return Err(ShmError::CreateSegment {
                    hint: hint_for(&source, dir),
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
        match std::fs::symlink_metadata(path) {
            // Removed again since (a cleanup of the directory above, or
            // the last holder of another job's process): made again.
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 100 => attempts += 1,
            inspected => return check_job_dir(path, inspected),
        }
    }
}

/// Whether anything is at `path` (not following a symlink).
fn path_exists(path: &Path) -> bool {
    !matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// Checks the job directory that exists at `path`: a directory, not a
/// symlink, ours, mode 0700.
fn ensure_existing_job_dir(path: &Path) -> Result<()> {
    check_job_dir(path, std::fs::symlink_metadata(path))
}

/// [`ensure_existing_job_dir`], from what inspecting `path` found.
fn check_job_dir(path: &Path, inspected: io::Result<std::fs::Metadata>) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let unsafe_dir = |why: String| ShmError::UnsafeSegment {
        path: path.to_path_buf(),
        why,
    };
    let meta = inspected.map_err(|e| unsafe_dir(format!("cannot inspect it ({e})")))?;
    if !meta.file_type().is_dir() {
        return Err(unsafe_dir(
            "it is not a directory (a symlink or file planted under the job's name?)".into(),
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "it belongs to uid {}, not to this user (uid {me}): another user made it",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode != 0o700 {
        return Err(unsafe_dir(format!("its mode is {mode:o}, not 700")));
    }
    Ok(())
}

/// Checks an open file sode keeps for this user (a locator, the node's
/// probe file): a regular file of ours, mode 0600; returns its length.
pub(crate) fn check_private_file(file: &File, path: &Path) -> Result<u64> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let unsafe_file = |why: String| ShmError::UnsafeSegment {
        path: path.to_path_buf(),
        why,
    };
    let meta = file
        .metadata()
        .map_err(|e| unsafe_file(format!("cannot inspect it ({e})")))?;
    if !meta.file_type().is_file() {
        return Err(unsafe_file("it is not a regular file".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_file(format!(
            "it belongs to uid {}, not to this user (uid {me})",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode != 0o600 {
        return Err(unsafe_file(format!("its mode is {mode:o}, not 600")));
    }
    Ok(meta.len())
}

/// What a locator file says: where a segment's memfd is and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Locator {
    /// The owner's pid.
    pub(crate) pid: u64,
    /// The memfd's descriptor number in the owner.
    pub(crate) fd: u64,
    /// The segment's length in bytes.
    pub(crate) len: u64,
}

impl Locator {
    const MAGIC: u64 = u64::from_le_bytes(*b"sodeloc1");
    /// Bytes of a locator file.
    pub(crate) const LEN: u64 = 32;

    pub(crate) fn to_bytes(self) -> [u8; Self::LEN as usize] {
        let mut b = [0u8; Self::LEN as usize];
        for (i, w) in [Self::MAGIC, self.pid, self.fd, self.len]
            .iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn from_bytes(b: &[u8; Self::LEN as usize]) -> Option<Locator> {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        (word(0) == Self::MAGIC).then(|| Locator {
            pid: word(1),
            fd: word(2),
            len: word(3),
        })
    }

    /// Reads the locator at `path`: `Ok(None)` while it does not exist; a
    /// symlink, another user's file, a wrong mode, length or content is
    /// refused.
    fn read(path: &Path, peer: usize) -> Result<Option<Locator>> {
        let refuse = |why: String| ShmError::UnsafeSegment {
            path: path.to_path_buf(),
            why,
        };
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(refuse("it is a symlink".into()))
            }
            Err(source) => {
                return Err(ShmError::MapPeer {
                    peer,
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let len = check_private_file(&file, path)?;
        if len != Locator::LEN {
            return Err(refuse(format!(
                "it is {len} bytes, not a {}-byte segment locator",
                Locator::LEN
            )));
        }
        let mut bytes = [0u8; Locator::LEN as usize];
        file.read_exact(&mut bytes)
            .map_err(|e| refuse(format!("cannot read it ({e})")))?;
        Locator::from_bytes(&bytes)
            .map(Some)
            .ok_or_else(|| refuse("it is not a sode segment locator".into()))
    }
}

/// A job's directory, kept by this process while anything holds it: a
/// segment, a context, or the job's [`World`](sode_job::World) (see
/// [`crate::Context::from_world`]). It is removed (when empty) only after
/// the last, so it does not vanish between two exchanges of a job, when
/// another user could make a directory of the same name (which every later
/// exchange would refuse, as it must).
#[derive(Debug, Clone)]
pub(crate) struct JobDirHold {
    _held: Arc<HeldDir>,
}

#[derive(Debug)]
struct HeldDir {
    path: PathBuf,
    /// The directory, open with a shared `flock` while held: a lock every
    /// live holder of any process keeps, and the kernel drops with a
    /// process however it ends, so an exclusive one is granted only when
    /// no live process holds the directory.
    lock: Flock<File>,
    /// Where the handler of the signals that end jobs finds it, if it has
    /// room.
    at_signal: Option<usize>,
    /// Let go of early, its job having failed: not handed to a later
    /// holder, who takes a lock of its own.
    failed: std::sync::atomic::AtomicBool,
}

impl HeldDir {
    /// Clears and removes the directory when no other process holds it.
    /// Our shared lock is given up either way: a failed conversion drops
    /// it (flock(2)), so that of the processes releasing a directory at
    /// once, the last to try finds no other holder.
    fn release(&self) {
        // The last holder of every process clears what killed ranks left
        // (their locators), then removes the directory; while others hold
        // it, removing fails on their segments or is left to them.
        // Not through a name another made since an earlier release here
        // removed the directory.
        if self.lock.relock(FlockArg::LockExclusiveNonblock).is_ok()
            && still_at(&self.lock, &self.path)
        {
            clear_dir(&self.path);
            let _ = std::fs::remove_dir(&self.path);
        }
    }

    /// Lets go early, the job having failed (see
    /// [`JobDirHold::release_when_failed`]).
    fn release_failed(&self) {
        self.failed
            .store(true, std::sync::atomic::Ordering::Release);
        self.release();
    }
}

impl JobDirHold {
    /// Whether this process let go of the directory early, its job having
    /// failed ([`JobDirHold::release_when_failed`]): it must not make the
    /// directory again, which nothing would then remove.
    fn released(&self) -> bool {
        self._held.failed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// What lets go of the directory early, as its last holder's drop
    /// would, once the job has failed: a failed job sets up no more
    /// exchanges (its `World` takes no step), so nothing needs the
    /// directory, and its ranks may end through paths that run no exit
    /// hook (`MPI_Abort`). Exchanges set up already run on without it.
    pub(crate) fn release_when_failed(&self, world: &sode_job::World) {
        let held = Arc::downgrade(&self._held);
        world.when_failed(move || {
            if let Some(h) = held.upgrade() {
                h.release_failed();
            }
        });
    }
}

impl Drop for HeldDir {
    fn drop(&mut self) {
        if let Some(slot) = self.at_signal {
            crate::sys::ending_signal::forget(slot);
        }
        self.release();
    }
}

/// Releases the directories this process still holds when it exits
/// without having freed what holds them: a C or Fortran program that
/// ends with its exchanges and communicators alive, as many do, would
/// otherwise leave the job's directory until a later job's sweep. Runs in
/// the exiting thread while others may still run, so it takes no lock
/// another thread could hold. Not run in a child forked from this
/// process, which shares its locks (`sode_job::run_at_exit`).
fn release_held_at_exit(_status: Option<i32>) {
    let Ok(held) = HELD.try_lock() else {
        return;
    };
    for h in held.iter().filter_map(Weak::upgrade) {
        h.release();
    }
}

/// Registers [`release_held_at_exit`] once a process, and the handler
/// that releases them when a signal ends the process.
fn release_at_end() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        crate::sys::ending_signal::install();
        if !sode_job::run_at_exit(release_held_at_exit) {
            tracing::debug!("no room for an exit hook: a job directory held at exit is left to the next job's sweep");
        }
    });
}

/// `file` locked as `how` (a non-blocking kind), retrying while another
/// process holds a lock in the way, for up to `wait`.
pub(crate) fn flock_within(
    mut file: File,
    how: FlockArg,
    wait: std::time::Duration,
) -> std::result::Result<Flock<File>, nix::errno::Errno> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match Flock::lock(file, how) {
            Ok(lock) => return Ok(lock),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < deadline => {
                file = f;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err((_, errno)) => return Err(errno),
        }
    }
}

/// The directory `path`, open for locking; not through a symlink.
fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
}

/// Opens the directory `path` (not a symlink) with a shared lock, waiting
/// out a sweep or a last holder clearing it (an exclusive lock held for
/// the time of a few unlinks) up to a second.
fn lock_dir(path: &Path) -> Result<Flock<File>> {
    let fail = |source: io::Error| ShmError::CreateSegment {
        path: path.to_path_buf(),
        hint: String::new(),
        source,
    };
    let file = open_dir(path).map_err(fail)?;
    flock_within(
        file,
        FlockArg::LockSharedNonblock,
        std::time::Duration::from_secs(1),
    )
    .map_err(|errno| fail(io::Error::from(errno)))
}

/// Whether the open directory `lock` is still the one at `path` (a sweep
/// or a last holder may have removed it between the open and the lock).
fn still_at(lock: &Flock<File>, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (lock.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Removes the regular files of ours in the job directory `path` (the
/// locators of ranks no live process holds the directory for).
fn clear_dir(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.file_type().is_file() && meta.uid() == me {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Removes this user's job directories under `parent` (but `except`) that
/// no live process holds: those of jobs whose processes were killed, with
/// the locators they left. Returns how many it removed.
pub(crate) fn sweep_stale_job_dirs(parent: &Path, except: &Path) -> usize {
    let prefix = format!("sode-{}-", nix::unistd::geteuid());
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix));
        // The same checks as a job's own directory: ours, 0700, no symlink.
        if !ours || path == except || ensure_existing_job_dir(&path).is_err() {
            continue;
        }
        let Ok(file) = open_dir(&path) else {
            continue;
        };
        if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            if still_at(&lock, &path) {
                clear_dir(&path);
                if std::fs::remove_dir(&path).is_ok() {
                    tracing::debug!(path = %path.display(), "removed a job directory no live process held");
                    removed += 1;
                }
            }
        }
    }
    removed
}

/// The parent directories this process has swept.
static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The holds of this process, by directory.
static HELD: Mutex<Vec<Weak<HeldDir>>> = Mutex::new(Vec::new());

/// Makes sure of the job directory `path` (see [`ensure_job_dir`]) and
/// holds it.
pub(crate) fn hold_job_dir(path: &Path) -> Result<JobDirHold> {
    let mut held = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    held.retain(|w| w.strong_count() > 0);
    ensure_job_dir(path)?;
    if let Some(h) = held
        .iter()
        .filter_map(Weak::upgrade)
        .find(|h| h.path == path && !h.failed.load(std::sync::atomic::Ordering::Acquire))
    {
        return Ok(JobDirHold { _held: h });
    }
    let mut attempts = 0;
    let lock = loop {
        let lock = lock_dir(path)?;
        if still_at(&lock, path) || attempts == 100 {
            break lock;
        }
        // Removed between our making sure of it and locking it: again.
        attempts += 1;
        ensure_job_dir(path)?;
    };
    release_at_end();
    let at_signal =
        crate::sys::ending_signal::remember(std::os::fd::AsRawFd::as_raw_fd(&*lock), path);
    let h = Arc::new(HeldDir {
        path: path.to_path_buf(),
        lock,
        at_signal,
        failed: std::sync::atomic::AtomicBool::new(false),
    });
    held.push(Arc::downgrade(&h));
    drop(held);
    if let Some(parent) = path.parent() {
        let mut swept = SWEPT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !swept.iter().any(|p| p == parent) {
            swept.push(parent.to_path_buf());
            sweep_stale_job_dirs(parent, path);
        }
    }
    Ok(JobDirHold { _held: h })
}

/// This process's own segment; removes its locator and closes its memfd
/// on drop if still there.
#[derive(Debug)]
pub(crate) struct OwnSegment {
    pub(crate) map: SharedMap,
    /// The job's directory, kept while the segment lives.
    _dir: JobDirHold,
    /// Open until every peer has mapped the segment: peers reach the memory
    /// through this descriptor.
    memfd: Option<File>,
    /// What its locator says.
    locator: Locator,
    tmp: PathBuf,
    path: PathBuf,
    published: bool,
    unlinked: bool,
}

/// Renames the locator `tmp` (saying `at`) to `path`, its final name. When
/// a cleanup removed the job's directory with `tmp` in it since it was
/// written, writes it again first, unless this process let go of the
/// directory (`held`), its job having failed.
fn list_under(tmp: &Path, path: &Path, at: Locator, held: &JobDirHold) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut attempts = 0;
    loop {
        match std::fs::rename(tmp, path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 100 && !held.released() => {
                attempts += 1;
                write_locator(tmp, dir, at)?;
            }
            other => {
                return other.map_err(|source| ShmError::CreateSegment {
                    path: path.to_path_buf(),
                    hint: String::new(),
                    source,
                })
            }
        }
    }
}

/// Writes locator `at` to the new file `tmp` in the job's directory `dir`,
/// which is made again when another process removed it meanwhile. A
/// locator that cannot be written whole is removed.
fn write_locator(tmp: &Path, dir: &Path, at: Locator) -> Result<()> {
    let fail = |source: io::Error| ShmError::CreateSegment {
        hint: hint_for(&source, dir),
        path: tmp.to_path_buf(),
        source,
    };
    // Another rank's process may remove the (empty) job directory between
    // our making sure of it and creating the file: make sure again.
    let mut attempts = 0;
    let mut file = loop {
        ensure_job_dir(dir)?;
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(tmp);
        match created {
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 100 => attempts += 1,
            other => break other.map_err(fail)?,
        }
    };
    file.write_all(&at.to_bytes()).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        fail(e)
    })
}

fn hint_for(err: &io::Error, dir: &Path) -> String {
    match err.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::ENOMEM) => format!(
            "; out of memory or space (shared memory is limited by the cgroup, and {} by its size): free some or shrink the exchange",
            dir.display()
        ),
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => format!(
            "; {} is not writable here: set SODE_SHM_DIR to a writable directory",
            dir.display()
        ),
        Some(libc::ENOENT) => format!(
            "; {} does not exist: set SODE_SHM_DIR to a directory on a local file system",
            dir.display()
        ),
        _ => String::new(),
    }
}

/// Whether `pid` names a live process (not one that has ended, zombie or
/// reaped; a zombie main thread with threads left is alive).
pub(crate) fn process_alive(pid: i32) -> bool {
    pid > 0
        && std::fs::read(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !crate::sys::process::stat_says_ended(&stat))
}

/// A sealed memfd of `len` bytes: it can never be resized again.
fn sealed_memfd(len: u64, name: &Path, dir: &Path) -> Result<File> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fail = |source: io::Error| ShmError::CreateSegment {
        hint: hint_for(&source, dir),
        path: name.to_path_buf(),
        source,
    };
    let fd = memfd_create(
        c"sode-segment",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|e| fail(e.into()))?;
    let file = File::from(fd);
    file.set_len(len).map_err(fail)?;
    fcntl(&file, FcntlArg::F_ADD_SEALS(required_seals())).map_err(|e| fail(e.into()))?;
    Ok(file)
}

impl OwnSegment {
    /// Lets go of the job's directory early: a peer process of the job
    /// died, so the job has failed (see
    /// [`JobDirHold::release_when_failed`]; this is the same, for a death
    /// the data path finds before the job's health watcher).
    pub(crate) fn job_failed(&self) {
        self._dir._held.release_failed();
    }

    /// Creates a sealed segment of `len` bytes and its locator under a
    /// temporary name next to `path`.
    pub(crate) fn create(path: PathBuf, len: u64) -> Result<OwnSegment> {
        use std::os::fd::AsRawFd;
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let fail = |source: io::Error, at: &Path| ShmError::CreateSegment {
            hint: hint_for(&source, &dir),
            path: at.to_path_buf(),
            source,
        };
        let memfd = sealed_memfd(len, &path, &dir)?;
        let map = SharedMap::map_sealed(&memfd, len as usize).map_err(|e| fail(e, &path))?;
        let held = hold_job_dir(&dir)?;
        let at = Locator {
            pid: u64::from(std::process::id()),
            fd: memfd.as_raw_fd() as u64,
            len,
        };
        write_locator(&tmp, &dir, at)?;
        Ok(OwnSegment {
            map,
            memfd: Some(memfd),
            locator: at,
            tmp,
            path,
            published: false,
            unlinked: false,
            _dir: held,
        })
    }

    /// Where the published segment is listed, to list it again should
    /// its name go during the setup ([`Listing::relist_if_gone`]).
    pub(crate) fn listing(&self) -> Listing {
        Listing {
            tmp: self.tmp.clone(),
            path: self.path.clone(),
            locator: self.locator,
            held: self._dir.clone(),
        }
    }

    /// Makes the segment visible under its final name. A leftover locator
    /// of a dead process is replaced; one of a live process is a collision.
    pub(crate) fn publish(&mut self) -> Result<()> {
        if let Ok(Some(old)) = Locator::read(&self.path, usize::MAX) {
            if old.pid != u64::from(std::process::id()) && process_alive(old.pid as i32) {
                return Err(ShmError::SegmentCollision {
                    path: self.path.clone(),
                    pid: old.pid,
                });
            }
        }
        list_under(&self.tmp, &self.path, self.locator, &self._dir)?;
        self.published = true;
        Ok(())
    }

    /// Removes the locator, and the job's directory once it is empty, and
    /// closes the memfd; the mapping stays valid.
    pub(crate) fn unlink(&mut self) {
        if !self.unlinked {
            let _ = std::fs::remove_file(if self.published {
                &self.path
            } else {
                &self.tmp
            });
            // After the locator: nobody can be sent to a reused number.
            self.memfd = None;
            self.unlinked = true;
        }
    }
}

/// Where a published segment is listed: its locator's name and content.
#[derive(Debug)]
pub(crate) struct Listing {
    tmp: PathBuf,
    path: PathBuf,
    locator: Locator,
    /// The job's directory, held.
    held: JobDirHold,
}

impl Listing {
    /// Lists the segment again under its name when the name went while
    /// peers may still look for it: a cleanup of the shared-memory
    /// directory (a site's script, `rm -rf /dev/shm/*`) removed the job's
    /// directory during the setup, and peers would otherwise wait out
    /// their setup timeout for a locator that will not come. Nothing while
    /// the name is there. Called only before the owner unlinks the
    /// segment, whose memfd stays open until then.
    ///
    /// # Errors
    ///
    /// As [`OwnSegment::create`], for the new locator.
    pub(crate) fn relist_if_gone(&self) -> Result<()> {
        // A job that failed has let go of its directory, cleared: nothing
        // would remove one made again.
        if self.held.released() || path_exists(&self.path) {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        // Said once a process: a cleanup that runs on may remove many.
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                path = %self.path.display(),
                "this rank's shared-memory locator was removed during the setup (a cleanup of {}?): listed again, as it will be whenever that happens",
                dir.parent().unwrap_or(dir).display()
            );
        } else {
            tracing::debug!(path = %self.path.display(), "locator removed during the setup: listed again");
        }
        let _ = std::fs::remove_file(&self.tmp);
        write_locator(&self.tmp, dir, self.locator)?;
        let listed = list_under(&self.tmp, &self.path, self.locator, &self.held);
        if self.held.released() {
            // The job failed meanwhile, its directory cleared before this
            // made it again: take back what this made.
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(&self.tmp);
            let _ = std::fs::remove_dir(dir);
        }
        listed
    }
}

impl Drop for OwnSegment {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// Checks a peer's memfd before it is mapped: a regular file of ours,
/// sealed against resizing, exactly as long as its locator says.
fn check_memfd(file: &File, at: &Locator, path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| ShmError::UnsafeSegment {
        path: path.to_path_buf(),
        why,
    };
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot inspect its memory ({e})")))?;
    if !meta.file_type().is_file() {
        return Err(refuse("its memory is not a regular file".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refuse(format!(
            "its memory belongs to uid {}, not to this user (uid {me})",
            meta.uid()
        )));
    }
    let seals = fcntl(file, FcntlArg::F_GET_SEALS)
        .ok()
        .map_or(SealFlag::empty(), SealFlag::from_bits_truncate);
    if !seals.contains(required_seals()) {
        return Err(refuse(
            "its memory is not sealed against resizing (it could be truncated under our mapping)"
                .into(),
        ));
    }
    if meta.len() != at.len || at.len < layout::HEADER_LEN {
        return Err(refuse(format!(
            "its memory is {} bytes, but the locator says {} (at least {} needed)",
            meta.len(),
            at.len,
            layout::HEADER_LEN
        )));
    }
    Ok(())
}

/// Whether the process of `owner` is exiting: a killed process closes its
/// descriptors (a peer finds its segment's gone) a moment before its
/// handle reports the exit, so this waits that moment, a bounded one.
fn exiting(owner: &Process) -> bool {
    let until = Instant::now() + Duration::from_millis(200);
    let mut backoff = sode_job::Backoff::setup(Duration::from_millis(2));
    loop {
        match owner.exited() {
            Ok(true) => return true,
            Ok(false) if Instant::now() < until => backoff.snooze(),
            _ => return false,
        }
    }
}

/// Opens and maps a peer's published segment; `Ok(None)` while its locator
/// does not exist yet. The locator must be a regular file of ours, mode
/// 0600, not a symlink; the memory a sealed memfd of ours, of a process that
/// stayed alive while we opened it, exactly as long as its header says.
pub(crate) fn open_peer(path: &Path, peer: usize) -> Result<Option<SharedMap>> {
    let Some(at) = Locator::read(path, peer)? else {
        return Ok(None);
    };
    let err = |source: io::Error| ShmError::MapPeer {
        peer,
        path: path.to_path_buf(),
        source,
    };
    let pid = i32::try_from(at.pid).map_err(|_| ShmError::UnsafeSegment {
        path: path.to_path_buf(),
        why: format!("its owner pid {} is out of range", at.pid),
    })?;
    // A locator whose process is gone is a peer that died after it
    // published (its segment went with it): said as such, not as the
    // system error that finding it gone gave.
    let died = || ShmError::PeerDied {
        peer,
        pid,
        during: "before we could map its segment".into(),
    };
    // Held from before the open until after it: if the process has not
    // exited by then, the pid was its own all along.
    let owner = Process::open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => died(),
        _ => err(e),
    })?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{}", at.fd))
        .map_err(|e| match e.raw_os_error() {
            _ if exiting(&owner) => died(),
            Some(libc::EACCES | libc::EPERM) => ShmError::PeerClosed {
                peer,
                pid,
                source: e,
            },
            _ => err(e),
        })?;
    check_memfd(&file, &at, path)?;
    if owner.exited().map_err(err)? {
        return Err(died());
    }
    let map = SharedMap::map_sealed(&file, at.len as usize).map_err(err)?;
    let announced = map.read_u64(layout::H_TOTAL).unwrap_or(0);
    let owner_pid = map.read_u64(layout::H_PID).unwrap_or(0);
    if announced != at.len || owner_pid != at.pid {
        return Err(ShmError::UnsafeSegment {
            path: path.to_path_buf(),
            why: format!(
                "its header announces {announced} bytes of pid {owner_pid}, its locator {} bytes of pid {}",
                at.len, at.pid
            ),
        });
    }
    Ok(Some(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> PathBuf {
        std::env::temp_dir()
    }

    /// A segment of ours with its header written and published.
    fn published(job: &str, len: u64) -> (OwnSegment, PathBuf) {
        let path = segment_path(&dir(), &format!("{job}{}", std::process::id()), "m", 0);
        let mut seg = OwnSegment::create(path.clone(), len).unwrap();
        seg.map
            .write_u64(layout::H_PID, u64::from(std::process::id()))
            .unwrap();
        seg.map.write_u64(layout::H_TOTAL, len).unwrap();
        seg.publish().unwrap();
        (seg, path)
    }

    #[test]
    fn segments_are_private_to_the_user_and_unlinked() {
        let (mut seg, path) = published("unit", 8192);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let peer = open_peer(&path, 0).unwrap().expect("published");
        peer.write_u64(layout::HEADER_LEN, 42).unwrap();
        assert_eq!(seg.map.read_u64(layout::HEADER_LEN).unwrap(), 42);
        seg.unlink();
        assert!(!path.exists());
        // The mapping outlives the name and the descriptor.
        assert_eq!(
            seg.map.read_u64(layout::H_PID).unwrap(),
            u64::from(std::process::id())
        );
        // The empty job directory goes with the segment, its last holder.
        let dir = path.parent().unwrap().to_path_buf();
        assert!(dir.exists());
        drop(seg);
        assert!(!dir.exists(), "the empty job directory");
    }

    fn write_locator(path: &Path, at: Locator, mode: u32) {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .unwrap();
        f.write_all(&at.to_bytes()).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_live_owner_is_a_collision_and_a_dead_one_is_replaced() {
        let path = segment_path(&dir(), &format!("unit{}", std::process::id()), "c", 1);
        let owner = |pid: u64| Locator {
            pid,
            fd: 3,
            len: 4096,
        };
        // Held, as a job holds it: a sweep by another test leaves it.
        let hold = hold_job_dir(path.parent().unwrap()).unwrap();
        // pid 1 is always alive.
        write_locator(&path, owner(1), 0o600);
        let mut seg = OwnSegment::create(path.clone(), 4096).unwrap();
        assert!(matches!(
            seg.publish(),
            Err(ShmError::SegmentCollision { pid: 1, .. })
        ));
        drop(seg);
        // A pid that cannot exist.
        let _ = std::fs::remove_file(&path);
        write_locator(&path, owner(i32::MAX as u64), 0o600);
        let mut seg = OwnSegment::create(path.clone(), 4096).unwrap();
        seg.publish().unwrap();
        drop(seg);
        assert!(!path.exists());
        drop(hold);
        assert!(!path.parent().unwrap().exists());
    }

    /// A peer's locator path with `make` run on it, then what `open_peer`
    /// says.
    fn open_planted(name: &str, make: impl FnOnce(&Path)) -> Result<Option<SharedMap>> {
        let path = segment_path(
            &dir(),
            &format!("plant{}-{name}", std::process::id()),
            "x",
            1,
        );
        let hold = hold_job_dir(path.parent().unwrap()).unwrap();
        make(&path);
        let got = open_peer(&path, 1);
        let _ = std::fs::remove_file(&path);
        drop(hold);
        got
    }

    /// A memfd of ours, `len` bytes, its header announcing `announced`,
    /// sealed or not; with a locator naming it.
    fn memfd(len: u64, announced: u64, sealed: bool) -> (File, Locator) {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let f = File::from(memfd_create(c"plant", MFdFlags::MFD_ALLOW_SEALING).unwrap());
        f.set_len(len).unwrap();
        use std::os::unix::fs::FileExt;
        if len >= layout::HEADER_LEN {
            f.write_all_at(&announced.to_le_bytes(), layout::H_TOTAL)
                .unwrap();
            f.write_all_at(&u64::from(std::process::id()).to_le_bytes(), layout::H_PID)
                .unwrap();
        }
        if sealed {
            fcntl(&f, FcntlArg::F_ADD_SEALS(required_seals())).unwrap();
        }
        let at = Locator {
            pid: u64::from(std::process::id()),
            fd: f.as_raw_fd() as u64,
            len,
        };
        (f, at)
    }

    fn refusal(r: Result<Option<SharedMap>>) -> String {
        match r {
            Err(ShmError::UnsafeSegment { why, .. }) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn planted_locators_are_refused() {
        let (_good, at) = memfd(8192, 8192, true);
        let target = std::env::temp_dir().join(format!("sode-target-{}", std::process::id()));
        write_locator(&target, at, 0o600);
        let w = refusal(open_planted("link", |p| {
            std::os::unix::fs::symlink(&target, p).unwrap()
        }));
        assert!(w.contains("symlink"), "{w}");
        let _ = std::fs::remove_file(&target);
        let w = refusal(open_planted("mode", |p| write_locator(p, at, 0o644)));
        assert!(w.contains("mode is 644"), "{w}");
        let w = refusal(open_planted("fifo", |p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }));
        assert!(w.contains("not a regular file"), "{w}");
        let w = refusal(open_planted("short", |p| {
            write_locator(p, at, 0o600);
            OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(16)
                .unwrap();
        }));
        assert!(w.contains("not a 32-byte segment locator"), "{w}");
        let w = refusal(open_planted("magic", |p| {
            std::fs::write(p, [7u8; 32]).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }));
        assert!(w.contains("not a sode segment locator"), "{w}");
        // Another user's locator in our directory: only root can make one
        // for the test.
        let foreign = open_planted("foreign", |p| {
            write_locator(p, at, 0o600);
            let _ = std::os::unix::fs::chown(p, Some(65534), Some(65534));
        });
        if nix::unistd::geteuid().is_root() {
            let w = refusal(foreign);
            assert!(w.contains("belongs to uid 65534"), "{w}");
        }
        assert!(open_planted("good", |p| write_locator(p, at, 0o600))
            .unwrap()
            .is_some());
    }

    #[test]
    fn memory_that_could_be_resized_or_is_not_as_announced_is_refused() {
        let refused = |at: Locator| refusal(open_planted("mem", |p| write_locator(p, at, 0o600)));
        let (_unsealed, at) = memfd(8192, 8192, false);
        let w = refused(at);
        assert!(w.contains("not sealed against resizing"), "{w}");
        // A regular file (of ours, 0600) cannot carry seals at all.
        let plain = std::env::temp_dir().join(format!("sode-plain-{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&plain)
            .unwrap();
        file.set_len(8192).unwrap();
        let _ = std::fs::remove_file(&plain);
        let w = refused(Locator {
            pid: u64::from(std::process::id()),
            fd: file.as_raw_fd() as u64,
            len: 8192,
        });
        assert!(w.contains("not sealed"), "{w}");
        let (_lying, at) = memfd(8192, 4096, true);
        let w = refused(at);
        assert!(w.contains("announces 4096"), "{w}");
        let (_small, at) = memfd(16, 16, true);
        let w = refused(at);
        assert!(w.contains("at least 256 needed"), "{w}");
        let (_sized, at) = memfd(8192, 8192, true);
        let w = refused(Locator { len: 4096, ..at });
        assert!(w.contains("the locator says 4096"), "{w}");
        // A pid that does not exist: a peer that died after it published.
        let (_gone, at) = memfd(8192, 8192, true);
        let gone = open_planted("gone", |p| {
            write_locator(
                p,
                Locator {
                    pid: i32::MAX as u64,
                    ..at
                },
                0o600,
            )
        });
        assert!(
            matches!(
                gone,
                Err(ShmError::PeerDied {
                    peer: 1,
                    pid: i32::MAX,
                    ..
                })
            ),
            "{gone:?}"
        );
    }

    /// `truncate -s 0` on a descriptor of another process, run as a separate
    /// process of the same user: whether it succeeded.
    fn truncate_from_another_process(fd: u64) -> bool {
        std::process::Command::new("truncate")
            .args(["-s", "0", &format!("/proc/{}/fd/{fd}", std::process::id())])
            .stderr(std::process::Stdio::null())
            .status()
            .expect("coreutils truncate")
            .success()
    }

    #[test]
    fn a_mapped_segment_cannot_be_truncated_by_another_process() {
        let (seg, path) = published("trunc", 1 << 20);
        let peer = open_peer(&path, 0).unwrap().expect("published");
        let at = Locator::read(&path, 0).unwrap().unwrap();
        assert!(
            !truncate_from_another_process(at.fd),
            "the kernel must refuse to shrink a sealed segment"
        );
        // Every byte of both mappings is still there (a truncation would have
        // raised SIGBUS here).
        let last = (1 << 20) - 8;
        seg.map.write_u64(last, 7).unwrap();
        assert_eq!(peer.read_u64(last).unwrap(), 7);
        // The same command does shrink memory that is not sealed, so the
        // check above can fail.
        let (unsealed, at) = memfd(8192, 8192, false);
        assert!(truncate_from_another_process(at.fd));
        assert_eq!(unsealed.metadata().unwrap().len(), 0);
    }

    #[test]
    fn the_job_directory_stays_while_held_and_goes_with_the_last_hold() {
        let path = job_dir(&dir(), &format!("held{}", std::process::id()));
        let world_hold = hold_job_dir(&path).unwrap();
        let seg = OwnSegment::create(path.join("h0-r0"), 4096).unwrap();
        drop(seg);
        // Between two exchanges: the job's own hold keeps the directory.
        assert!(path.is_dir(), "the directory went with the segment");
        let again = hold_job_dir(&path).unwrap();
        drop(world_hold);
        assert!(path.is_dir(), "a second hold keeps it");
        drop(again);
        assert!(!path.exists(), "the last hold removes it");
    }

    #[test]
    fn the_signal_handlers_release_clears_and_removes_the_directory_of_its_last_holder() {
        let path = job_dir(&dir(), &format!("signalled{}", std::process::id()));
        let hold = hold_job_dir(&path).unwrap();
        let slot = hold._held.at_signal.expect("a slot for the handler");
        // What a setup in flight leaves: a locator of ours; and a
        // directory, which neither release removes (nor the one above).
        std::fs::write(path.join("h0-r0"), b"locator").unwrap();
        std::fs::create_dir(path.join("sub")).unwrap();
        let other = hold_job_dir(&path).unwrap();
        // Another process holding it: a second lock of the directory.
        let theirs = lock_dir(&path).unwrap();
        crate::sys::ending_signal::release(slot);
        assert!(path.join("h0-r0").exists(), "released under another holder");
        drop(theirs);
        // Our shared lock went with the failed conversion; take it again.
        drop((hold, other));
        let hold = hold_job_dir(&path).unwrap();
        let slot = hold._held.at_signal.expect("a slot for the handler");
        std::fs::write(path.join("h0-r1"), b"locator").unwrap();
        crate::sys::ending_signal::release(slot);
        assert!(path.is_dir(), "removed with a directory in it");
        assert!(!path.join("h0-r1").exists(), "the locator was not cleared");
        std::fs::remove_dir(path.join("sub")).unwrap();
        crate::sys::ending_signal::release(slot);
        assert!(
            !path.exists(),
            "the last holder's release leaves the directory"
        );
        drop(hold);
    }

    #[test]
    fn job_directories_no_live_process_holds_are_swept() {
        use std::os::unix::fs::PermissionsExt;
        // A parent of its own, so that no other test's directories are in it.
        let parent = dir().join(format!("sweep{}", std::process::id()));
        std::fs::create_dir_all(&parent).unwrap();
        let dead = Locator {
            pid: i32::MAX as u64,
            fd: 3,
            len: 4096,
        };
        // A killed job's directory, with the locator it left; an empty one
        // (a process that ended without dropping its hold); one that is not
        // a job directory (mode 755); one that is not sode's.
        let killed = job_dir(&parent, "killed");
        ensure_job_dir(&killed).unwrap();
        write_locator(&killed.join("x-r1"), dead, 0o600);
        let empty = job_dir(&parent, "empty");
        ensure_job_dir(&empty).unwrap();
        let open = job_dir(&parent, "open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let other = parent.join("not-sode");
        std::fs::create_dir(&other).unwrap();
        // Holding a job directory sweeps its parent, once per process.
        let live = job_dir(&parent, "live");
        let hold = hold_job_dir(&live).unwrap();
        assert!(
            !killed.exists() && !empty.exists(),
            "stale directories stay"
        );
        assert!(
            open.is_dir() && other.is_dir(),
            "a directory not sode's was removed"
        );
        // Another process holding a directory keeps it; killed, it does not.
        let held = job_dir(&parent, "held");
        ensure_job_dir(&held).unwrap();
        write_locator(&held.join("x-r0"), dead, 0o600);
        // The lock on descriptor 9, which `sleep` keeps: killing it ends
        // the only holder.
        let mut holder = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec 9<\"$0\" && flock -s 9 && exec sleep 60")
            .arg(&held)
            .spawn()
            .expect("sh, and flock(1) from util-linux");
        // Until the child has its lock (ours cannot become exclusive).
        let t0 = std::time::Instant::now();
        while lock_dir(&held)
            .unwrap()
            .relock(FlockArg::LockExclusiveNonblock)
            .is_ok()
        {
            assert!(t0.elapsed().as_secs() < 10, "flock never took the lock");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(sweep_stale_job_dirs(&parent, Path::new("")), 0);
        assert!(
            held.is_dir(),
            "a directory another process holds was removed"
        );
        assert!(held.join("x-r0").exists() && live.is_dir());
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert_eq!(sweep_stale_job_dirs(&parent, Path::new("")), 1);
        assert!(!held.exists(), "a killed holder's directory stays");
        // The last hold of the live job removes its directory.
        drop(hold);
        assert!(!live.exists());
        std::fs::remove_dir(&open).unwrap();
        std::fs::remove_dir(&other).unwrap();
        std::fs::remove_dir(&parent).unwrap();
    }

    #[test]
    fn the_last_holder_clears_what_killed_ranks_left() {
        let path = job_dir(&dir(), &format!("last{}", std::process::id()));
        let hold = hold_job_dir(&path).unwrap();
        // A rank killed during setup left its locator.
        let left = path.join("x-r3");
        let dead = Locator {
            pid: i32::MAX as u64,
            fd: 3,
            len: 4096,
        };
        write_locator(&left, dead, 0o600);
        drop(hold);
        assert!(
            !path.exists(),
            "the directory stays with a killed rank's locator"
        );
    }

    #[test]
    fn a_job_directory_made_by_another_user_is_refused() {
        let path = job_dir(&dir(), &format!("foreign{}", std::process::id()));
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Another user's directory under our job's name: only root can make
        // one for the test; elsewhere a wrong mode stands in for it.
        let foreign = std::os::unix::fs::chown(&path, Some(65534), Some(65534)).is_ok();
        if !foreign {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let e = ensure_job_dir(&path).unwrap_err().to_string();
        assert!(
            if foreign {
                e.contains("belongs to uid 65534")
            } else {
                e.contains("mode is 777")
            },
            "{e}"
        );
        let created = OwnSegment::create(path.join("x-r0"), 4096);
        assert!(
            matches!(created, Err(ShmError::UnsafeSegment { .. })),
            "{created:?}"
        );
        std::fs::remove_dir(&path).unwrap();
        // A symlink under the job's name, to a directory of ours.
        let elsewhere = std::env::temp_dir().join(format!("sode-elsewhere-{}", std::process::id()));
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let e = ensure_job_dir(&path).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir(&elsewhere).unwrap();
    }

    #[test]
    fn zombie_and_missing_processes_are_not_alive() {
        assert!(process_alive(std::process::id() as i32));
        assert!(!process_alive(i32::MAX));
        assert!(!process_alive(0));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!process_alive(pid), "an exited, unreaped child is a zombie");
        child.wait().unwrap();
    }
}
