//! Commits after the first are cheap: the shared-memory thresholds are
//! measured by the first exchange built on a job and every later exchange
//! on it reuses them (a probe costs milliseconds per place; commits of a
//! code with many field sets used to pay it every time). Two ranks run as
//! threads of this process, neighbours over shared memory; the later
//! exchange's halos are checked cell by cell.

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, thread_world};

/// The shared-memory thresholds would not be measured at all when the
/// environment sets all of them: this test is about the measurement.
fn thresholds_are_measured() -> bool {
    let set = [
        "SODE_SHM_EAGER_MAX",
        "SODE_SHM_GET_MIN",
        "SODE_SHM_READ_MIN",
    ]
    .iter()
    .all(|v| std::env::var_os(v).is_some());
    if set {
        eprintln!("skipped: every SODE_SHM_* threshold is set, nothing is measured");
    }
    !set
}

/// One rank: a first exchange, then a second of another shape on the same
/// world; returns (first exchange's reuse flags, second's).
fn rank(rank: usize, port: u16) -> (Vec<bool>, Vec<bool>) {
    let w = thread_world(rank, 2, port, "commit-test");
    let d = Decomposition::new(&[32, 12], &[2, 1], &[false, false], 1, Stencil::Faces).unwrap();
    let first = HaloExchange::builder(&w, &d)
        .transport(Transport::Shm)
        .build()
        .unwrap();
    let d2 = Decomposition::new(&[40, 10], &[2, 1], &[false, true], 2, Stencil::Full).unwrap();
    let mut second = HaloExchange::builder(&w, &d2)
        .transport(Transport::Shm)
        .fields(3)
        .build()
        .unwrap();
    check_halos(&mut second, rank);
    let reused = |h: &HaloExchange| h.calibrations().iter().map(|c| c.reused).collect();
    (reused(&first), reused(&second))
}

/// Runs one exchange of three fields, rank `r`'s owned cells `10 r + f`
/// and halos -1, and checks that exactly the cells the other rank fills
/// hold its values and every other halo cell is untouched.
fn check_halos(halo: &mut HaloExchange, r: usize) {
    let cells: usize = halo.local_extent().iter().product();
    let value = |rank: usize, f: usize| (10 * rank + f) as f64;
    let mut fields: Vec<Vec<f64>> = (0..3).map(|f| vec![value(r, f); cells]).collect();
    let mut halo_cells = 0;
    let (ext, h) = (halo.local_extent().to_vec(), 2);
    for field in &mut fields {
        for (i, c) in field.iter_mut().enumerate() {
            // Axis 0 is the fastest in sode's arrays.
            let (x, y) = (i % ext[0], i / ext[0]);
            if x < h || x >= ext[0] - h || y < h || y >= ext[1] - h {
                *c = -1.0;
                halo_cells += 1;
            }
        }
    }
    halo_cells /= 3;
    let from_other: usize = halo
        .neighbours()
        .iter()
        .filter(|n| n.rank != r)
        .map(|n| n.recv.cells())
        .sum();
    let from_self: usize = halo
        .neighbours()
        .iter()
        .filter(|n| n.rank == r)
        .map(|n| n.recv.cells())
        .sum();
    assert!(from_other > 0, "rank {r} has a neighbour across axis 0");
    let views: Vec<&[f64]> = fields.iter().map(|f| f.as_slice()).collect();
    halo.start(&views).unwrap();
    let mut views: Vec<&mut [f64]> = fields.iter_mut().map(|f| f.as_mut_slice()).collect();
    halo.wait(Instant::now() + Duration::from_secs(30), &mut views)
        .unwrap();
    for (f, field) in fields.iter().enumerate() {
        let count = |v: f64| field.iter().filter(|&&c| c == v).count();
        assert_eq!(count(value(1 - r, f)), from_other, "rank {r} field {f}");
        assert_eq!(
            count(-1.0),
            halo_cells - from_other - from_self,
            "rank {r} field {f}: halo cells no neighbour fills stay untouched"
        );
    }
}

#[test]
fn later_commits_on_a_job_reuse_its_measured_thresholds() {
    if !thresholds_are_measured() {
        return;
    }
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|r| std::thread::spawn(move || rank(r, port)))
        .collect();
    for (r, t) in ranks.into_iter().enumerate() {
        let (first, second) = t.join().unwrap();
        assert!(
            !first.is_empty(),
            "rank {r}'s first exchange has a peer on the node"
        );
        assert!(
            first.iter().all(|&reused| !reused),
            "rank {r}: the job's first exchange measures ({first:?})"
        );
        assert!(!second.is_empty());
        assert!(
            second.iter().all(|&reused| reused),
            "rank {r}: a later exchange on the same job reuses the measurement ({second:?})"
        );
    }
}

/// The job's shared-memory directory lives as long as the job, not only
/// while an exchange does: between two exchanges no other user can make a
/// directory of its name (every later exchange would refuse it). It goes
/// with the last handle of the job.
#[test]
fn the_job_directory_outlives_its_exchanges() {
    let port = free_port();
    let (tell, told) = std::sync::mpsc::channel();
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let tell = tell.clone();
            std::thread::spawn(move || {
                let w = thread_world(r, 2, port, "jobdir-test");
                let d = Decomposition::new(&[16, 8], &[2, 1], &[false, false], 1, Stencil::Faces)
                    .unwrap();
                let first = HaloExchange::builder(&w, &d)
                    .transport(Transport::Shm)
                    .build()
                    .unwrap();
                drop(first);
                let dir = std::path::Path::new(
                    &std::env::var("SODE_SHM_DIR").unwrap_or_else(|_| "/dev/shm".into()),
                )
                .join(format!("sode-{}-{}", nix_uid(), w.job_id()));
                assert!(dir.is_dir(), "{} went with the exchange", dir.display());
                w.barrier(Duration::from_secs(30)).unwrap();
                tell.send(dir).unwrap();
            })
        })
        .collect();
    for r in ranks {
        r.join().unwrap();
    }
    let dir = told.recv().unwrap();
    assert!(!dir.exists(), "{} outlived the job", dir.display());
}

/// This process's effective uid (the owner of what it creates in /proc).
fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0)
}
