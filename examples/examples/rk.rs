//! A Runge-Kutta code's halo exchange in Rust: three stage arrays through
//! one exchange, checked bit for bit against the same integration of the
//! whole grid in one process.
//!
//! ```text
//! cargo run --release -p sode-examples --example rk -- -n 4
//! ```
//!
//! The heat equation u_t = L(u) (a 9-point Laplacian, so corners count) on
//! a periodic 2-D grid that does not divide evenly among the ranks,
//! integrated by the three-stage strong-stability-preserving scheme:
//! s1 = u + dt L(u); s2 = 3/4 u + 1/4 (s1 + dt L(s1));
//! u = 1/3 u + 2/3 (s2 + dt L(s2)). Each L needs the halo of its own stage
//! array: `start` and `wait` take the arrays of each call, so the one
//! exchange serves u, s1 and s2 in turn. The same as
//! `examples/c/rk2d.c` and `examples/fortran/rk2d.f90`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use sode::{Decomposition, HaloExchange, Stencil};
use sode_examples::process_grid;
use sode_job::World;

#[derive(Parser, Debug)]
#[command(about = "SSP-RK3 over sode with three stage arrays, checked against one process")]
struct Args {
    /// Start this many ranks here (without a launcher; default 4).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// Global cells per axis.
    #[arg(long, value_delimiter = ',', default_value = "50,37")]
    size: Vec<usize>,
    #[arg(long, default_value_t = 20)]
    steps: usize,
}

const DT: f64 = 0.05;

/// A 2-D array with a halo of one cell, axis 0 fastest.
struct Grid {
    ext: [usize; 2],
}

impl Grid {
    fn at(&self, i: usize, j: usize) -> usize {
        j * self.ext[0] + i
    }

    /// L(a) on the owned cells, into `l`; each cell sums its neighbours in
    /// the same order wherever it is computed.
    fn laplacian(&self, a: &[f64], l: &mut [f64]) {
        for j in 1..self.ext[1] - 1 {
            for i in 1..self.ext[0] - 1 {
                let faces = a[self.at(i - 1, j)]
                    + a[self.at(i + 1, j)]
                    + a[self.at(i, j - 1)]
                    + a[self.at(i, j + 1)];
                let corners = a[self.at(i - 1, j - 1)]
                    + a[self.at(i + 1, j - 1)]
                    + a[self.at(i - 1, j + 1)]
                    + a[self.at(i + 1, j + 1)];
                l[self.at(i, j)] = (4.0 * faces + corners - 20.0 * a[self.at(i, j)]) / 6.0;
            }
        }
    }
}

fn initial(i: usize, j: usize) -> f64 {
    (0.3 * i as f64).sin() * (0.2 * j as f64).cos() + 0.01 * ((i * 7 + j * 3) % 11) as f64
}

/// One SSP-RK3 step of `u`, `halo` filling an array's halo first.
fn step<E>(
    g: &Grid,
    u: &mut [f64],
    s1: &mut [f64],
    s2: &mut [f64],
    l: &mut [f64],
    halo: &mut dyn FnMut(&mut [f64]) -> Result<(), E>,
) -> Result<(), E> {
    halo(u)?;
    g.laplacian(u, l);
    for k in 0..u.len() {
        s1[k] = u[k] + DT * l[k];
    }
    halo(s1)?;
    g.laplacian(s1, l);
    for k in 0..u.len() {
        s2[k] = 0.75 * u[k] + 0.25 * (s1[k] + DT * l[k]);
    }
    halo(s2)?;
    g.laplacian(s2, l);
    for k in 0..u.len() {
        u[k] = u[k] / 3.0 + 2.0 * (s2[k] + DT * l[k]) / 3.0;
    }
    Ok(())
}

/// The whole grid integrated in this process, its periodic halo copied.
fn one_process(size: [usize; 2], steps: usize) -> (Grid, Vec<f64>) {
    let g = Grid {
        ext: [size[0] + 2, size[1] + 2],
    };
    let n = g.ext[0] * g.ext[1];
    let mut u = vec![0.0; n];
    for j in 1..=size[1] {
        for i in 1..=size[0] {
            u[g.at(i, j)] = initial(i, j);
        }
    }
    let (mut s1, mut s2, mut l) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let mut wrap = |a: &mut [f64]| -> Result<(), ()> {
        let [ex, ey] = g.ext;
        for j in 0..ey {
            a[g.at(0, j)] = a[g.at(ex - 2, j)];
            a[g.at(ex - 1, j)] = a[g.at(1, j)];
        }
        for i in 0..ex {
            a[g.at(i, 0)] = a[g.at(i, ey - 2)];
            a[g.at(i, ey - 1)] = a[g.at(i, 1)];
        }
        Ok(())
    };
    for _ in 0..steps {
        let _ = step(&g, &mut u, &mut s1, &mut s2, &mut l, &mut wrap);
    }
    (g, u)
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let size: [usize; 2] = a
        .size
        .as_slice()
        .try_into()
        .map_err(|_| "--size takes two numbers: cells along axis 0 and axis 1")?;
    let timeout = Duration::from_secs(60);
    let world = World::init(timeout)?;
    let me = world.rank();
    let grid = process_grid(world.size(), 2);
    let d = Decomposition::new(&size, &grid, &[true, true], 1, Stencil::Full)?;
    let mut halo = HaloExchange::builder(&world, &d)
        .setup_timeout(timeout)
        .build()?;
    let ext = halo.local_extent();
    let g = Grid {
        ext: [ext[0], ext[1]],
    };
    let (start, own) = d.block(me);
    let n = g.ext[0] * g.ext[1];
    let mut u = vec![0.0; n];
    for j in 1..=own[1] {
        for i in 1..=own[0] {
            u[g.at(i, j)] = initial(start[0] + i, start[1] + j);
        }
    }
    let (mut s1, mut s2, mut l) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    // Whichever array the step hands over, the one exchange fills its halo.
    let mut exchange = |x: &mut [f64]| -> sode::Result<()> {
        halo.start(&[&*x])?;
        halo.wait(timeout, &mut [x])
    };
    for _ in 0..a.steps {
        step(&g, &mut u, &mut s1, &mut s2, &mut l, &mut exchange)?;
    }

    let (whole, reference) = one_process(size, a.steps);
    let mut compared = 0;
    for j in 1..=own[1] {
        for i in 1..=own[0] {
            let (mine, theirs) = (
                u[g.at(i, j)],
                reference[whole.at(start[0] + i, start[1] + j)],
            );
            if mine.to_bits() != theirs.to_bits() {
                return Err(format!(
                    "rank {me}: cell ({}, {}) is {mine}, the one-process solve has {theirs}",
                    start[0] + i,
                    start[1] + j
                )
                .into());
            }
            compared += 1;
        }
    }
    println!(
        "rank {me}: grid {grid:?}, block {own:?}: {} SSP-RK3 steps, u, s1 and s2 through one exchange; {compared} cells equal to the one-process solve, bit for bit",
        a.steps
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "rk",
        Some(args.ranks.unwrap_or(4)),
        Duration::from_secs(600),
        || run(&args),
    )
}
