//! `sode-shm-check`: checks the intra-node channel on this machine.
//!
//! ```text
//! sode-shm-check probe
//! sode-shm-check run job=J rank=R peers=1,2 sizes=0,7,4096 [path=auto|eager|get|window]
//!     [private=1] [iters=N] [misalign=K] [deny-cma=1] [stall-after=K]
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

fn probe() -> Result<(), String> {
    let caps = sode_shm::ShmCaps::probe();
    println!("cross-memory attach: {:?}", caps.cross_memory_attach);
    println!("yama ptrace_scope:   {:?}", caps.yama_ptrace_scope);
    println!("seccomp mode:        {:?}", caps.seccomp_mode);
    println!(
        "memlock limit:       {}",
        caps.memlock_limit
            .map(|l| format!("{} KiB", l / 1024))
            .unwrap_or_else(|| "unlimited".into())
    );
    for n in &caps.notes {
        println!("note: {n}");
    }
    let t = Thresholds::from_env_or_measure().map_err(|e| e.to_string())?;
    println!(
        "thresholds:          eager up to {} B (window beyond), get from {} B (private receive buffers){}",
        t.eager_max,
        t.get_min,
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

fn run(args: &HashMap<String, String>) -> Result<(), Failure> {
    let usage = |m: String| Failure::Channel(m);
    let get = |k: &str| args.get(k).map(String::as_str);
    let job = get("job").ok_or_else(|| usage("job= is required".into()))?;
    let rank: usize = get("rank")
        .ok_or_else(|| usage("rank= is required".into()))?
        .parse()
        .map_err(|_| usage("rank= must be a number".into()))?;
    let peers = parse_list(get("peers").unwrap_or("")).map_err(usage)?;
    let sizes = parse_list(get("sizes").unwrap_or("4096")).map_err(usage)?;
    let num = |k: &str, d: u64| -> Result<u64, Failure> {
        get(k)
            .map(|v| {
                v.parse()
                    .map_err(|_| usage(format!("{k}= must be a number")))
            })
            .unwrap_or(Ok(d))
    };
    let iters = num("iters", 3)?;
    let misalign = num("misalign", 0)? as usize;
    let stall_after = get("stall-after").map(|v| v.parse::<u64>().unwrap_or(0));
    let deadline = Duration::from_millis(num("deadline-ms", 20_000)?);
    let policy = match get("path").unwrap_or("auto") {
        "auto" => PathPolicy::Auto,
        p => PathPolicy::Force(p.parse::<Path>().map_err(usage)?),
    };
    if get("deny-cma") == Some("1") {
        sode_shm::sys::seccomp::deny_cross_memory_attach()
            .map_err(|e| usage(format!("installing the seccomp filter: {e}")))?;
    }
    #[cfg(feature = "hwloc")]
    if get("bind") == Some("1") {
        let b = sode_shm::topology::bind_to_core(rank).map_err(|e| usage(e.to_string()))?;
        println!(
            "rank {rank}: bound to core {} (PUs {:?}, NUMA {:?})",
            b.core, b.processing_units, b.numa_nodes
        );
    }
    let mut ctx = Context::new(job, rank).map_err(|e| usage(e.to_string()))?;
    if let Some(t) = get("thresholds") {
        let v = parse_list(t).map_err(usage)?;
        let [eager_max, get_min] = v[..] else {
            return Err(usage("thresholds= takes EAGER_MAX,GET_MIN".into()));
        };
        ctx.set_thresholds(Thresholds {
            eager_max,
            get_min,
            measured: false,
        });
    }
    let mut builder = ctx
        .exchange()
        .path_policy(policy)
        .private_receive(get("private") == Some("1"))
        .setup_timeout(Duration::from_millis(num("setup-ms", 30_000)?));
    if let Some(r) = get("ring") {
        builder = builder.ring_capacity(
            r.parse()
                .map_err(|_| usage("ring= must be a number".into()))?,
        );
    }
    let mut layout = Vec::new();
    for &p in &peers {
        for (k, &s) in sizes.iter().enumerate() {
            builder = builder.neighbour(
                Peer::new(p)
                    .send(s, k as u32)
                    .recv(s, k as u32)
                    .misaligned(misalign),
            );
            layout.push((p, k as u32, s));
        }
    }
    let mut ex = builder
        .build()
        .map_err(|e| Failure::Channel(e.to_string()))?;
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
    for note in &report.notes {
        println!("rank {rank}: note: {note}");
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut expect = vec![0u8; max];
    let mut verified = 0u64;
    let started = Instant::now();
    let chan = |e: sode_shm::ShmError| Failure::Channel(e.to_string());
    for it in 1..=iters {
        for (i, &(p, tag, _)) in layout.iter().enumerate() {
            fill(ex.send_buf_mut(i).map_err(chan)?, rank, p, tag, it);
        }
        ex.start().map_err(chan)?;
        if stall_after == Some(it - 1) {
            println!("rank {rank}: stalled at iteration {it}");
            let _ = std::io::stdout().flush();
            std::thread::sleep(Duration::from_secs(3600));
        }
        ex.wait(Instant::now() + deadline).map_err(chan)?;
        for (i, &(p, tag, s)) in layout.iter().enumerate() {
            let got = ex.recv_buf(i).map_err(chan)?;
            fill(&mut expect[..s], p, rank, tag, it);
            if got != &expect[..s] {
                let at = got
                    .iter()
                    .zip(&expect)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(Failure::Data(format!(
                    "iteration {it}, tag {tag} from rank {p}: {s} bytes differ first at byte {at}"
                )));
            }
            verified += s as u64;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "ok rank {rank}: {iters} exchanges, {verified} bytes verified, {:.2} us per exchange",
        secs * 1e6 / iters.max(1) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
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
        "probe" => match probe() {
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
