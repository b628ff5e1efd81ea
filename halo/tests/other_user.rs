//! Another user of the node can neither read an exchange nor deny one.
//! Two ranks (threads of this process) commit and run an exchange over
//! shared memory; between it and a second commit, a shell run as another
//! user (uid and gid 65534) tries what it could to read the job's memory
//! or take its shared-memory directory: list the directory, plant a file
//! in it, move or remove it, make one of its name, and read the ranks'
//! memory maps and descriptors through `/proc`. Every try must be refused,
//! and the second exchange must commit and deliver its halo. The same
//! reads as this user succeed (so a refusal is the other user's, not a
//! broken probe). Acting as another user needs root: elsewhere the test
//! says so and does nothing.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use sode::{Decomposition, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, thread_world};

/// The other user: `nobody` on Debian.
const OTHER: u32 = 65534;

/// The tries, as a shell script of `$1` (the job's directory) and `$2`
/// (this process's pid): each prints `DONE: what` when it was let through.
const TRIES: &str = r#"
d="$1"; p="$2"
try() { if "$@" >/dev/null 2>&1; then echo "DONE: $*"; fi; }
try ls "$d"
try touch "$d/planted"
try mv "$d" "$d.taken"
try rmdir "$d"
try mkdir "$d"
try cat "/proc/$p/maps"
try ls "/proc/$p/fd"
try ls "/proc/$p/map_files"
"#;

/// The reads among [`TRIES`], which this user may make.
const READS: &str = r#"
d="$1"; p="$2"
try() { if "$@" >/dev/null 2>&1; then echo "DONE: $*"; fi; }
try ls "$d"
try cat "/proc/$p/maps"
try ls "/proc/$p/fd"
"#;

/// Runs `script` on the job's directory and this process, as `uid` when
/// given; the lines it printed.
fn run_as(uid: Option<u32>, script: &str, dir: &Path) -> Vec<String> {
    let mut c = std::process::Command::new("/bin/sh");
    c.args(["-c", script, "tries"])
        .arg(dir)
        .arg(std::process::id().to_string())
        .current_dir("/");
    if let Some(u) = uid {
        c.uid(u).gid(u);
    }
    let out = c.output().expect("run /bin/sh");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// One exchange over shared memory: owned cells and halos hold the rank's
/// number, and after it exactly the face the other rank sends holds its.
fn exchange_once(w: &sode_job::World) {
    let d = Decomposition::new(&[16, 8], &[2, 1], &[false, false], 1, Stencil::Faces).unwrap();
    let mut halo = HaloExchange::builder(&w.clone(), &d)
        .transport(Transport::Shm)
        .build()
        .unwrap();
    let me = w.rank() as f64;
    let mut u = vec![me; halo.local_extent().iter().product()];
    halo.start(&[&u]).unwrap();
    halo.wait(Duration::from_secs(30), &mut [&mut u]).unwrap();
    let theirs = u.iter().filter(|&&v| v == 1.0 - me).count();
    assert_eq!(theirs, 8, "rank {me}: cells from the other rank");
}

#[test]
fn another_user_can_neither_read_nor_deny_an_exchange() {
    let me = nix::unistd::geteuid();
    if !me.is_root() {
        eprintln!("not run: acting as another user (uid {OTHER}) needs root");
        return;
    }
    let port = free_port();
    let between = Arc::new(Barrier::new(3));
    let (tell, told) = std::sync::mpsc::channel::<PathBuf>();
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let (between, tell) = (Arc::clone(&between), tell.clone());
            std::thread::spawn(move || {
                let w = thread_world(r, 2, port, &format!("otheruser{}", std::process::id()));
                exchange_once(&w);
                let dir =
                    Path::new(&std::env::var("SODE_SHM_DIR").unwrap_or_else(|_| "/dev/shm".into()))
                        .join(format!("sode-{me}-{}", w.job_id()));
                tell.send(dir).unwrap();
                // The other user tries its worst here.
                between.wait();
                between.wait();
                exchange_once(&w);
            })
        })
        .collect();
    let dir = told.recv().unwrap();
    between.wait();
    let ours = run_as(None, READS, &dir);
    let theirs = run_as(Some(OTHER), TRIES, &dir);
    let planted = dir.join("planted").exists();
    let still = dir.is_dir();
    between.wait();
    let ended: Vec<bool> = ranks.into_iter().map(|r| r.join().is_ok()).collect();
    assert_eq!(ours.len(), 3, "this user's own reads failed: {ours:?}");
    assert!(
        theirs.is_empty() && !planted && still,
        "uid {OTHER} was let through: {theirs:?} (a file planted: {planted}; the directory still there: {still})"
    );
    assert_eq!(ended, [true, true], "a rank's second exchange failed");
}
