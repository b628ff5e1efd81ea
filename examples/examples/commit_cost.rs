//! What a commit costs: the time to build a halo exchange, the first one on
//! a job and the ones after it, as a code that commits an exchange per
//! field set does (the first measures the shared-memory thresholds towards
//! each neighbour's place; later ones reuse the measurement).
//!
//! ```text
//! cargo run --release -p sode-examples --example commit_cost [-- -n 4 --commits 12]
//! ```
//!
//! Without a launcher, `-n N` starts N ranks here (default 4); under
//! `mpirun` or `srun` the launcher's ranks are used. Every commit is
//! collective and starts after a barrier; each row gives the slowest rank's
//! time (what the job waits for) and the fastest's, and how many of the
//! rank's shared-memory peers were given thresholds measured by an earlier
//! exchange. Commit `i` exchanges `1 + (i - 1) % 6` fields, so the
//! exchanges differ as a code's field sets do; all stay alive to the end.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::{Decomposition, HaloExchange, Stencil, Transport};
use sode_examples::process_grid;
use sode_job::World;

#[derive(Parser, Debug)]
#[command(about = "Time to commit a halo exchange: the first on a job, and later ones")]
struct Args {
    /// Start this many ranks here (without a launcher; default 4).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// Exchanges to commit, one after another.
    #[arg(long, default_value_t = 12)]
    commits: usize,
    /// 2 or 3.
    #[arg(long, default_value_t = 2)]
    dims: usize,
    /// Global cells per axis.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// auto, shm, rdma or tcp.
    #[arg(long, default_value = "auto")]
    transport: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "commit_cost",
        Some(args.ranks.unwrap_or(4)),
        Duration::from_secs(600),
        || run(&args),
    )
}

/// One commit as every rank saw it.
struct Commit {
    slowest_ms: f64,
    fastest_ms: f64,
    /// Over the job: shared-memory peers given an earlier exchange's
    /// measurement, and all shared-memory peers.
    reused: usize,
    peers: usize,
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if a.commits == 0 {
        return Err("--commits must be at least 1".into());
    }
    let world = World::init(Duration::from_secs(60))?;
    let transport: Transport = a.transport.parse()?;
    let grid = process_grid(world.size(), a.dims);
    let d = Decomposition::new(
        &vec![a.size; a.dims],
        &grid,
        &vec![true; a.dims],
        1,
        Stencil::Full,
    )?;
    let timeout = Duration::from_secs(60);
    let mut alive = Vec::with_capacity(a.commits);
    let mut commits = Vec::with_capacity(a.commits);
    for i in 0..a.commits {
        world.barrier(timeout)?;
        let t = Instant::now();
        let halo = HaloExchange::builder(&world, &d)
            .transport(transport)
            .fields(1 + i % 6)
            .build()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let cal = halo.calibrations();
        let mine = [
            ms,
            cal.iter()
                .filter(|c| c.reused || c.from_earlier_job)
                .count() as f64,
            cal.len() as f64,
        ];
        let all = world.allgather(&encode(&mine), timeout)?;
        let all: Vec<[f64; 3]> = all.iter().map(|b| decode(b)).collect::<Result<_, _>>()?;
        commits.push(Commit {
            slowest_ms: all.iter().map(|r| r[0]).fold(0.0, f64::max),
            fastest_ms: all.iter().map(|r| r[0]).fold(f64::INFINITY, f64::min),
            reused: all.iter().map(|r| r[1] as usize).sum(),
            peers: all.iter().map(|r| r[2] as usize).sum(),
        });
        alive.push(halo);
    }
    if world.rank() == 0 {
        report(a, &grid, &commits);
    }
    world.barrier(timeout)?;
    Ok(())
}

fn report(a: &Args, grid: &[usize], commits: &[Commit]) {
    println!(
        "commit cost: {} ranks, grid {grid:?}, {}^{} cells, transport {}",
        grid.iter().product::<usize>(),
        a.size,
        a.dims,
        a.transport
    );
    println!(
        "| commit | slowest rank, ms | fastest rank, ms | shm peers on an earlier measurement (this job's or one an earlier job kept) |"
    );
    println!("|---:|---:|---:|---:|");
    for (i, c) in commits.iter().enumerate() {
        println!(
            "| {} | {:.1} | {:.1} | {} of {} |",
            i + 1,
            c.slowest_ms,
            c.fastest_ms,
            c.reused,
            c.peers
        );
    }
    let mut later: Vec<f64> = commits.iter().skip(1).map(|c| c.slowest_ms).collect();
    if later.is_empty() {
        return;
    }
    later.sort_by(f64::total_cmp);
    let median = later[later.len() / 2];
    println!(
        "first commit {:.1} ms; later commits (slowest rank): median {median:.1} ms, min {:.1} ms, max {:.1} ms over {}; first / later median {:.1}",
        commits[0].slowest_ms,
        later[0],
        later[later.len() - 1],
        later.len(),
        commits[0].slowest_ms / median
    );
}

fn encode(values: &[f64; 3]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn decode(b: &[u8]) -> Result<[f64; 3], String> {
    let mut out = [0.0; 3];
    if b.len() != 24 {
        return Err(format!("a rank sent {} bytes of timings, not 24", b.len()));
    }
    for (o, c) in out.iter_mut().zip(b.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        *o = f64::from_le_bytes(a);
    }
    Ok(out)
}
