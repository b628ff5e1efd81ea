//! Criterion benches of the intra-node paths: a one-way stream of messages
//! from rank 0 to rank 1, beside memcpy of the same size. The two ranks are
//! two threads of this process with their own contexts (the full
//! two-process table comes from `examples/shm_paths`).

use std::hint::black_box;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sode_shm::{Context, Exchange, Path, PathPolicy, Peer};

const SIZES: [usize; 3] = [4096, 256 << 10, 1 << 20];
const PATHS: [Path; 3] = [Path::Eager, Path::Window, Path::Get];

fn build_all(ctx: &mut Context, sender: bool) -> Vec<Exchange> {
    let peer = if sender { 1 } else { 0 };
    let mut out = Vec::new();
    for path in PATHS {
        for size in SIZES {
            let n = if sender {
                Peer::new(peer).send(size, 0)
            } else {
                Peer::new(peer).recv(size, 0)
            };
            out.push(
                ctx.exchange()
                    .name(&format!("{}_{size}", path.name()))
                    .neighbour(n)
                    .path_policy(PathPolicy::Force(path))
                    .build()
                    .expect("build"),
            );
        }
    }
    out
}

fn step(ex: &mut Exchange) {
    ex.start().expect("start");
    ex.wait(Instant::now() + Duration::from_secs(30))
        .expect("wait");
}

fn paths(c: &mut Criterion) {
    let job = format!("crit{}", std::process::id());
    let (to_peer, commands) = mpsc::channel::<(usize, u64)>();
    let (acks, from_peer) = mpsc::channel::<()>();
    let peer_job = job.clone();
    let peer = std::thread::spawn(move || {
        let mut ctx = Context::new(&peer_job, 1).expect("context");
        let mut exchanges = build_all(&mut ctx, false);
        while let Ok((which, n)) = commands.recv() {
            for _ in 0..n {
                step(&mut exchanges[which]);
            }
            let _ = acks.send(());
        }
    });
    let mut ctx = Context::new(&job, 0).expect("context");
    let mut exchanges = build_all(&mut ctx, true);
    let mut group = c.benchmark_group("shm_stream");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    for (p, path) in PATHS.iter().enumerate() {
        for (s, &size) in SIZES.iter().enumerate() {
            let which = p * SIZES.len() + s;
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_function(BenchmarkId::new(path.name(), size), |b| {
                b.iter_custom(|n| {
                    to_peer.send((which, n)).expect("peer alive");
                    let t = Instant::now();
                    for _ in 0..n {
                        step(&mut exchanges[which]);
                    }
                    from_peer.recv().expect("peer ack");
                    t.elapsed()
                })
            });
        }
    }
    for &size in &SIZES {
        let src = vec![1u8; size];
        let mut dst = vec![0u8; size + 4096];
        // Keep the destination away from the source's page offset (see
        // sode-shm's copy routine on AMD's short-distance rep movsb).
        let off = (src.as_ptr() as usize + 256).wrapping_sub(dst.as_ptr() as usize) & 4095;
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::new("memcpy", size), |b| {
            b.iter(|| {
                dst[off..off + size].copy_from_slice(black_box(&src));
                black_box(&mut dst);
            })
        });
    }
    group.finish();
    drop(to_peer);
    let _ = peer.join();
}

criterion_group!(benches, paths);
criterion_main!(benches);
