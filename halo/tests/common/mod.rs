//! Helpers shared by the halo crate's integration tests (each test binary
//! uses some of them).
#![allow(dead_code)]

use std::time::Duration;

use sode_job::{LaunchInfo, Secret, World};

/// Whether an RDMA device is there. Without one the caller skips (this
/// says so), unless `SODE_REQUIRE_RDMA` is set (the SoftRoCE guest), which
/// makes a missing device a failure.
pub fn rdma_available() -> bool {
    let ok = std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some());
    if !ok {
        assert!(
            std::env::var_os("SODE_REQUIRE_RDMA").is_none(),
            "SODE_REQUIRE_RDMA is set but /sys/class/infiniband lists no device"
        );
        eprintln!("skipped: no RDMA device (CI runs this test in the SoftRoCE VM)");
    }
    ok
}

/// A free loopback port for a job's rendezvous (below the kernel's
/// ephemeral range: no outgoing connection takes it before rank 0 binds).
pub fn free_port() -> u16 {
    sode_job::free_port().unwrap()
}

/// Rank `rank` of a job of `size` ranks run as threads of this process,
/// meeting at `port` on loopback.
pub fn thread_world(rank: usize, size: usize, port: u16, job: &str) -> World {
    let secret = Secret::from_hex(&"3c".repeat(32)).unwrap();
    let launch = LaunchInfo {
        job_id: (rank == 0).then(|| job.to_string()),
        ..LaunchInfo::loopback(rank, size, port, secret)
    };
    World::init_with(&launch, Duration::from_secs(30)).unwrap()
}
