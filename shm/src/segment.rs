//! Segment files: created 0600 under a temporary name, published by an
//! atomic rename once their tables are written, unlinked as soon as every
//! peer has mapped them (after that the kernel frees the memory when the last
//! process unmaps it, including when processes die).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, ShmError};
use crate::layout;
use crate::sys::shared::SharedMap;

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
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
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
    let unsafe_dir = |why: String| ShmError::UnsafeSegment {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| unsafe_dir(format!("cannot inspect it ({e})")))?;
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

/// Checks an open segment file: a regular file of ours, mode 0600.
fn check_segment_file(file: &std::fs::File, path: &Path) -> Result<u64> {
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

/// This process's own segment; removes its file on drop if still there.
#[derive(Debug)]
pub(crate) struct OwnSegment {
    pub(crate) map: SharedMap,
    tmp: PathBuf,
    path: PathBuf,
    published: bool,
    unlinked: bool,
}

fn hint_for(err: &io::Error, dir: &Path) -> String {
    match err.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::ENOMEM) => format!(
            "; {} is full: free space or enlarge it (mount -o remount,size=... {})",
            dir.display(),
            dir.display()
        ),
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => format!(
            "; {} is not writable here: set SODE_SHM_DIR to a writable tmpfs",
            dir.display()
        ),
        Some(libc::ENOENT) => format!(
            "; {} does not exist: set SODE_SHM_DIR to a tmpfs directory",
            dir.display()
        ),
        _ => String::new(),
    }
}

/// Whether `pid` names a live (not zombie) process.
pub(crate) fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

impl OwnSegment {
    pub(crate) fn create(path: PathBuf, len: u64) -> Result<OwnSegment> {
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let fail = |source: io::Error, at: &Path| ShmError::CreateSegment {
            hint: hint_for(&source, &dir),
            path: at.to_path_buf(),
            source,
        };
        // Another rank may remove the (empty) job directory between our
        // making sure of it and creating the file: make sure again.
        let mut attempts = 0;
        let file = loop {
            ensure_job_dir(&dir)?;
            let created = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp);
            match created {
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 100 => attempts += 1,
                other => break other.map_err(|e| fail(e, &tmp))?,
            }
        };
        let mut seg = OwnSegment {
            // Replaced below; a zero-length anonymous map costs nothing.
            map: SharedMap::anonymous(0).map_err(|e| fail(e, &tmp))?,
            tmp: tmp.clone(),
            path,
            published: false,
            unlinked: false,
        };
        file.set_len(len).map_err(|e| fail(e, &tmp))?;
        seg.map = SharedMap::map_file(&file, len as usize).map_err(|e| fail(e, &tmp))?;
        Ok(seg)
    }

    /// Makes the segment visible under its final name. A leftover file of a
    /// dead process is replaced; one of a live process is a collision.
    pub(crate) fn publish(&mut self) -> Result<()> {
        let existing = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path);
        if let Ok(file) = existing {
            check_segment_file(&file, &self.path)?;
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            if len >= layout::HEADER_LEN {
                if let Ok(old) = SharedMap::map_file(&file, layout::HEADER_LEN as usize) {
                    let pid = old.read_u64(layout::H_PID).unwrap_or(0);
                    if pid != std::process::id() as u64 && process_alive(pid as i32) {
                        return Err(ShmError::SegmentCollision {
                            path: self.path.clone(),
                            pid,
                        });
                    }
                }
            }
        }
        std::fs::rename(&self.tmp, &self.path).map_err(|source| ShmError::CreateSegment {
            path: self.path.clone(),
            hint: String::new(),
            source,
        })?;
        self.published = true;
        Ok(())
    }

    /// Removes the file, and the job's directory once it is empty; the
    /// mapping stays valid.
    pub(crate) fn unlink(&mut self) {
        if !self.unlinked {
            let _ = std::fs::remove_file(if self.published {
                &self.path
            } else {
                &self.tmp
            });
            if let Some(dir) = self.path.parent() {
                // Fails while other segments of the job are still in it.
                let _ = std::fs::remove_dir(dir);
            }
            self.unlinked = true;
        }
    }
}

impl Drop for OwnSegment {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// Opens and maps a peer's published segment; `Ok(None)` while it does not
/// exist yet. It must be a regular file of ours, mode 0600, not a symlink,
/// and exactly as long as its header says.
pub(crate) fn open_peer(path: &Path, peer: usize) -> Result<Option<SharedMap>> {
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ShmError::UnsafeSegment {
                path: path.to_path_buf(),
                why: "it is a symlink".into(),
            })
        }
        Err(source) => {
            return Err(ShmError::MapPeer {
                peer,
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let err = |source: io::Error| ShmError::MapPeer {
        peer,
        path: path.to_path_buf(),
        source,
    };
    let len = check_segment_file(&file, path)?;
    if len < layout::HEADER_LEN {
        return Err(ShmError::UnsafeSegment {
            path: path.to_path_buf(),
            why: format!("it is only {len} bytes, less than a segment header"),
        });
    }
    let map = SharedMap::map_file(&file, len as usize).map_err(err)?;
    let announced = map.read_u64(layout::H_TOTAL).unwrap_or(0);
    if announced != len {
        return Err(ShmError::UnsafeSegment {
            path: path.to_path_buf(),
            why: format!("it is {len} bytes but its header announces {announced}"),
        });
    }
    Ok(Some(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn segments_are_private_to_the_user_and_unlinked() {
        let path = segment_path(&dir(), &format!("unit{}", std::process::id()), "m", 0);
        let mut seg = OwnSegment::create(path.clone(), 8192).unwrap();
        seg.map
            .write_u64(layout::H_PID, std::process::id() as u64)
            .unwrap();
        seg.publish().unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        seg.unlink();
        assert!(!path.exists());
        // The mapping outlives the name.
        assert_eq!(
            seg.map.read_u64(layout::H_PID).unwrap(),
            std::process::id() as u64
        );
    }

    #[test]
    fn a_live_owner_is_a_collision_and_a_dead_one_is_replaced() {
        let path = segment_path(&dir(), &format!("unit{}", std::process::id()), "c", 1);
        let write_owner = |pid: u64| {
            ensure_job_dir(path.parent().unwrap()).unwrap();
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            f.set_len(4096).unwrap();
            let m = SharedMap::map_file(&f, 4096).unwrap();
            m.write_u64(layout::H_PID, pid).unwrap();
            m.write_u64(layout::H_TOTAL, 4096).unwrap();
        };
        // pid 1 is always alive.
        write_owner(1);
        let mut seg = OwnSegment::create(path.clone(), 4096).unwrap();
        assert!(matches!(
            seg.publish(),
            Err(ShmError::SegmentCollision { pid: 1, .. })
        ));
        drop(seg);
        // A pid that cannot exist.
        write_owner(i32::MAX as u64);
        let mut seg = OwnSegment::create(path.clone(), 4096).unwrap();
        seg.publish().unwrap();
        drop(seg);
        assert!(!path.exists());
    }

    /// A peer's segment path with `make` run on it, then what `open_peer`
    /// says.
    fn open_planted(name: &str, make: impl FnOnce(&Path)) -> Result<Option<SharedMap>> {
        let path = segment_path(
            &dir(),
            &format!("plant{}-{name}", std::process::id()),
            "x",
            1,
        );
        ensure_job_dir(path.parent().unwrap()).unwrap();
        make(&path);
        let got = open_peer(&path, 1);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(path.parent().unwrap());
        got
    }

    fn file(path: &Path, mode: u32, len: u64, announced: u64) {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .unwrap();
        f.set_len(len).unwrap();
        if len >= layout::HEADER_LEN {
            let m = SharedMap::map_file(&f, len as usize).unwrap();
            m.write_u64(layout::H_TOTAL, announced).unwrap();
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn planted_segments_are_refused_before_mapping() {
        let why = |r: Result<Option<SharedMap>>| match r {
            Err(ShmError::UnsafeSegment { why, .. }) => why,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let target = std::env::temp_dir().join(format!("sode-target-{}", std::process::id()));
        file(&target, 0o600, 8192, 8192);
        let w = why(open_planted("link", |p| {
            std::os::unix::fs::symlink(&target, p).unwrap()
        }));
        assert!(w.contains("symlink"), "{w}");
        let _ = std::fs::remove_file(&target);
        let w = why(open_planted("mode", |p| file(p, 0o644, 8192, 8192)));
        assert!(w.contains("mode is 644"), "{w}");
        let w = why(open_planted("size", |p| file(p, 0o600, 8192, 4096)));
        assert!(w.contains("announces 4096"), "{w}");
        let w = why(open_planted("small", |p| file(p, 0o600, 16, 16)));
        assert!(w.contains("less than a segment header"), "{w}");
        let w = why(open_planted("fifo", |p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }));
        assert!(w.contains("not a regular file"), "{w}");
        assert!(open_planted("good", |p| file(p, 0o600, 8192, 8192))
            .unwrap()
            .is_some());
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
