//! sode-run starts ranks with the bootstrap environment, prefixes their
//! output, and fails as a whole. No RDMA needed.

use std::process::Command;
use std::time::{Duration, Instant};

const SODE_RUN: &str = env!("CARGO_BIN_EXE_sode-run");

#[test]
fn ranks_get_their_environment_and_prefixed_output() {
    let out = Command::new(SODE_RUN)
        .args([
            "-n",
            "3",
            "sh",
            "-c",
            "echo rank=$SODE_RANK size=$SODE_SIZE root=$SODE_ROOT job=$SODE_JOB_ID",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut roots = std::collections::BTreeSet::new();
    for r in 0..3 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("[{r}] rank={r} size=3 root=127.0.0.1:")))
            .unwrap_or_else(|| panic!("rank {r} missing in {text}"));
        roots.insert(line.split_whitespace().nth(3).unwrap().to_string());
    }
    assert_eq!(roots.len(), 1, "one SODE_ROOT for the job: {text}");
}

#[test]
fn one_failing_rank_stops_the_job_with_its_status() {
    let t0 = Instant::now();
    let out = Command::new(SODE_RUN)
        .args([
            "-n",
            "3",
            "sh",
            "-c",
            "if [ $SODE_RANK = 1 ]; then echo failing >&2; exit 3; fi; sleep 60",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the other ranks were not stopped: {:?}",
        t0.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[1] failing") && err.contains("rank 1 exited with status 3"),
        "{err}"
    );
}

#[test]
fn the_timeout_stops_a_hung_job() {
    let out = Command::new(SODE_RUN)
        .args(["-n", "2", "--timeout", "0.5", "sleep", "60"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not finish"));
}

#[test]
fn an_interrupted_launcher_stops_its_ranks() {
    let child = Command::new(SODE_RUN)
        .args(["-n", "2", "sh", "-c", "echo up; sleep 60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "ranks kept running: {:?}",
        t0.elapsed()
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
}

#[test]
fn usage_errors_are_named() {
    let out = Command::new(SODE_RUN)
        .args(["sleep", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-n N"));
    let out = Command::new(SODE_RUN)
        .args(["-n", "2", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start"));
}

#[test]
fn bad_counts_and_durations_are_named_not_panics() {
    for (args, named) in [
        (&["--timeout", "-1"][..], "--timeout"),
        (&["--timeout", "nan"][..], "--timeout"),
        (&["--timeout", "inf"][..], "--timeout"),
        (&["--timeout", "1e30"][..], "--timeout"),
        (&["--timeout", "x"][..], "--timeout"),
    ] {
        let out = Command::new(SODE_RUN)
            .args(["-n", "1"])
            .args(args)
            .args(["true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(named) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    for n in ["1e11", "-3", "99999999999999999999", "100000"] {
        let out = Command::new(SODE_RUN)
            .args(["-n", n, "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "-n {n}: {err}");
        assert!(
            err.contains("-n") && !err.contains("panicked"),
            "-n {n}: {err}"
        );
    }
}
