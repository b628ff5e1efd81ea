//! Threshold probes kept on the node between jobs of one user: a job's
//! first exchange measures the crossovers towards each place its peers run
//! (tens of milliseconds per place, most of a small job's start-up); later
//! jobs on the node, since its last boot, read them here instead.
//!
//! One file per user, `sode-probes-<uid>` in the segment directory
//! (`/dev/shm`, so it goes with a reboot), one line per probe: the boot it
//! was measured in, sode's version, the CPUs measured from and towards, the
//! thresholds and the CPU the responder ran on. It is trusted no more than
//! a locator: created 0600 without following symlinks, refused unless a
//! regular file of ours with that mode, read up to [`MAX_LEN`] bytes, every
//! line checked, anything else ignored. A wrong entry could only choose a
//! slower path, never move data wrongly. `SODE_SHM_PROBE_CACHE=off` leaves
//! the file alone (every job measures).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use crate::segment::{check_private_file, flock_within};
use crate::thresholds::{Measured, Thresholds};

/// The setting that turns the file off.
pub(crate) const CACHE_VAR: &str = "SODE_SHM_PROBE_CACHE";
/// Largest file read; a longer one is started afresh by the next probe.
const MAX_LEN: u64 = 256 * 1024;
/// The format's first word.
const FORMAT: &str = "sode-probe-1";
/// Thresholds beyond this are not a measurement's.
const MAX_THRESHOLD: usize = 1 << 30;
/// How long to wait for another process's lock on the file.
const LOCK_WAIT: Duration = Duration::from_millis(200);

/// The node's probe file for this user and boot.
#[derive(Debug, Clone)]
pub(crate) struct NodeProbes {
    path: PathBuf,
    boot: String,
}

/// One probe, as a line of the file.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    boot: String,
    version: String,
    own: Vec<usize>,
    towards: Vec<usize>,
    eager_max: usize,
    get_min: usize,
    read_min: usize,
    ran_on: Option<usize>,
}

fn cpus(list: &[usize]) -> String {
    if list.is_empty() {
        return "-".into();
    }
    list.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_cpus(text: &str) -> Option<Vec<usize>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|c| c.parse().ok().filter(|&c: &usize| c < 1 << 16))
        .collect()
}

impl Entry {
    fn line(&self) -> String {
        format!(
            "{FORMAT} {} {} {} {} {} {} {} {}\n",
            self.boot,
            self.version,
            cpus(&self.own),
            cpus(&self.towards),
            self.eager_max,
            self.get_min,
            self.read_min,
            self.ran_on.map_or("-".into(), |c| c.to_string())
        )
    }

    /// A line of the file, checked; none for anything else.
    fn parse(line: &str) -> Option<Entry> {
        let w: Vec<&str> = line.split(' ').collect();
        let [format, boot, version, own, towards, eager_max, get_min, read_min, ran_on] = w[..]
        else {
            return None;
        };
        let threshold = |t: &str| t.parse().ok().filter(|&v: &usize| v <= MAX_THRESHOLD);
        let token = |t: &str| {
            (!t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_graphic()))
                .then(|| t.to_string())
        };
        (format == FORMAT).then_some(())?;
        Some(Entry {
            boot: token(boot)?,
            version: token(version)?,
            own: parse_cpus(own)?,
            towards: parse_cpus(towards)?,
            eager_max: threshold(eager_max)?,
            get_min: threshold(get_min)?,
            read_min: threshold(read_min)?,
            ran_on: match ran_on {
                "-" => None,
                c => Some(c.parse().ok().filter(|&c: &usize| c < 1 << 16)?),
            },
        })
    }
}

impl NodeProbes {
    /// The file under `dir` for this boot, unless turned off (or the boot
    /// cannot be told, so that nothing is mistaken across reboots).
    pub(crate) fn at(dir: &Path) -> Option<NodeProbes> {
        if std::env::var(CACHE_VAR).is_ok_and(|v| v.trim() == "off") {
            return None;
        }
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let boot = boot.trim();
        if boot.is_empty() || boot.len() > 64 || !boot.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        Some(NodeProbes {
            path: dir.join(format!("sode-probes-{}", nix::unistd::geteuid())),
            boot: boot.to_string(),
        })
    }

    /// The probe from `own` towards `towards` an earlier job of this boot
    /// and version kept, if any.
    pub(crate) fn find(&self, own: &[usize], towards: &[usize]) -> Option<Measured> {
        let lock = self.open(FlockArg::LockSharedNonblock)?;
        let mut text = String::new();
        let len = lock.metadata().ok()?.len();
        if len > MAX_LEN {
            return None;
        }
        (&*lock).take(MAX_LEN).read_to_string(&mut text).ok()?;
        text.lines()
            .rev()
            .filter_map(Entry::parse)
            .find(|e| {
                e.boot == self.boot
                    && e.version == env!("CARGO_PKG_VERSION")
                    && e.own == own
                    && e.towards == towards
            })
            .map(|e| Measured {
                thresholds: Thresholds {
                    eager_max: e.eager_max,
                    get_min: e.get_min,
                    read_min: e.read_min,
                    measured: true,
                },
                ran_on: e.ran_on,
            })
    }

    /// Keeps a probe for later jobs (measured ones only: a fallback is
    /// what a probe that could not run gives).
    pub(crate) fn keep(&self, own: &[usize], towards: &[usize], measured: &Measured) {
        if !measured.thresholds.measured {
            return;
        }
        let Some(mut lock) = self.open(FlockArg::LockExclusiveNonblock) else {
            return;
        };
        let entry = Entry {
            boot: self.boot.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            own: own.to_vec(),
            towards: towards.to_vec(),
            eager_max: measured.thresholds.eager_max,
            get_min: measured.thresholds.get_min,
            read_min: measured.thresholds.read_min,
            ran_on: measured.ran_on,
        };
        // A long file (many places, or another boot's) starts afresh.
        if lock.metadata().is_ok_and(|m| m.len() > MAX_LEN / 2) {
            let _ = lock.set_len(0);
        }
        if let Err(e) = lock.write_all(entry.line().as_bytes()) {
            tracing::debug!(path = %self.path.display(), "keeping a threshold probe: {e}");
        }
    }

    /// The file, created if need be, checked and locked; none (with a
    /// debug line) when it is not ours to trust or stays locked.
    fn open(&self, how: FlockArg) -> Option<Flock<File>> {
        let opened = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path);
        let skip = |why: String| {
            tracing::debug!(path = %self.path.display(), "threshold probes not kept between jobs: {why}");
        };
        let checked = opened.map_err(|e| e.to_string()).and_then(|f| {
            check_private_file(&f, &self.path)
                .map(|_| f)
                .map_err(|e| e.to_string())
        });
        let locked =
            checked.and_then(|f| flock_within(f, how, LOCK_WAIT).map_err(|e| e.to_string()));
        locked.map_err(skip).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(eager_max: usize) -> Measured {
        Measured {
            thresholds: Thresholds {
                eager_max,
                get_min: 65536,
                read_min: 4096,
                measured: true,
            },
            ran_on: Some(1),
        }
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sode-probefile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn a_probe_kept_by_one_job_serves_the_next_of_the_same_boot() {
        let dir = fresh_dir("keep");
        let file = NodeProbes::at(&dir).expect("a boot id");
        assert!(file.find(&[0, 1], &[2, 3]).is_none());
        file.keep(&[0, 1], &[2, 3], &measured(1024));
        file.keep(&[0, 1], &[4], &measured(256));
        // Another process's view: a new handle on the same file.
        let later = NodeProbes::at(&dir).unwrap();
        let got = later.find(&[0, 1], &[2, 3]).expect("kept");
        assert_eq!(got.thresholds, measured(1024).thresholds);
        assert_eq!(got.ran_on, Some(1));
        assert_eq!(later.find(&[0, 1], &[4]).unwrap().thresholds.eager_max, 256);
        assert!(later.find(&[0], &[2, 3]).is_none(), "from other CPUs");
        // Another boot's or version's lines do not serve.
        let other_boot = NodeProbes {
            boot: "another-boot".into(),
            ..later.clone()
        };
        assert!(other_boot.find(&[0, 1], &[2, 3]).is_none());
        // A fallback (a probe that could not run) is not kept.
        let mut fallback = measured(8);
        fallback.thresholds.measured = false;
        later.keep(&[9], &[9], &fallback);
        assert!(later.find(&[9], &[9]).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_that_do_not_check_out_are_ignored() {
        let dir = fresh_dir("lines");
        let file = NodeProbes::at(&dir).unwrap();
        file.keep(&[0], &[1], &measured(64));
        let boot = &file.boot;
        let version = env!("CARGO_PKG_VERSION");
        let mut f = OpenOptions::new().append(true).open(&file.path).unwrap();
        // Later lines win when valid: none of these is.
        for bad in [
            format!("{FORMAT} {boot} {version} 0 1 999999999999 1 1 -"),
            format!("{FORMAT} {boot} {version} 0 1 1 1 1"),
            format!("{FORMAT} {boot} {version} 0 x 1 1 1 -"),
            format!("other {boot} {version} 0 1 1 1 1 -"),
            "garbage".to_string(),
        ] {
            writeln!(f, "{bad}").unwrap();
        }
        assert_eq!(file.find(&[0], &[1]).unwrap().thresholds.eager_max, 64);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_not_ours_to_trust_is_left_alone() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let dir = fresh_dir("trust");
        let file = NodeProbes::at(&dir).unwrap();
        // Readable by others: not ours to trust.
        std::fs::write(&file.path, measured(64).line_for_test()).unwrap();
        std::fs::set_permissions(&file.path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(file.find(&[0], &[1]).is_none());
        file.keep(&[0], &[1], &measured(64));
        assert_eq!(
            std::fs::metadata(&file.path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        // A symlink planted under its name is not followed.
        std::fs::remove_file(&file.path).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, "").unwrap();
        symlink(&target, &file.path).unwrap();
        file.keep(&[0], &[1], &measured(64));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    impl Measured {
        /// This probe as a line of the current boot, from CPU 0 towards 1.
        fn line_for_test(&self) -> String {
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
            Entry {
                boot: boot.trim().into(),
                version: env!("CARGO_PKG_VERSION").into(),
                own: vec![0],
                towards: vec![1],
                eager_max: self.thresholds.eager_max,
                get_min: self.thresholds.get_min,
                read_min: self.thresholds.read_min,
                ran_on: self.ran_on,
            }
            .line()
        }
    }
}
