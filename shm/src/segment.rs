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

/// The file name of a rank's segment for one exchange of one job.
pub(crate) fn segment_path(dir: &Path, job: &str, exchange: &str, rank: usize) -> PathBuf {
    dir.join(format!("sode-{job}-{exchange}-r{rank}"))
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| fail(e, &tmp))?;
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
        if let Ok(file) = OpenOptions::new().read(true).write(true).open(&self.path) {
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

    /// Removes the file; the mapping stays valid.
    pub(crate) fn unlink(&mut self) {
        if !self.unlinked {
            let _ = std::fs::remove_file(if self.published {
                &self.path
            } else {
                &self.tmp
            });
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
/// exist yet.
pub(crate) fn open_peer(path: &Path, peer: usize) -> Result<Option<SharedMap>> {
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
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
    let len = file.metadata().map_err(err)?.len();
    if len < layout::HEADER_LEN {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("segment is only {len} bytes"),
        )));
    }
    SharedMap::map_file(&file, len as usize)
        .map(Some)
        .map_err(err)
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
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            f.set_len(4096).unwrap();
            SharedMap::map_file(&f, 4096)
                .unwrap()
                .write_u64(layout::H_PID, pid)
                .unwrap();
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
