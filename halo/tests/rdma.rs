//! The transport on a real RDMA device (SoftRoCE's rxe0 in CI: see
//! ci/softroce/). Every data-path test checks every byte that arrived
//! (sode-rdma-check exits non-zero on the first wrong byte).
//!
//! Without a device these tests say they are skipped, unless
//! SODE_REQUIRE_RDMA=1 (set in the CI guest), which makes a missing device a
//! failure.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CHECK: &str = env!("CARGO_BIN_EXE_sode-rdma-check");

fn rdma_available() -> bool {
    let ok = Command::new(CHECK)
        .arg("probe")
        .env_remove("SODE_DEVICE")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("SODE_REQUIRE_RDMA").is_none(),
            "SODE_REQUIRE_RDMA is set but no RDMA device works: {:?}",
            Command::new(CHECK).arg("probe").output()
        );
        eprintln!("skipped: no RDMA device (CI runs this test in the SoftRoCE VM: bash ci/softroce/run.sh ...)");
    }
    ok
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `sode-rdma-check exchange ARGS` on `n` ranks and returns the output.
fn exchange(n: usize, args: &[&str]) -> String {
    // The checker starts its own ranks (as sode-run would) with -n.
    let out = Command::new(CHECK)
        .args(["-n", &n.to_string(), "--job-timeout", "600", "exchange"])
        .args(args)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(
        out.status.success(),
        "exchange {args:?} on {n} ranks failed:\n{t}"
    );
    for r in 0..n {
        assert!(
            t.contains(&format!("[{r}] rank {r}: ")),
            "rank {r} did not report:\n{t}"
        );
    }
    println!("{t}");
    t
}

#[test]
fn probe_names_device_gid_and_limits() {
    if !rdma_available() {
        return;
    }
    let out = Command::new(CHECK).arg("probe").output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("device") && t.contains("gid") && t.contains("::ffff:"),
        "RoCE v2 IPv4 GID expected:\n{t}"
    );
}

#[test]
fn a_missing_device_is_a_clear_error() {
    // Runs on any machine: an unknown name where there are devices, the
    // plain case where there are none.
    let out = Command::new(CHECK)
        .arg("probe")
        .env("SODE_DEVICE", "mlx5_99")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("no RDMA device"), "{t}");
    assert!(t.contains("mlx5_99") || t.contains("found none"), "{t}");
    let out = Command::new(CHECK)
        .arg("probe")
        .env("SODE_GID_INDEX", "x")
        .output()
        .unwrap();
    assert!(text(&out).contains("SODE_GID_INDEX"), "{}", text(&out));
}

#[test]
fn every_byte_arrives_on_1_2_and_4_engines() {
    if !rdma_available() {
        return;
    }
    // 1 B to 4 MiB, odd sizes, small ones inline and the rest not; chains
    // of 8 writes spread over the engines.
    let sizes = "1,7,64,200,4095,65536,1M,4M";
    for e in ["1", "2", "4"] {
        let t = exchange(
            2,
            &[
                "--engines",
                e,
                "--sizes",
                sizes,
                "--iters",
                "3",
                "--inline-max",
                "256",
            ],
        );
        assert!(t.contains(&format!("{e} engines, 8 commands")), "{t}");
    }
}

#[test]
fn three_ranks_all_to_all_without_inline_and_per_engine_cqs() {
    if !rdma_available() {
        return;
    }
    exchange(
        3,
        &[
            "--engines",
            "2",
            "--sizes",
            "1,100,4096,300000",
            "--iters",
            "5",
            "--inline-max",
            "0",
            "--cq",
            "per-engine",
        ],
    );
}

#[test]
fn one_post_per_request_delivers_the_same_bytes() {
    if !rdma_available() {
        return;
    }
    let t = exchange(
        2,
        &[
            "--engines",
            "2",
            "--sizes",
            "8,64,512,8192",
            "--iters",
            "5",
            "--post",
            "each",
        ],
    );
    assert!(t.contains("20 posts for 20 requests"), "{t}");
    let t = exchange(
        2,
        &[
            "--engines",
            "2",
            "--sizes",
            "8,64,512,8192",
            "--iters",
            "5",
            "--post",
            "chain",
        ],
    );
    assert!(
        t.contains("10 posts for 20 requests"),
        "one post per engine per exchange: {t}"
    );
}

#[test]
fn scheduler_plans_drive_the_engines() {
    if !rdma_available() {
        return;
    }
    // SCALE-LES3 sizes (k = 872: E/W, N/S, diagonal puts) to two peers,
    // placed by BLbased(4); then sizes for which `split` cuts puts across
    // engines, so pieces of one message arrive over several queue pairs and
    // must still add up.
    for (alg, sizes, cut) in [
        ("bl:4", "224256,112128,112128,14016,14016", false),
        ("split", "224256,224256,14016", true),
    ] {
        let t = exchange(
            3,
            &[
                "--engines",
                "4",
                "--sizes",
                sizes,
                "--iters",
                "3",
                "--schedule",
                alg,
            ],
        );
        let line = t
            .lines()
            .find(|l| l.contains("plan, simulated"))
            .unwrap_or_else(|| panic!("{t}"));
        let n: Vec<usize> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let (puts, pieces) = (n[n.len() - 2], n[n.len() - 1]);
        assert_eq!(pieces > puts, cut, "{alg}: {line}");
    }
}

#[test]
fn strided_faces_gathered_by_the_device_arrive_intact() {
    if !rdma_available() {
        return;
    }
    // 100 rows: writes of up to the device's gather-entry limit, the last
    // one partial; every byte checked, packed and gathered.
    let out = Command::new(CHECK)
        .args([
            "-n",
            "2",
            "--job-timeout",
            "300",
            "gather",
            "--shapes",
            "100x8,40x100",
            "--iters",
            "5",
        ])
        .output()
        .unwrap();
    let t = text(&out);
    println!("{t}");
    assert!(out.status.success(), "{t}");
    assert_eq!(t.matches("verified").count(), 2, "{t}");
}

#[test]
fn a_thousand_back_to_back_exchanges_with_checksums() {
    if !rdma_available() {
        return;
    }
    let t = exchange(
        2,
        &[
            "--engines",
            "2",
            "--sizes",
            "8,4096,65536",
            "--iters",
            "1000",
        ],
    );
    let sums: Vec<&str> = t
        .lines()
        .filter_map(|l| l.split("checksum ").nth(1))
        .collect();
    assert_eq!(sums.len(), 2, "{t}");
    assert!(t.contains("1000 exchanges"), "{t}");
}

#[test]
fn a_bad_rkey_is_a_remote_access_error_naming_the_command() {
    if !rdma_available() {
        return;
    }
    let out = Command::new(CHECK)
        .args([
            "-n",
            "2",
            "--job-timeout",
            "120",
            "exchange",
            "--sizes",
            "64,4096",
            "--iters",
            "3",
            "--wrong-rkey",
            "--expect-failure",
        ])
        .args(["--deadline-ms", "20000"])
        .output()
        .unwrap();
    let t = text(&out);
    println!("{t}");
    assert!(out.status.success(), "{t}");
    let line = t
        .lines()
        .find(|l| l.starts_with("[0] rank 0: failure reported"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        line.contains("RDMA write command #0 to rank 1 on engine 0 (64 bytes)"),
        "{line}"
    );
    assert!(
        line.to_lowercase().contains("remote access error"),
        "{line}"
    );
    assert!(
        t.contains("[1] rank 1: failure reported"),
        "the target rank must learn of it too:\n{t}"
    );
}

/// Two ranks of `sode-rdma-check exchange` under the wait policy `wait`,
/// rank 1 killing itself mid-exchange: how long rank 0 took to report it,
/// after checking that it did, naming the dead peer, before its deadline.
fn killed_peer_reported_after(wait: &str) -> Duration {
    let port = sode_job::free_port().unwrap();
    let deadline_ms = 15_000u64;
    let spawn = |rank: usize| {
        Command::new(CHECK)
            .args([
                "exchange",
                "--engines",
                "2",
                "--sizes",
                "64,1M",
                "--iters",
                "50",
            ])
            .args([
                "--die-rank",
                "1",
                "--die-at",
                "5",
                "--expect-failure",
                "--deadline-ms",
                &deadline_ms.to_string(),
            ])
            .env("SODE_RANK", rank.to_string())
            .env("SODE_SIZE", "2")
            .env("SODE_ROOT", format!("127.0.0.1:{port}"))
            .env("SODE_JOB_SECRET", "9e".repeat(32))
            .env("SODE_WAIT", wait)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let t0 = Instant::now();
    let r0 = spawn(0);
    let r1 = spawn(1);
    let o1 = r1.wait_with_output().unwrap();
    let o0 = r0.wait_with_output().unwrap();
    let t = text(&o0);
    println!("{t}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        o1.status.signal(),
        Some(9),
        "rank 1 should have killed itself: {}",
        text(&o1)
    );
    assert!(o0.status.success(), "{t}");
    let line = t
        .lines()
        .find(|l| l.contains("failure reported after"))
        .unwrap_or_else(|| panic!("{t}"));
    let ms: u64 = line
        .split("after ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        ms < deadline_ms,
        "reported after {ms} ms, deadline {deadline_ms} ms"
    );
    assert!(
        line.contains("rank 1"),
        "the error must name the dead peer: {line}"
    );
    assert!(t0.elapsed() < Duration::from_secs(120));
    Duration::from_millis(ms)
}

#[test]
fn a_peer_killed_mid_exchange_is_reported_within_the_deadline() {
    if !rdma_available() {
        return;
    }
    killed_peer_reported_after("yield");
}

#[test]
fn a_peer_killed_while_its_neighbour_sleeps_wakes_it() {
    if !rdma_available() {
        return;
    }
    // Rank 0 sleeps on the completion channel, which no completion will
    // ever wake: its peer's closed link must, and the error follows the
    // 200 ms grace for completions in flight.
    let took = killed_peer_reported_after("block");
    assert!(
        took < Duration::from_secs(3),
        "a sleeping rank reported its dead peer after {took:?}"
    );
}

#[test]
fn a_low_memlock_limit_is_a_clear_error() {
    if !rdma_available() {
        return;
    }
    // Root ignores the limit through CAP_IPC_LOCK: drop it, as an ordinary
    // user would run.
    let script = format!("ulimit -l 64 && exec setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock {CHECK} register --bytes 1M");
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let t = text(&out);
    println!("{t}");
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("locked-memory limit") && t.contains("65536 bytes") && t.contains("ulimit -l"),
        "{t}"
    );
}

#[test]
fn a_key_works_only_on_the_connection_it_was_given_to() {
    if !rdma_available() {
        return;
    }
    let out = Command::new(CHECK)
        .args(["-n", "3", "--job-timeout", "300", "stolen-key"])
        .output()
        .unwrap();
    let t = text(&out);
    println!("{t}");
    assert!(out.status.success(), "{t}");
    assert!(t.contains("ranks 1 and 2 wrote with their own keys"), "{t}");
    assert!(
        t.contains("the stolen key was refused")
            && t.to_lowercase().contains("remote access error"),
        "{t}"
    );
    assert!(t.contains("the target range is unchanged"), "{t}");
}
