//! Bandwidth and one-way latency of each intra-node path between two real
//! processes, beside memcpy and a plain two-copy channel measured in the same
//! run.
//!
//! ```text
//! cargo run --release -p sode-examples --example shm_paths [-- --quick]
//! ```
//!
//! The program starts a copy of itself as rank 1. Bandwidth is a one-way
//! stream: rank 0 sends, rank 1 receives and reads one byte of every cache
//! line of what arrived...  Two-copy is the classic
//! shared-buffer channel: the sender copies into shared memory, the receiver
//! copies out into its own buffer (here: a window put followed by a copy
//! out). Latency is half the round trip of a ping-pong. Ratios are to memcpy
//! of the same size in the same run.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sode_shm::{Context, Exchange, Path, PathPolicy, Peer};

const SIZES: [usize; 12] = [
    8,
    64,
    512,
    4096,
    32 << 10,
    64 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    16 << 20,
];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Eager,
    Get,
    Window,
    TwoCopy,
}

impl Mode {
    fn all() -> [Mode; 4] {
        [Mode::TwoCopy, Mode::Eager, Mode::Window, Mode::Get]
    }
    fn path(self) -> Path {
        match self {
            Mode::Eager => Path::Eager,
            Mode::Get => Path::Get,
            Mode::Window | Mode::TwoCopy => Path::Window,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Get => "get",
            Mode::Window => "window",
            Mode::TwoCopy => "two-copy",
        }
    }
}

fn stream_iters(size: usize, quick: bool) -> usize {
    let budget = if quick { 64 << 20 } else { 512 << 20 };
    (budget / size.max(64)).clamp(20, if quick { 2_000 } else { 20_000 })
}

fn latency_iters(quick: bool) -> usize {
    if quick {
        300
    } else {
        3000
    }
}

fn build(
    ctx: &mut Context,
    name: &str,
    peer: usize,
    size: usize,
    send: bool,
    mode: Mode,
) -> Exchange {
    let n = if send {
        Peer::new(peer).send(size, 0)
    } else {
        Peer::new(peer).recv(size, 0)
    };
    ctx.exchange()
        .name(name)
        .neighbour(n)
        .path_policy(PathPolicy::Force(mode.path()))
        .build()
        .unwrap_or_else(|e| panic!("building {name}: {e}"))
}

fn step(ex: &mut Exchange) {
    ex.start().expect("start");
    ex.wait(Duration::from_secs(60)).expect("wait");
}

/// The two-copy baseline's second copy, out of shared memory into the
/// receiver's own buffer. The destination is placed 256 bytes past the
/// source modulo 4 KiB, so glibc's `rep movsb` does not hit the short-distance
/// aliasing slowdown of AMD CPUs (which would flatter sode's paths).
fn copy_out(ex: &Exchange, scratch: &mut [u8]) -> u64 {
    let data = ex.recv_buf(0).expect("receive buffer");
    let src = data.as_ptr() as usize;
    let base = scratch.as_ptr() as usize;
    let start = (src + 256).wrapping_sub(base) & 4095;
    scratch[start..start + data.len()].copy_from_slice(data);
    scratch[start] as u64
}

/// One side of every measurement, in the same order on both ranks.
fn run(rank: usize, quick: bool, mut report: impl FnMut(String)) {
    let job = std::env::var("SODE_JOB_ID").expect("job id");
    let mut ctx = Context::new(&job, rank).expect("context");
    let peer = 1 - rank;
    let mut scratch = vec![0u8; (16 << 20) + 8192];
    let mut sink = 0u64;
    for mode in Mode::all() {
        for &size in &SIZES {
            // Stream rank 0 -> rank 1.
            let name = format!("bw_{}_{size}", mode.name().replace('-', "_"));
            let mut ex = build(&mut ctx, &name, peer, size, rank == 0, mode);
            let iters = stream_iters(size, quick);
            let mut t0 = Instant::now();
            for i in 0..=iters {
                if i == 1 {
                    t0 = Instant::now(); // the first message includes warm-up
                }
                step(&mut ex);
                if rank == 1 && mode == Mode::TwoCopy {
                    sink += copy_out(&ex, &mut scratch);
                }
            }
            if rank == 1 {
                let per = t0.elapsed().as_secs_f64() / iters as f64;
                report(format!("bw {} {size} {per}", mode.name()));
            }
            drop(ex);
            if mode == Mode::TwoCopy {
                continue;
            }
            // Ping-pong.
            let name = format!("lat_{}_{size}", mode.name());
            let mut ping = build(
                &mut ctx,
                &format!("{name}_ping"),
                peer,
                size,
                rank == 0,
                mode,
            );
            let mut pong = build(
                &mut ctx,
                &format!("{name}_pong"),
                peer,
                size,
                rank == 1,
                mode,
            );
            let iters = if size <= 64 << 10 {
                latency_iters(quick)
            } else {
                50
            };
            let mut t0 = Instant::now();
            for i in 0..=iters {
                if i == 1 {
                    t0 = Instant::now();
                }
                step(&mut ping);
                step(&mut pong);
            }
            if rank == 0 {
                let one_way = t0.elapsed().as_secs_f64() / iters as f64 / 2.0;
                report(format!("lat {} {size} {one_way}", mode.name()));
            }
        }
    }
    std::hint::black_box(sink);
}

/// glibc memcpy at its best: warm buffers, page-aligned source, the
/// destination at the same page offset or 256 bytes further (the faster of
/// the two is kept, so no aliasing penalty handicaps the baseline).
fn memcpy_seconds(size: usize) -> f64 {
    let src_store: Vec<u8> = (0..size + 4096).map(|i| i as u8).collect();
    let mut dst_store = vec![0u8; size + 8192];
    let page = |p: *const u8| (4096 - p as usize % 4096) % 4096;
    let s0 = page(src_store.as_ptr());
    let d0 = page(dst_store.as_ptr());
    let src = &src_store[s0..s0 + size];
    let iters = ((256usize << 20) / size.max(64)).clamp(20, 200_000);
    let mut best = f64::INFINITY;
    for delta in [0, 256] {
        let dst = &mut dst_store[d0 + delta..d0 + delta + size];
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..iters {
                dst.copy_from_slice(std::hint::black_box(src));
                std::hint::black_box(&mut *dst);
            }
            best = best.min(t.elapsed().as_secs_f64() / iters as f64);
        }
    }
    best
}

fn human(size: usize) -> String {
    if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

fn main() {
    sode_job::diag::init();
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::var_os("SODE_BENCH_PEER").is_some() {
        let out = std::io::stdout();
        run(1, quick, |line| {
            let mut o = out.lock();
            let _ = writeln!(o, "{line}");
            let _ = o.flush();
        });
        return;
    }
    let job = format!("bench{}", std::process::id());
    std::env::set_var("SODE_JOB_ID", &job);
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .args(std::env::args().skip(1))
        .env("SODE_BENCH_PEER", "1")
        .env("SODE_JOB_ID", &job)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start rank 1");
    let child_out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        BufReader::new(child_out)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let mut lines = Vec::new();
    run(0, quick, |l| lines.push(l));
    let status = child.wait().expect("rank 1");
    assert!(status.success(), "rank 1 failed");
    lines.extend(reader.join().expect("reader"));
    let value = |kind: &str, mode: &str, size: usize| -> f64 {
        lines
            .iter()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 4 && f[0] == kind && f[1] == mode && f[2] == size.to_string())
                    .then(|| f[3].parse().unwrap_or(f64::NAN))
            })
            .unwrap_or(f64::NAN)
    };
    println!(
        "| size | memcpy GB/s | two-copy GB/s (x memcpy) | eager GB/s (x) | window GB/s (x) | get GB/s (x) | one-way eager us | window us | get us |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &size in &SIZES {
        let mc = size as f64 / memcpy_seconds(size) / 1e9;
        let bw = |m: &str| {
            let g = size as f64 / value("bw", m, size) / 1e9;
            format!("{g:.2} ({:.2})", g / mc)
        };
        let lat = |m: &str| format!("{:.2}", value("lat", m, size) * 1e6);
        println!(
            "| {} | {mc:.2} | {} | {} | {} | {} | {} | {} | {} |",
            human(size),
            bw("two-copy"),
            bw("eager"),
            bw("window"),
            bw("get"),
            lat("eager"),
            lat("window"),
            lat("get"),
        );
    }
}
