//! `sode-shm-check`: checks the intra-node channel on this machine.
//!
//! ```text
//! sode-shm-check probe [deny-pidfd=1]
//! sode-shm-check run job=J rank=R peers=1,2 sizes=0,7,4096 [path=auto|eager|get|window]
//!     [private=1] [iters=N] [misalign=K] [deny-cma=1] [deny-pidfd=1] [stall-after=K]
//!     [deadline-ms=MS] [setup-ms=MS] [bind=1] [ring=BYTES]
//! ```
//!
//! `run` builds one exchange with every peer (one message per size each way,
//! tagged by the size's index), fills every send buffer with a pattern that
//! depends on sender, receiver, tag and iteration, and verifies every byte
//! that arrives. It exits 0 and prints `ok` when all data was right, 3 on a
//! channel error (printed), 4 on wrong data. Tests spawn it as real
//! processes.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sode_shm::{Context, Path, PathPolicy, Peer, Thresholds};

fn fill(buf: &mut [u8], from: usize, to: usize, tag: u32, iter: u64) {
    let mut x = (from as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((to as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        .wrapping_add((tag as u64 + 1).wrapping_mul(0x1656_67B1_9E37_79F9))
        .wrapping_add(iter.wrapping_mul(0x27D4_EB2F_1656_67C5))
        | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

fn parse_list(v: &str) -> Result<Vec<usize>, String> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim().parse().map_err(|_| format!("not a number: {s:?}")))
        .collect()
}

fn probe(args: &HashMap<String, String>) -> Result<(), String> {
    if args.get("deny-pidfd").map(String::as_str) == Some("1") {
        sode_shm::sys::seccomp::deny_pidfd()
            .map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    let caps = sode_shm::ShmCaps::probe();
    println!("seccomp mode:        {:?}", caps.seccomp_mode);
    println!(
        "process handles:     {}",
        match &caps.process_handles {
            Ok(()) => "pidfds",
            Err(why) => why,
        }
    );
    println!(
        "memlock limit:       {}",
        caps.memlock_limit
            .map(|l| format!("{} KiB", l / 1024))
            .unwrap_or_else(|| "unlimited".into())
    );
    let t = Thresholds::from_env_or_measure().map_err(|e| e.to_string())?;
    println!(
        "thresholds:          eager up to {} B (window beyond), get from {} B (private receive buffers), read in place from {} B (shared fields){}",
        t.eager_max,
        t.get_min,
        t.read_min,
        if t.measured { ", measured" } else { ", set" }
    );
    #[cfg(feature = "hwloc")]
    match sode_shm::topology::NodeTopology::probe() {
        Ok(t) => println!(
            "topology:            {} package(s), {} NUMA node(s), {} core(s), {} PU(s), LLC {}",
            t.packages,
            t.numa_nodes,
            t.cores,
            t.processing_units,
            t.last_level_cache
                .map(|b| format!("{} KiB", b / 1024))
                .unwrap_or_else(|| "unknown".into())
        ),
        Err(e) => println!("topology:            {e}"),
    }
    Ok(())
}

enum Failure {
    Channel(String),
    Data(String),
}

/// The command line's `key=value` settings.
struct Settings<'a> {
    args: &'a HashMap<String, String>,
}

impl Settings<'_> {
    fn get(&self, k: &str) -> Option<&str> {
        self.args.get(k).map(String::as_str)
    }

    fn num(&self, k: &str, default: u64) -> Result<u64, Failure> {
        self.get(k)
            .map(|v| {
                v.parse()
                    .map_err(|_| Failure::Channel(format!("{k}= must be a number")))
            })
            .unwrap_or(Ok(default))
    }
}

/// One message of the check: to and from `peer` with `tag`, `len` bytes.
#[derive(Clone, Copy)]
struct Message {
    peer: usize,
    tag: u32,
    len: usize,
}

fn chan(e: sode_shm::ShmError) -> Failure {
    Failure::Channel(sode_job::diag::chain(&e))
}

fn run(args: &HashMap<String, String>) -> Result<(), Failure> {
    let usage = Failure::Channel;
    let set = Settings { args };
    let job = set
        .get("job")
        .ok_or_else(|| usage("job= is required".into()))?;
    let rank: usize = set
        .get("rank")
        .ok_or_else(|| usage("rank= is required".into()))?
        .parse()
        .map_err(|_| usage("rank= must be a number".into()))?;
    let sizes = parse_list(set.get("sizes").unwrap_or("4096")).map_err(usage)?;
    let iters = set.num("iters", 3)?;
    let stall_after = set
        .get("stall-after")
        .map(|v| v.parse::<u64>().unwrap_or(0));
    let deadline = Duration::from_millis(set.num("deadline-ms", 20_000)?);
    prepare(&set, rank)?;
    let mut ctx = context(&set, job, rank)?;
    let (mut ex, messages) = build(&set, &mut ctx, &sizes)?;
    let report = ex.report().clone();
    for m in &report.recvs {
        println!(
            "rank {rank}: receive tag {} from rank {}: {} bytes over {}",
            m.tag,
            m.peer,
            m.len,
            m.path.name()
        );
    }
    for c in &report.calibrations {
        println!(
            "rank {rank}: thresholds for rank {}: eager up to {} B, get from {} B, read in place from {} B, {}, towards CPUs {:?}, responder on CPU {}{}",
            c.peer,
            c.thresholds.eager_max,
            c.thresholds.get_min,
            c.thresholds.read_min,
            match (c.thresholds.measured, c.ran_on) {
                (true, _) => "measured",
                (false, Some(_)) => "not measured (the probe gave up)",
                (false, None) => "set",
            },
            c.towards,
            c.ran_on.map_or("-".into(), |x| x.to_string()),
            match (c.reused, c.from_earlier_job) {
                (true, _) => " (reused)",
                (false, true) => " (kept by an earlier job)",
                _ => "",
            }
        );
    }
    for note in &report.notes {
        println!("rank {rank}: note: {note}");
    }
    let started = Instant::now();
    let mut verified = 0u64;
    for it in 1..=iters {
        for (i, m) in messages.iter().enumerate() {
            fill(ex.send_buf_mut(i).map_err(chan)?, rank, m.peer, m.tag, it);
        }
        ex.start().map_err(chan)?;
        if stall_after == Some(it - 1) {
            println!("rank {rank}: stalled at iteration {it}");
            let _ = std::io::stdout().flush();
            std::thread::sleep(Duration::from_secs(3600));
        }
        ex.wait(Instant::now() + deadline).map_err(chan)?;
        verified += verify(&ex, &messages, rank, it)?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "ok rank {rank}: {iters} exchanges, {verified} bytes verified, {:.2} us per exchange",
        secs * 1e6 / iters.max(1) as f64
    );
    Ok(())
}

/// Fault injection and binding, before the channel exists.
fn prepare(set: &Settings<'_>, rank: usize) -> Result<(), Failure> {
    if set.get("deny-cma") == Some("1") {
        sode_shm::sys::seccomp::deny_cross_memory_attach()
            .map_err(|e| Failure::Channel(format!("installing the seccomp filter: {e}")))?;
    }
    if set.get("deny-pidfd") == Some("1") {
        sode_shm::sys::seccomp::deny_pidfd()
            .map_err(|e| Failure::Channel(format!("installing the seccomp filter: {e}")))?;
    }
    #[cfg(feature = "hwloc")]
    if set.get("bind") == Some("1") {
        let b = sode_shm::topology::bind_to_core(rank).map_err(chan)?;
        println!(
            "rank {rank}: bound to core {} (PUs {:?}, NUMA {:?})",
            b.core, b.processing_units, b.numa_nodes
        );
    }
    #[cfg(not(feature = "hwloc"))]
    let _ = rank;
    Ok(())
}

fn context(set: &Settings<'_>, job: &str, rank: usize) -> Result<Context, Failure> {
    let mut ctx = Context::new(job, rank).map_err(chan)?;
    if let Some(t) = set.get("thresholds") {
        let v = parse_list(t).map_err(Failure::Channel)?;
        let [eager_max, get_min] = v[..] else {
            return Err(Failure::Channel(
                "thresholds= takes EAGER_MAX,GET_MIN".into(),
            ));
        };
        ctx.set_thresholds(Thresholds {
            eager_max,
            get_min,
            read_min: sode_shm::READ_MIN_FALLBACK,
            measured: false,
        });
    }
    Ok(ctx)
}

/// The exchange: every size to and from every peer, one tag per size.
fn build(
    set: &Settings<'_>,
    ctx: &mut Context,
    sizes: &[usize],
) -> Result<(sode_shm::Exchange, Vec<Message>), Failure> {
    let usage = Failure::Channel;
    let peers = parse_list(set.get("peers").unwrap_or("")).map_err(usage)?;
    let misalign = set.num("misalign", 0)? as usize;
    let policy = match set.get("path").unwrap_or("auto") {
        "auto" => PathPolicy::Auto,
        p => PathPolicy::Force(p.parse::<Path>().map_err(usage)?),
    };
    let mut builder = ctx
        .exchange()
        .path_policy(policy)
        .private_receive(set.get("private") == Some("1"))
        .setup_timeout(Duration::from_millis(set.num("setup-ms", 30_000)?));
    if let Some(r) = set.get("ring") {
        builder = builder.ring_capacity(
            r.parse()
                .map_err(|_| usage("ring= must be a number".into()))?,
        );
    }
    let mut messages = Vec::new();
    for &peer in &peers {
        for (k, &len) in sizes.iter().enumerate() {
            let tag = k as u32;
            builder = builder.neighbour(
                Peer::new(peer)
                    .send(len, tag)
                    .recv(len, tag)
                    .misaligned(misalign),
            );
            messages.push(Message { peer, tag, len });
        }
    }
    Ok((builder.build().map_err(chan)?, messages))
}

/// Checks every byte received in iteration `it`; the bytes checked.
fn verify(
    ex: &sode_shm::Exchange,
    messages: &[Message],
    rank: usize,
    it: u64,
) -> Result<u64, Failure> {
    let mut verified = 0;
    for (i, m) in messages.iter().enumerate() {
        let got = ex.recv_buf(i).map_err(chan)?;
        let mut expect = vec![0u8; m.len];
        fill(&mut expect, m.peer, rank, m.tag, it);
        if got != &expect[..] {
            let at = got
                .iter()
                .zip(&expect)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(Failure::Data(format!(
                "iteration {it}, tag {} from rank {}: {} bytes differ first at byte {at}",
                m.tag, m.peer, m.len
            )));
        }
        verified += m.len as u64;
    }
    Ok(verified)
}

fn main() -> ExitCode {
    sode_job::diag::init();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mode = argv.first().map(String::as_str).unwrap_or("");
    let args: HashMap<String, String> = argv
        .iter()
        .skip(1)
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    match mode {
        "probe" => match probe(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sode-shm-check: {e}");
                ExitCode::from(3)
            }
        },
        "run" => match run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Channel(e)) => {
                eprintln!("sode-shm-check: error: {e}");
                ExitCode::from(3)
            }
            Err(Failure::Data(e)) => {
                eprintln!("sode-shm-check: WRONG DATA: {e}");
                ExitCode::from(4)
            }
        },
        _ => {
            eprintln!("usage: sode-shm-check probe | run job=J rank=R peers=.. sizes=.. [path=..] [iters=..]");
            ExitCode::from(2)
        }
    }
}
