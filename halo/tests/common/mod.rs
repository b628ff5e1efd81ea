//! Helpers shared by the halo crate's integration tests (each test binary
//! uses some of them).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
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

/// Arrays of one rank: its two fields.
pub type Fields = (Vec<f64>, Vec<f64>);

/// Two ranks over `transport`, 2 x 1 and periodic, two fields of halo 2: each
/// rank exchanges once in step, then as `step` says (its rank, the
/// exchange, its fields: a start and its wait); returns each rank's error
/// from `step`, empty for none.
pub fn disagree(
    transport: Transport,
    step: fn(usize, &mut HaloExchange, &mut Fields) -> sode::Result<()>,
) -> Vec<String> {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "shape-test");
                let d =
                    Decomposition::new(&[16, 8], &[2, 1], &[true, true], 2, Stencil::Full).unwrap();
                let mut halo = HaloExchange::builder(&w, &d)
                    .transport(transport)
                    .fields(2)
                    .build()
                    .unwrap();
                let cells: usize = halo.local_extent().iter().product();
                let mut f: Fields = (vec![1.0; cells], vec![2.0; cells]);
                halo.start(&[&f.0, &f.1]).unwrap();
                halo.wait(deadline(), &mut [&mut f.0, &mut f.1]).unwrap();
                let told = step(rank, &mut halo, &mut f);
                // Both ranks keep their exchange until both have waited.
                w.barrier(Duration::from_secs(30)).unwrap();
                told.err()
                    .map(|e| sode_job::diag::chain(&e))
                    .unwrap_or_default()
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

pub fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

/// Ranks over `transport` that start different fields (of one length) or
/// different depths fail their waits, each naming the other; ranks that
/// start the same fields do not.
pub fn told_apart(transport: Transport) {
    // Field 0 on rank 0, field 1 on rank 1: messages of the same length.
    let fields = disagree(transport, |rank, halo, f| {
        let array = if rank == 0 { &mut f.0 } else { &mut f.1 };
        halo.start_fields(&[rank], &[&array[..]])?;
        halo.wait_fields(deadline(), &[rank], &mut [&mut array[..]])
    });
    // Both fields, one layer on rank 0 and two on rank 1.
    let depths = disagree(transport, |rank, halo, f| {
        halo.set_depth(rank + 1)?;
        halo.start(&[&f.0, &f.1])?;
        halo.wait(deadline(), &mut [&mut f.0, &mut f.1])
    });
    let same = disagree(transport, |_, halo, f| {
        halo.start_fields(&[1], &[&f.1])?;
        halo.wait_fields(deadline(), &[1], &mut [&mut f.1])
    });
    assert_eq!(same, ["", ""], "the same fields on both ranks");
    for (what, told) in [("fields", fields), ("depths", depths)] {
        for (rank, e) in told.iter().enumerate() {
            assert!(
                e.contains("different parts of the exchange")
                    && e.contains(&format!("rank {}", 1 - rank)),
                "{what}, rank {rank}: {e:?}"
            );
        }
    }
}

/// Rank `rank` of a job of `size` ranks meeting at `port`: this test
/// executable run again on its `rank` test (a no-op unless `role` names
/// the variable set here to `value`), with `env` besides and
/// `SODE_HEALTH_TIMEOUT` as `env` says or at its default (not the test
/// runner's); its output piped.
pub fn spawn_rank(
    rank: usize,
    size: usize,
    port: u16,
    job: &str,
    role: (&str, &str),
    env: &[(&str, &str)],
) -> std::process::Child {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "rank", "--nocapture", "--test-threads=1"])
        .env(role.0, role.1)
        .env("SODE_RANK", rank.to_string())
        .env("SODE_SIZE", size.to_string())
        .env("SODE_ROOT", format!("127.0.0.1:{port}"))
        .env("SODE_JOB_SECRET", "5e".repeat(32))
        .env("SODE_JOB_ID", job)
        .env_remove("SODE_HEALTH_TIMEOUT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// What a spawned rank printed, stdout then stderr, once it exited; and
/// whether it succeeded.
pub fn output_of(child: std::process::Child) -> (bool, String) {
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// What each of the spawned ranks `children` printed (as [`output_of`]),
/// in rank order; fails the test, with its output, on a rank that failed.
pub fn outputs_of(children: Vec<std::process::Child>) -> Vec<String> {
    children
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let (ok, text) = output_of(c);
            assert!(ok, "rank {r} failed:\n{text}");
            text
        })
        .collect()
}

/// A periodic grid of 2 x 1 ranks, all 8 neighbours (rank r at (r, 0)):
/// along axis 1 each rank is its own neighbour.
pub fn periodic_two_by_one() -> sode::pattern::ProcessGrid<'static> {
    sode::pattern::ProcessGrid {
        dims: &[2, 1],
        periodic: &[true, true],
        stencil: Stencil::Full,
        at: &[0, 1],
    }
}

/// A link to `peer` carrying 64 bytes each way (tag 1), named after it.
pub fn link_to(peer: usize) -> sode::Link {
    sode::Link {
        peer,
        send: Some(sode::Message { len: 64, tag: 1 }),
        recv: Some(sode::Message { len: 64, tag: 1 }),
        offset: Vec::new(),
        name: format!("rank {peer}"),
    }
}
