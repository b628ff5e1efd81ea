//! The RSched paper's SCALE-LES3 benchmark on the real transport: for each
//! Table 1 row (vertical size k), each direction set and each scheduling
//! algorithm, the measured time per exchange beside the simulator's
//! prediction, as a table and a CSV.
//!
//! ```text
//! scale_les3 -n 4 --rows 60,872 --sets ew,ns,all8 --algorithms round-robin:4,bl:4,auto --iters 200
//! scale_les3 -n 4 --transport shm          # the same exchanges over shared memory
//! ```
//!
//! The ranks form a periodic process grid (default 2 x 2); every rank runs
//! the paper's pattern: each put goes to the neighbour in its direction, into
//! a window that neighbour made for it. Each exchange runs as in the paper's
//! pseudo-collective mode: a barrier, start, wait, a barrier; the time from
//! start to the end of wait is measured on rank 0 (the barriers excluded).
//! The paper ran 41,000 exchanges per point; `--iters` sets ours.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::plan::{machine_of, writes_from_plan};
use sode_job::World;
use sode_scheduler::patterns::{scale_les3, DirectionSet, SCALE_LES3_K};
use sode_scheduler::{Algorithm, Machine, Pattern};
use sode_transport::{Device, DeviceSelector, RdmaExchangeBuilder, WindowId, Write};

#[derive(Parser, Debug)]
#[command(
    about = "SCALE-LES3 halo exchanges per Table 1 row, set and algorithm: measured vs simulated"
)]
struct Args {
    /// Start this many ranks here (without a launcher; default: the grid's).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// Periodic process grid, x,y.
    #[arg(long, value_delimiter = ',', default_value = "2,2")]
    grid: Vec<usize>,
    /// Vertical sizes k (Table 1 rows); default all eleven.
    #[arg(long, value_delimiter = ',')]
    rows: Vec<u64>,
    /// Direction sets: ew, ns, ewns, diag, all8.
    #[arg(long, value_delimiter = ',', default_value = "ew,ns,ewns,diag,all8")]
    sets: Vec<String>,
    /// Scheduling algorithms (RDMA only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "round-robin:1,round-robin:2,round-robin:4,bl:1,bl:2,bl:4,auto"
    )]
    algorithms: Vec<String>,
    /// Exchanges per point (after 3 warm-up exchanges).
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// rdma (queue pairs per neighbour = the K machine's 4 engines) or shm.
    #[arg(long, default_value = "rdma")]
    transport: String,
    /// The model the algorithms plan for and the simulator predicts with:
    /// calibrated (measured on this device at start-up) or k (the paper's K computer).
    #[arg(long, default_value = "calibrated")]
    model: String,
    /// Write the table as CSV here too.
    #[arg(long)]
    csv: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "scale_les3",
        Some(args.ranks.unwrap_or(args.grid.iter().product())),
        Duration::from_secs(7200),
        || run(&args),
    )
}

fn offset_of(direction: &str) -> (i64, i64) {
    let dx = if direction.contains('E') {
        1
    } else if direction.contains('W') {
        -1
    } else {
        0
    };
    let dy = if direction.contains('N') {
        1
    } else if direction.contains('S') {
        -1
    } else {
        0
    };
    (dx, dy)
}

struct Stats {
    median: f64,
    min: f64,
    mean: f64,
}

fn stats(mut t: Vec<f64>) -> Stats {
    t.sort_by(f64::total_cmp);
    Stats {
        median: t[t.len() / 2],
        min: t[0],
        mean: t.iter().sum::<f64>() / t.len() as f64,
    }
}

/// One measured point of the table.
struct Point<'a> {
    k: u64,
    set: &'a str,
    algorithm: &'a str,
    stats: Stats,
    /// The simulator's prediction (RDMA only).
    simulated: Option<f64>,
}

impl Point<'_> {
    fn markdown(&self) -> String {
        let s = &self.stats;
        let simulated = self
            .simulated
            .map_or("-".to_string(), |v| format!("{v:.1}"));
        format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {simulated} |",
            self.k, self.set, self.algorithm, s.median, s.min, s.mean
        )
    }

    fn csv(&self, transport: &str, iters: usize) -> String {
        let s = &self.stats;
        let simulated = self.simulated.map_or(String::new(), |v| format!("{v:.3}"));
        format!(
            "{},{},{},{transport},{:.3},{:.3},{:.3},{simulated},{iters}",
            self.k, self.set, self.algorithm, s.median, s.min, s.mean
        )
    }
}

fn print_header(a: &Args, machine: &Machine, shm: bool) {
    let (px, py) = (a.grid[0], a.grid[1]);
    println!(
        "SCALE-LES3 on a {px} x {py} periodic grid over {}, {} exchanges per point (paper: 41,000), pseudo-collective",
        if shm { "shared memory" } else { "RDMA" },
        a.iters
    );
    if !shm {
        println!(
            "model ({}): {} queue pairs at {:.3} GB/s, node {:.3} GB/s, {:.2} us per command, {:.1} us fixed",
            a.model, machine.engines, machine.engine_gbps, machine.node_gbps, machine.command_overhead_us, machine.fixed_overhead_us
        );
    }
    println!(
        "| k | set | algorithm | measured median us | min us | mean us | simulated us ({} model) |",
        a.model
    );
    println!("|---:|---|---|---:|---:|---:|---:|");
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if a.grid.len() != 2 || a.grid.contains(&0) {
        return Err("--grid takes two positive numbers, x,y".into());
    }
    let world = World::init(Duration::from_secs(60))?;
    let me = world.rank();
    let (px, py) = (a.grid[0] as i64, a.grid[1] as i64);
    if world.size() as i64 != px * py {
        return Err(format!(
            "the grid {px} x {py} needs {} ranks, the job has {}",
            px * py,
            world.size()
        )
        .into());
    }
    let (mx, my) = (me as i64 % px, me as i64 / px);
    let rank_at =
        |dx: i64, dy: i64| ((mx + dx).rem_euclid(px) + px * (my + dy).rem_euclid(py)) as usize;
    let rows: Vec<u64> = if a.rows.is_empty() {
        SCALE_LES3_K.to_vec()
    } else {
        a.rows.clone()
    };
    let sets: Vec<DirectionSet> = a.sets.iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
    let shm = match a.transport.as_str() {
        "rdma" => false,
        "shm" => true,
        o => return Err(format!("unknown transport {o:?} (rdma, shm)").into()),
    };
    let algorithms: Vec<String> = if shm {
        vec!["-".into()]
    } else {
        a.algorithms.clone()
    };
    let dev = if shm {
        None
    } else {
        Some(Device::open(&DeviceSelector::from_env()?)?)
    };
    let machine = machine_for(&a.model, dev.as_ref())?;
    let mut shm_ctx = if shm {
        Some(sode_shm::Context::from_world(&world)?)
    } else {
        None
    };
    let mut csv = String::from("k,set,algorithm,transport,measured_median_us,measured_min_us,measured_mean_us,simulated_us,iterations\n");
    if me == 0 {
        print_header(a, &machine, shm);
    }
    for &k in &rows {
        for &set in &sets {
            let pattern: Pattern = scale_les3(k, set, machine)?;
            for alg in &algorithms {
                let (simulated, times) = if shm {
                    let ctx = shm_ctx.as_mut().ok_or("no shared-memory context")?;
                    (None, run_shm(&world, ctx, &pattern, &rank_at, a.iters)?)
                } else {
                    let algorithm: Algorithm = alg.parse()?;
                    let simulated = sode_scheduler::plan(&pattern, algorithm)?.simulated_us;
                    let dev = dev.as_ref().ok_or("no RDMA device")?;
                    let times = run_rdma(
                        &world,
                        dev,
                        &pattern,
                        alg,
                        &rank_at,
                        a.iters,
                        machine.engines,
                    )?;
                    (Some(simulated), times)
                };
                let point = Point {
                    k,
                    set: set.name(),
                    algorithm: alg,
                    stats: stats(times),
                    simulated,
                };
                if me == 0 {
                    println!("{}", point.markdown());
                }
                writeln!(csv, "{}", point.csv(&a.transport, a.iters))?;
            }
        }
    }
    if me == 0 {
        if let Some(path) = &a.csv {
            std::fs::write(path, &csv)?;
            println!("CSV written to {path}");
        }
    }
    world.barrier(Duration::from_secs(60))?;
    Ok(())
}

/// The machine model `--model` names: the K computer's, or one calibrated
/// on the device (the K computer's without one, over shared memory).
fn machine_for(model: &str, dev: Option<&Device>) -> Result<Machine, Box<dyn std::error::Error>> {
    Ok(match (model, dev) {
        ("k", _) | ("calibrated", None) => Machine::K_COMPUTER,
        ("calibrated", Some(d)) => {
            machine_of(&sode_transport::calibrate(d, Machine::K_COMPUTER.engines)?)
        }
        (o, _) => return Err(format!("unknown model {o:?} (calibrated, k)").into()),
    })
}

/// Every put to the neighbour in its direction, each into a window that
/// neighbour made for it (window i receives put i from the opposite side).
fn run_rdma(
    world: &World,
    dev: &Device,
    pattern: &Pattern,
    alg: &str,
    rank_at: &dyn Fn(i64, i64) -> usize,
    iters: usize,
    engines: usize,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let me = world.rank();
    let algorithm: Algorithm = alg.parse()?;
    let plan = sode_scheduler::plan(pattern, algorithm)?;
    let mut b = RdmaExchangeBuilder::new(dev).engines(engines);
    let total: usize = pattern.requests.iter().map(|r| r.bytes as usize).sum();
    let send = b.buffer(total)?;
    let recv = b.buffer(total)?;
    let mut offsets = Vec::new();
    let mut at = 0;
    for r in &pattern.requests {
        let (dx, dy) = offset_of(&r.direction);
        offsets.push(at);
        b.window_in(recv, at, r.bytes as usize, &[rank_at(-dx, -dy)])?;
        at += r.bytes as usize;
    }
    let writes = writes_from_plan(&plan, |id| {
        let r = pattern.requests.get(id as usize)?;
        let (dx, dy) = offset_of(&r.direction);
        Some(Write {
            peer: rank_at(dx, dy),
            engine: 0,
            src: send,
            src_offset: offsets[id as usize],
            window: WindowId(id as usize),
            dst_offset: 0,
            len: r.bytes as usize,
        })
    })?;
    // A rank that is its own neighbour (a periodic axis of one) cannot
    // write to itself over RDMA.
    if writes.iter().any(|w| w.peer == me) {
        return Err(
            "every neighbour must be another rank: use at least 2 processes per axis".into(),
        );
    }
    for w in writes {
        b.write(w);
    }
    let mut x = b.build(world, Duration::from_secs(60))?;
    pseudo_collective(world, iters, || {
        x.start()?;
        x.wait_for(Duration::from_secs(60))?;
        Ok(())
    })
}

/// The same messages over sode-shm (one message per put, tagged by its id).
fn run_shm(
    world: &World,
    ctx: &mut sode_shm::Context,
    pattern: &Pattern,
    rank_at: &dyn Fn(i64, i64) -> usize,
    iters: usize,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let neighbours = pattern.requests.iter().map(|r| {
        let (dx, dy) = offset_of(&r.direction);
        // Put i goes to the rank in its direction and comes from the
        // opposite one; with 2 processes per axis these are the same rank,
        // so send and receive are separate messages.
        [
            sode_shm::Peer::new(rank_at(dx, dy)).send(r.bytes as usize, r.id),
            sode_shm::Peer::new(rank_at(-dx, -dy)).recv(r.bytes as usize, r.id),
        ]
    });
    let mut x = ctx.exchange().neighbours(neighbours.flatten()).build()?;
    pseudo_collective(world, iters, || {
        x.start()?;
        x.wait_for(Duration::from_secs(60))?;
        Ok(())
    })
}

/// Times `exchange` the paper's way: 3 warm-up rounds, then `iters` rounds
/// of barrier, exchange, barrier; the exchange alone is timed, in us.
fn pseudo_collective(
    world: &World,
    iters: usize,
    mut exchange: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(iters);
    for i in 0..iters + 3 {
        world.barrier(Duration::from_secs(60))?;
        let t0 = Instant::now();
        exchange()?;
        let t = t0.elapsed().as_secs_f64() * 1e6;
        world.barrier(Duration::from_secs(60))?;
        if i >= 3 {
            times.push(t);
        }
    }
    Ok(times)
}
