//! Real processes exchanging over the intra-node channel: every test spawns
//! `sode-shm-check` ranks, which verify every byte they receive.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const CHECK: &str = env!("CARGO_BIN_EXE_sode-shm-check");
const SIZES: &str = "0,1,7,4095,65539,1048576,16777216";

/// The tests spin up 2-3 busy-polling processes each; on a small machine
/// they run one at a time so deadlines measure the channel, not the
/// scheduler.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn job(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn spawn(job: &str, rank: usize, peers: &str, extra: &[&str]) -> Child {
    Command::new(CHECK)
        .arg("run")
        .arg(format!("job={job}"))
        .arg(format!("rank={rank}"))
        .arg(format!("peers={peers}"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sode-shm-check")
}

fn finish(child: Child) -> (Output, String) {
    let out = child.wait_with_output().expect("wait for rank");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// Runs ranks 0..n (each listing `peers[r]`) and asserts that all verified.
fn run_all(name: &str, peers: &[&str], extra: &[&[&str]]) -> Vec<String> {
    let j = job(name);
    let children: Vec<Child> = peers
        .iter()
        .enumerate()
        .map(|(r, p)| spawn(&j, r, p, extra[r.min(extra.len() - 1)]))
        .collect();
    let mut texts = Vec::new();
    for (r, c) in children.into_iter().enumerate() {
        let (out, text) = finish(c);
        assert!(out.status.success(), "rank {r} failed:\n{text}");
        assert!(text.contains(&format!("ok rank {r}:")), "rank {r}:\n{text}");
        texts.push(text);
    }
    assert_no_segments(&j);
    texts
}

fn assert_no_segments(job: &str) {
    let dir = std::env::var("SODE_SHM_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(job))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "segments left behind: {left:?}");
}

fn paths_seen(text: &str, path: &str) -> usize {
    text.lines()
        .filter(|l| l.contains("receive tag") && l.ends_with(&format!("over {path}")))
        .count()
}

#[test]
fn every_size_arrives_intact_on_the_eager_path() {
    let _serial = serial();
    let t = run_all(
        "eager",
        &["1", "0"],
        &[&["path=eager", "iters=3", &format!("sizes={SIZES}")]],
    );
    assert_eq!(paths_seen(&t[0], "eager"), 7);
}

#[test]
fn every_size_arrives_intact_on_the_get_path() {
    let _serial = serial();
    let t = run_all(
        "get",
        &["1", "0"],
        &[&["path=get", "iters=3", &format!("sizes={SIZES}")]],
    );
    assert_eq!(paths_seen(&t[0], "get"), 7);
    assert_eq!(paths_seen(&t[1], "get"), 7);
}

#[test]
fn every_size_arrives_intact_on_the_window_path() {
    let _serial = serial();
    let t = run_all(
        "window",
        &["1", "0"],
        &[&["path=window", "iters=3", &format!("sizes={SIZES}")]],
    );
    assert_eq!(paths_seen(&t[0], "window"), 7);
}

#[test]
fn misaligned_buffers_on_every_path() {
    let _serial = serial();
    for path in ["eager", "get", "window"] {
        let p = format!("path={path}");
        run_all(
            "misaligned",
            &["1", "0"],
            &[
                &[&p, "iters=2", "misalign=3", "sizes=1,7,4095,65539,1048579"],
                &[&p, "iters=2", "misalign=61", "sizes=1,7,4095,65539,1048579"],
            ],
        );
    }
}

#[test]
fn automatic_paths_with_three_ranks_in_a_ring() {
    let _serial = serial();
    // Private receive buffers on rank 2 so its large messages take the get
    // path while the others use windows.
    // Thresholds fixed so the expected paths do not depend on this
    // machine's measurement.
    let sizes = "sizes=8,3000,200000";
    let th = "thresholds=512,100000";
    let t = run_all(
        "ring3",
        &["1,2", "2,0", "0,1"],
        &[
            &["iters=50", sizes, th],
            &["iters=50", sizes, th],
            &["iters=50", sizes, th, "private=1"],
        ],
    );
    assert_eq!(paths_seen(&t[2], "get"), 2, "{}", t[2]);
    assert_eq!(paths_seen(&t[2], "eager"), 4, "{}", t[2]);
    assert_eq!(paths_seen(&t[0], "window"), 4, "{}", t[0]);
    assert_eq!(paths_seen(&t[0], "eager"), 2, "{}", t[0]);
}

#[test]
fn ten_thousand_back_to_back_exchanges_on_all_paths() {
    let _serial = serial();
    // Three messages per direction, each verified byte for byte every
    // iteration: a small eager one, a window put and a get.
    let mk = |path: &'static str| -> Vec<String> {
        vec![
            format!("path={path}"),
            "iters=10000".into(),
            "sizes=8,1000,65539".into(),
        ]
    };
    for path in ["eager", "window", "get"] {
        let args = mk(path);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = run_all("ten_thousand", &["1", "0"], &[&args]);
        assert!(t[0].contains("10000 exchanges"), "{}", t[0]);
    }
}

/// Kills rank 1 mid-exchange (both ranks run with `extra`): rank 0 must
/// name it dead within seconds, and nothing may be left behind.
fn a_killed_peer_is_reported(extra: &[&str]) {
    let _serial = serial();
    let j = job("killed");
    let args = [
        &["sizes=64,100000", "iters=1000", "deadline-ms=20000"],
        extra,
    ]
    .concat();
    let mut victim = spawn(&j, 1, "0", &[&args[..], &["stall-after=5"]].concat());
    let survivor = spawn(&j, 0, "1", &args);
    // Wait until the victim is stuck mid-exchange, then kill it.
    let stdout = victim.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = lines.next().expect("victim output").expect("utf-8");
        if line.contains("stalled") {
            break;
        }
        assert!(Instant::now() < deadline, "victim never stalled");
    }
    victim.kill().expect("kill");
    let killed_at = Instant::now();
    let (out, text) = finish(survivor);
    let took = killed_at.elapsed();
    let _ = victim.wait();
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("peer rank 1") && text.contains("died"),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "noticed after {took:?}");
    assert_no_segments(&j);
}

#[test]
fn a_killed_peer_is_reported_within_the_deadline_and_leaves_no_segment() {
    a_killed_peer_is_reported(&[]);
}

// Where `pidfd_open` is refused (a kernel before 5.3, valgrind 3.19, a
// seccomp profile), peers are held through their /proc/<pid>/stat: a real
// seccomp filter refuses the call to both ranks (a killed one is a zombie
// until this test reaps it, after rank 0 has named it).
#[test]
fn without_pidfds_a_killed_peer_is_still_reported() {
    a_killed_peer_is_reported(&["deny-pidfd=1"]);
}

#[test]
fn without_pidfds_every_path_arrives_intact() {
    let _serial = serial();
    for path in ["eager", "window", "get"] {
        let (path_arg, sizes) = (format!("path={path}"), format!("sizes={SIZES}"));
        let args = [&path_arg[..], "iters=50", &sizes, "deny-pidfd=1"];
        let t = run_all("no_pidfd", &["1", "0"], &[&args]);
        assert_eq!(paths_seen(&t[0], path), 7, "{}", t[0]);
    }
    // The probe says what holds the peers, and why.
    let out = Command::new(CHECK)
        .args(["probe", "deny-pidfd=1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("process handles:     pidfd_open is refused"),
        "{text}"
    );
}

#[test]
fn a_stalled_peer_times_out_naming_what_is_outstanding() {
    let _serial = serial();
    let j = job("stalled");
    let mut victim = spawn(&j, 1, "0", &["sizes=64", "iters=100", "stall-after=3"]);
    let started = Instant::now();
    let (out, text) = finish(spawn(
        &j,
        0,
        "1",
        &["sizes=64", "iters=100", "deadline-ms=700"],
    ));
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("not complete at its deadline"), "{text}");
    assert!(text.contains("from rank 1"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn the_get_path_needs_no_cross_memory_attach() {
    let _serial = serial();
    // A seccomp filter (a container's profile, say) denies
    // process_vm_readv to rank 0: its gets copy out of the sender's
    // segment, which it maps, so every message still takes the get path
    // and arrives (sode-shm-check verifies the bytes).
    let sizes = "sizes=7,65539,1048576";
    let t = run_all(
        "deny",
        &["1", "0"],
        &[
            &["path=get", "iters=3", sizes, "deny-cma=1"],
            &["path=get", "iters=3", sizes],
        ],
    );
    assert_eq!(paths_seen(&t[0], "get"), 3, "{}", t[0]);
    assert_eq!(paths_seen(&t[1], "get"), 3, "{}", t[1]);
}

#[test]
fn mismatched_sizes_and_a_missing_peer_are_named() {
    let _serial = serial();
    let j = job("mismatch");
    let a = spawn(&j, 0, "1", &["sizes=64"]);
    let b = spawn(&j, 1, "0", &["sizes=65"]);
    let (oa, ta) = finish(a);
    let (ob, tb) = finish(b);
    assert_eq!(oa.status.code(), Some(3));
    assert_eq!(ob.status.code(), Some(3));
    assert!(ta.contains("we send 64 bytes, it expects 65"), "{ta}");
    assert!(tb.contains("we send 65 bytes, it expects 64"), "{tb}");
    assert_no_segments(&j);

    let j = job("alone");
    let (o, t) = finish(spawn(&j, 0, "1", &["sizes=64", "setup-ms=300"]));
    assert_eq!(o.status.code(), Some(3));
    assert!(t.contains("peer rank 1 did not create its segment"), "{t}");
    assert_no_segments(&j);
}

/// The numbers in the `[..]` that follows `key` on `line`.
fn cpus_after(line: &str, key: &str) -> Vec<usize> {
    let Some(rest) = line.split(key).nth(1) else {
        return Vec::new();
    };
    let inside = rest
        .trim_start_matches(" [")
        .split(']')
        .next()
        .unwrap_or("");
    inside
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect()
}

/// The line of `text` that starts with `prefix`.
fn line<'t>(text: &'t str, prefix: &str) -> &'t str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{text}"))
}

/// Where rank `r`'s probe towards `peer` stood in for it: the CPUs it was
/// placed on and the one it ended on, from `r`'s output `text`.
fn probe_placement(text: &str, r: usize, peer: usize) -> (String, Vec<usize>, usize) {
    let cal = line(text, &format!("rank {r}: thresholds for rank {peer}:")).to_string();
    let towards = cpus_after(&cal, "towards CPUs");
    let ran_on = cal
        .split("responder on CPU ")
        .nth(1)
        .and_then(|c| c.split_whitespace().next())
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no responder CPU: {cal}"));
    (cal, towards, ran_on)
}

#[test]
fn ranks_bound_to_their_own_cores_exchange_and_measure_towards_each_other() {
    let _serial = serial();
    let t = run_all(
        "bound",
        &["1", "0"],
        &[&["iters=200", "sizes=4096,300000", "bind=1"]],
    );
    for (r, text) in t.iter().enumerate() {
        assert!(text.contains(&format!("rank {r}: bound to core")), "{text}");
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("one CPU: the ranks share it, no placement to check");
        return;
    }
    // Each rank's probe must stand in for its peer on the peer's CPUs,
    // not share its own core with the responder.
    for (r, text) in t.iter().enumerate() {
        let peer = 1 - r;
        let own = cpus_after(line(text, &format!("rank {r}: bound")), "PUs");
        let theirs = cpus_after(line(&t[peer], &format!("rank {peer}: bound")), "PUs");
        let (cal, towards, ran_on) = probe_placement(text, r, peer);
        assert!(cal.contains(", measured,"), "{cal}");
        assert!(towards.contains(&ran_on), "{cal}");
        assert!(
            theirs.iter().all(|c| towards.contains(c)),
            "peer on {theirs:?}: {cal}"
        );
        assert!(
            own.iter().all(|c| !towards.contains(c)),
            "own {own:?}: {cal}"
        );
    }
}

/// The NUMA nodes' CPU lists, from sysfs.
fn numa_nodes() -> Vec<Vec<usize>> {
    (0..64)
        .map_while(|n| {
            std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/cpulist")).ok()
        })
        .map(|list| {
            list.trim()
                .split(',')
                .flat_map(|part| match part.split_once('-') {
                    Some((a, b)) => a.parse::<usize>().unwrap()..=b.parse().unwrap(),
                    None => part.parse::<usize>().unwrap()..=part.parse().unwrap(),
                })
                .collect()
        })
        .collect()
}

/// Runs in the guest `ci/softroce/numa.sh` boots with two NUMA nodes of two
/// CPUs (`SODE_EXPECT_NUMA=2` there, so it cannot pass by finding one).
#[test]
fn across_numa_nodes_the_probe_stands_on_the_peers_whole_node() {
    let nodes = numa_nodes();
    let expected: usize = std::env::var("SODE_EXPECT_NUMA").map_or(0, |v| v.parse().unwrap());
    assert!(
        nodes.len() >= expected,
        "{expected} NUMA nodes expected, found {nodes:?}"
    );
    if nodes.len() < 2 || nodes.iter().any(|n| n.len() < 2) {
        eprintln!("NUMA nodes {nodes:?}: not two of two CPUs or more, nothing to check (ci/softroce/numa.sh runs this)");
        return;
    }
    let _serial = serial();
    let j = job("numa");
    // Rank 0 on node 0's first CPU, rank 1 on node 1's first.
    let cpus = [nodes[0][0], nodes[1][0]];
    let children: Vec<Child> = (0..2)
        .map(|r| {
            Command::new("taskset")
                .args(["-c", &cpus[r].to_string(), CHECK, "run"])
                .arg(format!("job={j}"))
                .arg(format!("rank={r}"))
                .arg(format!("peers={}", 1 - r))
                .args([
                    "iters=3",
                    "sizes=64,70000",
                    "setup-ms=120000",
                    "deadline-ms=120000",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn taskset sode-shm-check")
        })
        .collect();
    let texts: Vec<String> = children
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let (out, text) = finish(c);
            assert!(out.status.success(), "rank {r} failed:\n{text}");
            text
        })
        .collect();
    for (r, text) in texts.iter().enumerate() {
        let peer = 1 - r;
        let (cal, towards, ran_on) = probe_placement(text, r, peer);
        // The peer's whole node, every CPU of it, and none of ours.
        assert_eq!(towards, nodes[peer], "{cal}");
        assert!(towards.contains(&ran_on), "{cal}");
        eprintln!("{cal}");
    }
    assert_no_segments(&j);
}

#[test]
fn one_probe_serves_every_peer_in_the_same_place() {
    let _serial = serial();
    // Unbound, both peers may run anywhere: rank 0 measures once, towards
    // every CPU, and reuses it for the second peer.
    let t = run_all("reuse", &["1,2", "0,2", "0,1"], &[&["iters=3", "sizes=64"]]);
    let cals: Vec<&str> = t[0]
        .lines()
        .filter(|l| l.starts_with("rank 0: thresholds for rank"))
        .collect();
    assert_eq!(cals.len(), 2, "{}", t[0]);
    assert!(
        !cals[0].contains("(reused)") && cals[1].contains("(reused)"),
        "{}",
        t[0]
    );
    assert_eq!(
        cpus_after(cals[0], "towards CPUs"),
        cpus_after(cals[1], "towards CPUs")
    );
}

#[test]
fn eager_fragments_fit_the_receivers_ring_not_the_senders() {
    let _serial = serial();
    // Each side sizes its own inbound ring; a sender must cut fragments to
    // the peer's ring.
    run_all(
        "rings",
        &["1", "0"],
        &[
            &["path=eager", "iters=5", "sizes=7,1048579", "ring=4096"],
            &["path=eager", "iters=5", "sizes=7,1048579", "ring=262144"],
        ],
    );
}
