//! Criterion benches of the RDMA write path (`sode-transport` on a real
//! device: SoftRoCE's rxe0 in the guest, `ci/softroce/rdma-bench.sh`): an
//! exchange between two ranks, each writing `size` bytes into the other's
//! window every iteration, split over 1, 2 or 4 queue pairs (engines), from
//! 8 B to 1 MiB, and on one queue pair into windows of two slots (the
//! credit a step ahead); time per exchange (start to wait, both
//! directions). The
//! two ranks are two threads of this process, each with its own queue
//! pairs, meeting over loopback TCP. Without an RDMA device it says so and
//! measures nothing.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sode_job::{LaunchInfo, Secret, World};
use sode_transport::{Device, DeviceSelector, PersistentWrites, RdmaExchangeBuilder, Write};

const SIZES: [usize; 6] = [8, 512, 4096, 32 << 10, 256 << 10, 1 << 20];
/// (queue pairs, window slots): two slots put the credit a step ahead.
const SHAPES: [(usize, usize); 4] = [(1, 1), (1, 2), (2, 1), (4, 1)];

fn world(rank: usize, port: u16) -> World {
    let secret = Secret::from_hex(&"4d".repeat(32)).expect("hex");
    let launch = LaunchInfo {
        job_id: (rank == 0).then(|| "rdma-bench".to_string()),
        ..LaunchInfo::loopback(rank, 2, port, secret)
    };
    World::init_with(&launch, Duration::from_secs(60)).expect("world")
}

/// Rank `rank`'s exchange: a buffer and a window of `size` bytes (of
/// `slots` slots), the write split into `engines` contiguous pieces, one
/// per queue pair.
fn exchange(world: &World, size: usize, engines: usize, slots: usize) -> PersistentWrites {
    let dev = Device::open(&DeviceSelector::from_env().expect("selector")).expect("device");
    let peer = 1 - world.rank();
    let mut b = RdmaExchangeBuilder::new(&dev).engines(engines);
    let src = b.buffer(size).expect("buffer");
    let home = b.buffer(size * slots).expect("window buffer");
    let window = b
        .window_in_slots(home, 0, size, slots, &[peer])
        .expect("window");
    let piece = size.div_ceil(engines);
    for e in 0..engines {
        let at = e * piece;
        if at < size {
            b.write(Write {
                peer,
                engine: e,
                src,
                src_offset: at,
                window,
                dst_offset: at,
                len: piece.min(size - at),
            });
        }
    }
    b.build(world, Duration::from_secs(60)).expect("build")
}

fn step(x: &mut PersistentWrites) {
    x.start().expect("start");
    x.wait_for(Duration::from_secs(60)).expect("wait");
}

fn writes(c: &mut Criterion) {
    if Device::open(&DeviceSelector::from_env().expect("selector")).is_err() {
        eprintln!("rdma_writes: no RDMA device: nothing measured (run it in the SoftRoCE guest: bash ci/softroce/run.sh bash ci/softroce/rdma-bench.sh)");
        return;
    }
    let mut group = c.benchmark_group("rdma_exchange");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    for (engines, slots) in SHAPES {
        for size in SIZES {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("port")
                .port();
            let (to_peer, commands) = mpsc::channel::<u64>();
            let (acks, from_peer) = mpsc::channel::<()>();
            let peer = std::thread::spawn(move || {
                let w = world(1, port);
                let mut x = exchange(&w, size, engines, slots);
                while let Ok(n) = commands.recv() {
                    for _ in 0..n {
                        step(&mut x);
                    }
                    let _ = acks.send(());
                }
            });
            let w = world(0, port);
            let mut x = exchange(&w, size, engines, slots);
            group.throughput(Throughput::Bytes(size as u64));
            let name = match slots {
                1 => format!("{engines}qp"),
                _ => format!("{engines}qp-{slots}slots"),
            };
            group.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter_custom(|n| {
                    to_peer.send(n).expect("peer alive");
                    let t = Instant::now();
                    for _ in 0..n {
                        step(&mut x);
                    }
                    from_peer.recv().expect("peer ack");
                    t.elapsed()
                })
            });
            drop(to_peer);
            peer.join().expect("peer");
        }
    }
    group.finish();
}

criterion_group!(benches, writes);
criterion_main!(benches);
