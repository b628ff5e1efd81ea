//! Jacobi heat diffusion on N processes with sode's halo exchange, checked
//! bit for bit against a single-process solve.
//!
//! ```text
//! cargo run --release -p sode-examples --example stencil -- -n 4
//! stencil -n 8 --dims 3 --size 48 --neighbours 26 --transport rdma
//! ```
//!
//! Without a launcher, `-n N` starts N ranks here. Each rank solves its block
//! (the 4/8-point, or 6/18/26-point, average of its neighbours), exchanging
//! halos every iteration; at the end each rank solves the whole grid alone
//! and compares its block cell by cell, bit for bit. Time per iteration,
//! per exchange and the exchange bandwidth are printed per rank.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::{Decomposition, HaloExchange, Stencil, Transport};
use sode_examples::process_grid;
use sode_job::World;

#[derive(Parser, Debug)]
#[command(about = "Jacobi heat diffusion over sode, checked against a single-process solve")]
struct Args {
    /// Start this many ranks here (without a launcher; default 4).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// 2 or 3.
    #[arg(long, default_value_t = 2)]
    dims: usize,
    /// Global cells per axis.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Neighbours: 4 or 8 (2-D), 6, 18 or 26 (3-D); default 8 / 26.
    #[arg(long)]
    neighbours: Option<usize>,
    /// Periodic boundaries on every axis (else fixed walls).
    #[arg(long)]
    periodic: bool,
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// auto (shared memory on this node; RDMA between nodes, TCP where a
    /// node has no RDMA device), shm, rdma or tcp.
    #[arg(long, default_value = "auto")]
    transport: String,
    /// RDMA queue pairs per neighbour.
    #[arg(long, default_value_t = 2)]
    engines: usize,
    /// pairwise (credits between neighbours) or pseudo-collective (barriers).
    #[arg(long, default_value = "pairwise")]
    sync: String,
    /// Compute the interior between `start` and `wait` (then the
    /// boundary), progressing the exchange between rows; `--overlap false`
    /// exchanges, then computes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    overlap: bool,
    /// Keep u and v in memory sode allocates (`shared_fields(2)`):
    /// neighbours on this node read halos straight from this rank's array,
    /// no pack, no unpack; the sweep goes from one set into the other.
    #[arg(long)]
    shared_fields: bool,
    /// Exchange without sweeping (the field stays the initial one, and is
    /// checked as such): time per exchange with the ranks in step.
    #[arg(long)]
    exchange_only: bool,
    /// Processes per axis (default: the ranks split as evenly as they go,
    /// the fastest axis first).
    #[arg(long, value_delimiter = ',')]
    grid: Vec<usize>,
    /// Renumber the ranks so that the neighbours exchanging the most share
    /// a node (as MPI_Cart_create with reorder); launch order when that
    /// moves no fewer bytes between nodes.
    #[arg(long)]
    reorder: bool,
    /// Seconds that joining the job, each collective step of the setup and
    /// each exchange may take before the rank gives up with an error.
    #[arg(long, default_value_t = 60.0, value_parser = positive_seconds)]
    timeout: f64,
}

impl Args {
    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 1e9 => Ok(s),
        _ => Err(format!("{text:?}: a number of seconds above 0 (up to 1e9)")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "stencil",
        Some(args.ranks.unwrap_or(4)),
        Duration::from_secs(3600),
        || run(&args),
    )
}

/// What reordering chose and what it measured, for the report line.
fn reorder_report(r: &sode::Reordered) -> String {
    let trips: Vec<String> = r
        .round_trips
        .iter()
        .map(|(a, b, us)| format!("{a}-{b} {us:.0} us"))
        .collect();
    format!(
        "; reordered (launched as rank {}): {:.0} bytes an exchange between nodes, {:.0} in launch order; cost {:.0}, {:.0} in launch order (bytes x distance; round trips between nodes' first ranks: {})",
        r.world.launch_rank(),
        r.bytes_between_nodes,
        r.launch_bytes_between_nodes,
        r.cost,
        r.launch_cost,
        if trips.is_empty() { "none".to_string() } else { trips.join(", ") }
    )
}

/// The neighbours reached through gateways (`, forwarded: rank 4 tcp via
/// rank 0`), or nothing.
fn forwarded_report(halo: &HaloExchange, d: &Decomposition, me: usize) -> String {
    let forwarded: Vec<String> = halo
        .paths()
        .into_iter()
        .zip(d.neighbours(me))
        .filter(|(p, _)| p.contains(" via "))
        .map(|(p, n)| format!("rank {} {p}", n.rank))
        .collect();
    if forwarded.is_empty() {
        String::new()
    } else {
        format!(", forwarded: {}", forwarded.join("; "))
    }
}

/// The stencil's neighbour offsets and the update: the plain average of
/// those neighbours (the 2-D 8-point one weighs faces 4, corners 1, /20).
struct Update {
    offsets: Vec<Vec<i64>>,
    weights: Vec<f64>,
    scale: f64,
}

impl Update {
    fn new(dims: usize, stencil: Stencil) -> Update {
        let mut offsets = Vec::new();
        let mut weights = Vec::new();
        for code in 0..3usize.pow(dims as u32) {
            let o: Vec<i64> = (0..dims)
                .map(|a| ((code / 3usize.pow(a as u32)) % 3) as i64 - 1)
                .collect();
            let nz = o.iter().filter(|&&x| x != 0).count();
            let take = match stencil {
                Stencil::Faces => nz == 1,
                Stencil::FacesEdges => nz == 1 || nz == 2,
                Stencil::Full => nz >= 1,
            };
            if take {
                weights.push(if dims == 2 && stencil == Stencil::Full && nz == 1 {
                    4.0
                } else {
                    1.0
                });
                offsets.push(o);
            }
        }
        let scale = 1.0 / weights.iter().sum::<f64>();
        Update {
            offsets,
            weights,
            scale,
        }
    }

    /// One sweep over the interior of an array with extent `ext` and halo
    /// `h`, from `u` into `v`. Each cell sums its neighbours in the same
    /// order wherever it is computed, so any decomposition gives the same
    /// bits.
    fn sweep(&self, ext: &[usize], h: usize, u: &[f64], v: &mut [f64]) {
        self.sweep_part(ext, h, u, v, Part::All, &mut || {});
    }

    /// The owned cells of `part`: the inner ones read no halo cell, the
    /// boundary ones do. `progress` runs between slabs of the slowest axis
    /// (to move the exchange along while the inner cells are computed).
    fn sweep_part(
        &self,
        ext: &[usize],
        h: usize,
        u: &[f64],
        v: &mut [f64],
        part: Part,
        progress: &mut dyn FnMut(),
    ) {
        let owned: Vec<usize> = ext.iter().map(|e| e - 2 * h).collect();
        let dims = ext.len();
        match part {
            Part::All => self.sweep_box(ext, h, u, v, &vec![0; dims], &owned, progress),
            Part::Inner => {
                // A stencil of reach 1: one layer in from each side.
                if owned.iter().all(|&n| n > 2) {
                    let lo = vec![1; dims];
                    let hi: Vec<usize> = owned.iter().map(|n| n - 1).collect();
                    self.sweep_box(ext, h, u, v, &lo, &hi, progress);
                }
            }
            Part::Boundary => {
                // The owned box less the inner one, as disjoint slabs: for
                // each axis its first and last layer, the axes before it
                // inner only, the axes after it whole.
                for a in 0..dims {
                    let layers = if owned[a] > 1 {
                        vec![0, owned[a] - 1]
                    } else {
                        vec![0]
                    };
                    for layer in layers {
                        let lo: Vec<usize> = (0..dims)
                            .map(|b| match b.cmp(&a) {
                                std::cmp::Ordering::Less => 1,
                                std::cmp::Ordering::Equal => layer,
                                std::cmp::Ordering::Greater => 0,
                            })
                            .collect();
                        let hi: Vec<usize> = (0..dims)
                            .map(|b| match b.cmp(&a) {
                                std::cmp::Ordering::Less => owned[b].saturating_sub(1),
                                std::cmp::Ordering::Equal => layer + 1,
                                std::cmp::Ordering::Greater => owned[b],
                            })
                            .collect();
                        self.sweep_box(ext, h, u, v, &lo, &hi, progress);
                    }
                }
            }
        }
    }

    /// The owned cells `lo .. hi` (per axis, counted from the first owned
    /// cell), axis 0 fastest.
    #[allow(clippy::too_many_arguments)]
    fn sweep_box(
        &self,
        ext: &[usize],
        h: usize,
        u: &[f64],
        v: &mut [f64],
        lo: &[usize],
        hi: &[usize],
        progress: &mut dyn FnMut(),
    ) {
        let dims = ext.len();
        if (0..dims).any(|a| lo[a] >= hi[a]) {
            return;
        }
        let strides: Vec<usize> = (0..dims).map(|a| ext[..a].iter().product()).collect();
        let deltas: Vec<isize> = self
            .offsets
            .iter()
            .map(|o| {
                o.iter()
                    .zip(&strides)
                    .map(|(x, s)| *x as isize * *s as isize)
                    .sum()
            })
            .collect();
        let mut idx: Vec<usize> = lo.to_vec();
        loop {
            // One run along axis 0.
            let row: usize = (1..dims).map(|a| (idx[a] + h) * strides[a]).sum();
            for i in lo[0]..hi[0] {
                let at = row + i + h;
                let mut s = 0.0;
                for (d, w) in deltas.iter().zip(&self.weights) {
                    s += w * u[at.wrapping_add_signed(*d)];
                }
                v[at] = s * self.scale;
            }
            // The next run: odometer over axes 1.., the slowest last.
            let mut a = 1;
            loop {
                if a == dims {
                    return;
                }
                idx[a] += 1;
                if idx[a] < hi[a] {
                    break;
                }
                idx[a] = lo[a];
                a += 1;
            }
            if a == dims - 1 {
                progress();
            }
        }
    }
}

/// Where the time went: iterations that exchanged then computed (the two
/// alone), and iterations that overlapped them.
#[derive(Debug, Default)]
struct Times {
    alone: u32,
    exchange: Duration,
    compute: Duration,
    overlapped: Duration,
    overlapped_iters: u32,
}

impl Times {
    fn per_exchange_us(&self) -> f64 {
        self.exchange.as_secs_f64() * 1e6 / f64::from(self.alone.max(1))
    }

    /// `; overlap: compute 40.1 us, exchange 12.0 us, iteration 41.3 us =
    /// 1.03 x max(compute, exchange), 90 % of the exchange hidden`, or
    /// nothing without overlapped iterations.
    fn overlap_report(&self) -> String {
        if self.overlapped.is_zero() || self.alone == 0 {
            return String::new();
        }
        let n = f64::from(self.alone);
        let (c, e) = (
            self.compute.as_secs_f64() * 1e6 / n,
            self.exchange.as_secs_f64() * 1e6 / n,
        );
        let i = self.overlapped.as_secs_f64() * 1e6 / f64::from(self.overlapped_iters.max(1));
        let hidden = ((c + e - i) / c.min(e).max(1e-9) * 100.0).clamp(0.0, 100.0);
        format!(
            "; overlap: compute {c:.1} us, exchange {e:.1} us (alone, {} iterations), iteration {i:.1} us = {:.2} x max(compute, exchange), {hidden:.0} % of the shorter hidden",
            self.alone,
            i / c.max(e).max(1e-9)
        )
    }
}

/// Which owned cells a sweep computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    All,
    /// Those whose stencil reads no halo cell.
    Inner,
    /// The others: computed once the halo has arrived.
    Boundary,
}

/// The initial temperature at a global cell, and the walls' temperature.
fn initial(g: &[usize]) -> f64 {
    let mut x = 0u64;
    for &c in g {
        x = x.wrapping_mul(1_000_003).wrapping_add(c as u64);
    }
    ((x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % 1000) as f64 / 1000.0
}
const WALL: f64 = 0.25;

/// An array with extent `ext` holding the block at `start` (halo `h`):
/// interior from `initial`, halo cells outside a non-periodic domain at
/// the wall temperature (never written by the exchange).
fn fill(ext: &[usize], start: &[usize], h: usize, global: &[usize], periodic: bool) -> Vec<f64> {
    let n: usize = ext.iter().product();
    (0..n)
        .map(|i| {
            let mut rem = i;
            let mut g = Vec::with_capacity(ext.len());
            let mut wall = false;
            for (a, &e) in ext.iter().enumerate() {
                let l = (rem % e) as i64;
                rem /= e;
                let x = start[a] as i64 + l - h as i64;
                if x < 0 || x >= global[a] as i64 {
                    if !periodic {
                        wall = true;
                    }
                    g.push(x.rem_euclid(global[a] as i64) as usize);
                } else {
                    g.push(x as usize);
                }
            }
            if wall {
                WALL
            } else {
                initial(&g)
            }
        })
        .collect()
}

/// The whole grid solved by this process alone, in an array with a halo of
/// one cell (`sext` per axis): the reference the ranks must match.
fn solve_alone(a: &Args, update: &Update, sext: &[usize], global: &[usize]) -> Vec<f64> {
    let h = 1;
    let mut su = fill(sext, &vec![0; a.dims], h, global, a.periodic);
    let mut sv = su.clone();
    let sstrides: Vec<usize> = (0..a.dims).map(|ax| sext[..ax].iter().product()).collect();
    let n_s: usize = sext.iter().product();
    let sweeps = if a.exchange_only { 0 } else { a.iters };
    for _ in 0..sweeps {
        if a.periodic {
            // Halo from the opposite side, as the exchange does.
            for i in 0..n_s {
                let mut rem = i;
                let mut src = 0;
                let mut halo_cell = false;
                for ax in 0..a.dims {
                    let l = rem % sext[ax];
                    rem /= sext[ax];
                    let g = (l as i64 - h as i64).rem_euclid(global[ax] as i64) as usize + h;
                    halo_cell |= g != l;
                    src += g * sstrides[ax];
                }
                if halo_cell {
                    su[i] = su[src];
                }
            }
        }
        update.sweep(sext, h, &su, &mut sv);
        std::mem::swap(&mut su, &mut sv);
    }
    su
}

/// [`iterate`] on the fields sode keeps: set `it % 2` is u, the other v;
/// the result is copied into `u` at the end. The compute between
/// `start_set` and `wait_set` borrows the fields, so it does not progress
/// the exchange (a read in place writes this rank's halo).
fn iterate_shared(
    a: &Args,
    halo: &mut HaloExchange,
    update: &Update,
    ext: &[usize],
    u: &mut [f64],
) -> Result<Times, Box<dyn std::error::Error>> {
    for f in halo.shared_fields::<f64>()? {
        f.copy_from_slice(u);
    }
    let mut times = Times::default();
    for it in 0..a.iters {
        // Each wait may take `--timeout` from when it begins (a timeout,
        // not an instant fixed before the computation): time this rank is
        // stopped (a suspended job) does not count against it.
        let cur = it % 2;
        let ti = Instant::now();
        if a.exchange_only {
            halo.start_set(cur)?;
            halo.wait_set(a.timeout())?;
            times.exchange += ti.elapsed();
            times.alone += 1;
            continue;
        }
        let sweep = |halo: &mut HaloExchange, part: Part| -> Result<(), sode::HaloError> {
            let mut sets = halo.shared_fields::<f64>()?;
            let (first, second) = sets.split_at_mut(1);
            let (u, v) = if cur == 0 {
                (&*first[0], &mut *second[0])
            } else {
                (&*second[0], &mut *first[0])
            };
            update.sweep_part(ext, 1, u, v, part, &mut || {});
            Ok(())
        };
        if !a.overlap || it % 5 == 0 {
            halo.start_set(cur)?;
            halo.wait_set(a.timeout())?;
            let tc = Instant::now();
            sweep(halo, Part::All)?;
            times.exchange += tc - ti;
            times.compute += tc.elapsed();
            times.alone += 1;
        } else {
            halo.start_set(cur)?;
            sweep(halo, Part::Inner)?;
            halo.wait_set(a.timeout())?;
            sweep(halo, Part::Boundary)?;
            times.overlapped += ti.elapsed();
            times.overlapped_iters += 1;
        }
    }
    let last = if a.exchange_only { 0 } else { a.iters % 2 };
    u.copy_from_slice(halo.shared_fields::<f64>()?[last]);
    Ok(times)
}

/// The time loop: `a.iters` exchanges and sweeps, overlapped (but every
/// fifth) when `a.overlap`; `u` holds the result.
fn iterate(
    a: &Args,
    halo: &mut HaloExchange,
    update: &Update,
    ext: &[usize],
    u: &mut Vec<f64>,
    v: &mut Vec<f64>,
) -> Result<Times, Box<dyn std::error::Error>> {
    let mut times = Times::default();
    // Every fifth iteration (all, without overlap) exchanges, then
    // computes: the exchange and the computation alone, measured in the
    // same run as the overlapped ones, interleaved with them.
    for it in 0..a.iters {
        // Each wait may take `--timeout` from when it begins (a timeout,
        // not an instant fixed before the computation): time this rank is
        // stopped (a suspended job) does not count against it.
        let ti = Instant::now();
        if a.exchange_only {
            halo.start(&[&*u])?;
            halo.wait(a.timeout(), &mut [&mut *u])?;
            times.exchange += ti.elapsed();
            times.alone += 1;
            continue;
        }
        if !a.overlap || it % 5 == 0 {
            halo.start(&[&*u])?;
            halo.wait(a.timeout(), &mut [&mut *u])?;
            let tc = Instant::now();
            update.sweep(ext, 1, u, v);
            times.exchange += tc - ti;
            times.compute += tc.elapsed();
            times.alone += 1;
        } else {
            halo.start(&[&*u])?;
            let mut failed = None;
            let mut done = false;
            update.sweep_part(ext, 1, u, v, Part::Inner, &mut || {
                if !done && failed.is_none() {
                    match halo.test() {
                        Ok(d) => done = d,
                        Err(e) => failed = Some(e),
                    }
                }
            });
            if let Some(e) = failed {
                return Err(e.into());
            }
            halo.wait(a.timeout(), &mut [&mut *u])?;
            update.sweep_part(ext, 1, u, v, Part::Boundary, &mut || {});
            times.overlapped += ti.elapsed();
            times.overlapped_iters += 1;
        }
        std::mem::swap(u, v);
    }
    Ok(times)
}

/// Compares this rank's owned cells with the single-process solve (the
/// same walls, or wrap-around), bit for bit; how many it compared.
fn compare(
    a: &Args,
    update: &Update,
    global: &[usize],
    ext: &[usize],
    start: &[usize],
    u: &[f64],
    me: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    let h = 1;
    let sext: Vec<usize> = global.iter().map(|g| g + 2 * h).collect();
    let su = solve_alone(a, update, &sext, global);
    let sstrides: Vec<usize> = (0..a.dims).map(|ax| sext[..ax].iter().product()).collect();
    let mut compared = 0usize;
    for (i, &cell) in u.iter().enumerate() {
        let mut rem = i;
        let mut interior = true;
        let mut at = 0;
        for ax in 0..a.dims {
            let l = rem % ext[ax];
            rem /= ext[ax];
            interior &= l >= h && l < ext[ax] - h;
            at += (start[ax] + l) * sstrides[ax];
        }
        if !interior {
            continue;
        }
        if cell.to_bits() != su[at].to_bits() {
            return Err(format!(
                "rank {me}: cell {i} is {cell} but the single-process solve has {}",
                su[at]
            )
            .into());
        }
        compared += 1;
    }
    Ok(compared)
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let stencil = match (a.dims, a.neighbours) {
        (2, None | Some(8)) | (3, None | Some(26)) => Stencil::Full,
        (2, Some(4)) | (3, Some(6)) => Stencil::Faces,
        (3, Some(18)) => Stencil::FacesEdges,
        (d, n) => {
            return Err(
                format!("{n:?} neighbours in {d}-D: use 4 or 8 (2-D), 6, 18 or 26 (3-D)").into(),
            )
        }
    };
    let launched = World::init(a.timeout())?;
    let global = vec![a.size; a.dims];
    let grid = if a.grid.is_empty() {
        process_grid(launched.size(), a.dims)
    } else {
        a.grid.clone()
    };
    let d = Decomposition::new(&global, &grid, &vec![a.periodic; a.dims], 1, stencil)?;
    let (world, order_report) = if a.reorder {
        let r = sode::reorder(&launched, &d, 8, a.timeout())?;
        let report = reorder_report(&r);
        (r.world, report)
    } else {
        (launched, String::new())
    };
    let me = world.rank();
    let transport: Transport = a.transport.parse()?;
    let mut halo = HaloExchange::builder(&world, &d)
        .transport(transport)
        .engines(a.engines)
        .sync(a.sync.parse()?)
        .shared_fields(if a.shared_fields { 2 } else { 0 })
        .setup_timeout(a.timeout())
        .build()?;
    let ext = halo.local_extent().to_vec();
    let (start, _) = d.block(me);
    let update = Update::new(a.dims, stencil);
    let mut u = fill(&ext, &start, 1, &global, a.periodic);
    let mut v = u.clone();
    world.barrier(a.timeout())?;
    let t0 = Instant::now();
    let times = if a.shared_fields {
        iterate_shared(a, &mut halo, &update, &ext, &mut u)?
    } else {
        iterate(a, &mut halo, &update, &ext, &mut u, &mut v)?
    };
    let total = t0.elapsed();

    let compared = compare(a, &update, &global, &ext, &start, &u, me)?;
    let it = a.iters.max(1) as f64;
    let per_exchange = times.per_exchange_us() * 1e-6;
    let ch = halo.channels();
    let count = |k: &str| ch.iter().filter(|c| **c == k).count();
    let forwarded = forwarded_report(&halo, &d, me);
    let shared = if a.shared_fields {
        format!(
            "; fields in shared memory, {} halos read in place",
            halo.halos_read_in_place()
        )
    } else {
        String::new()
    };
    println!(
        "rank {me}: grid {grid:?}, block {:?}, {} neighbours (shm {}, rdma {}, tcp {}, local {}{forwarded}{shared}): {:.1} us/iteration, {:.2} us/exchange, {:.1} MB/s{}; {compared} cells equal to the single-process solve, bit for bit{}{order_report}",
        d.block(me).1,
        ch.len(),
        count("shm"),
        count("rdma"),
        count("tcp"),
        count("local"),
        total.as_secs_f64() * 1e6 / it,
        per_exchange * 1e6,
        halo.bytes_per_exchange() as f64 / per_exchange.max(1e-12) / 1e6,
        times.overlap_report(),
        halo.plan_summary().map(|p| format!("; RDMA plan {p}")).unwrap_or_default(),
    );
    Ok(())
}
