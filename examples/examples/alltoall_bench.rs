//! sode's persistent all-to-all timed for `ci/alltoall.sh`, beside
//! `MPI_Alltoall` (`ci/mpi/alltoall.c`, the same sizes, rounds and output):
//! per block size, `--rounds` rounds of `--iters` all-to-alls, each round
//! timed on the slowest rank, every block of the last iteration checked.
//! Prints one line per size: `sode <bytes per pair> median_us min_us`.
//!
//! ```sh
//! cargo run --release -p sode-examples --example alltoall_bench -- -n 4
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::{AllToAll, Transport};
use sode_job::World;

#[derive(Parser, Debug)]
#[command(about = "sode's persistent all-to-all, timed beside MPI_Alltoall")]
struct Args {
    /// Start this many ranks here (without a launcher; default 4).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// All-to-alls per round (a tenth of them at 1 MiB).
    #[arg(long, default_value_t = 200)]
    iters: usize,
    /// Rounds per size (the median and minimum are printed).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// auto, shm, rdma or tcp.
    #[arg(long, default_value = "auto")]
    transport: String,
    /// RDMA queue pairs per peer.
    #[arg(long, default_value_t = 2)]
    engines: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "alltoall_bench",
        Some(args.ranks.unwrap_or(4)),
        Duration::from_secs(3600),
        || run(&args),
    )
}

/// Byte `o` of the block `from` sends `to`, as `ci/mpi/alltoall.c` fills
/// it.
fn byte(from: usize, to: usize, block: usize, o: usize) -> u8 {
    ((to * block + o) * 7 + from) as u8
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if a.iters == 0 || !(1..=100).contains(&a.rounds) {
        return Err("--iters must be at least 1 and --rounds 1 to 100".into());
    }
    let world = World::init(Duration::from_secs(60))?;
    let (me, n) = (world.rank(), world.size());
    let transport: Transport = a.transport.parse()?;
    for block in [8usize, 1024, 65536, 1 << 20] {
        let mut x = AllToAll::builder(&world, block)
            .transport(transport)
            .engines(a.engines)
            .build()?;
        for peer in 0..n {
            for (o, b) in x.send_block(peer)?.iter_mut().enumerate() {
                *b = byte(me, peer, block, o);
            }
        }
        let iters = if block >= 1 << 20 {
            a.iters.div_ceil(10)
        } else {
            a.iters
        };
        let once = |x: &mut AllToAll| -> Result<(), sode::HaloError> {
            x.start()?;
            x.wait(Duration::from_secs(60))
        };
        once(&mut x)?;
        let mut rounds = Vec::with_capacity(a.rounds);
        for _ in 0..a.rounds {
            world.barrier(Duration::from_secs(60))?;
            let t0 = Instant::now();
            for _ in 0..iters {
                once(&mut x)?;
            }
            let mine = t0.elapsed().as_secs_f64() / iters as f64 * 1e6;
            let all = world.allgather(&mine.to_le_bytes(), Duration::from_secs(60))?;
            let slowest = all
                .iter()
                .map(|b| f64::from_le_bytes(b.as_slice().try_into().unwrap_or([0; 8])))
                .fold(0.0, f64::max);
            rounds.push(slowest);
        }
        for peer in 0..n {
            let got = x.recv_block(peer)?;
            if let Some(o) = (0..block).find(|&o| got[o] != byte(peer, me, block, o)) {
                return Err(
                    format!("rank {me}: byte {o} of the block from rank {peer} is wrong").into(),
                );
            }
        }
        if me == 0 {
            rounds.sort_by(f64::total_cmp);
            println!(
                "sode {block} {:.2} {:.2}",
                rounds[rounds.len() / 2],
                rounds[0]
            );
        }
    }
    Ok(())
}
