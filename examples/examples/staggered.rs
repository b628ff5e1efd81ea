//! A staggered grid in Rust, on arrays the code holds itself: a cell field
//! and a node field in one `FieldExchange`, the nodes on each block's
//! edges owned by both ranks beside it and never sent; three stage arrays
//! of each through the one exchange, and the cells alone on a fourth. The
//! same grid as `examples/c/staggered.c`.
//!
//! ```text
//! cargo run --release -p sode-examples --example staggered -- -n 4
//! ```
//!
//! A 2-D grid of 23 x 30 cells, not periodic along axis 0, periodic along
//! axis 1, split unevenly. A rank owning cells `[r0, r1) x [c0, c1)` owns
//! nodes `r0..=r1 x c0..=c1`: the first and last node of each axis it
//! shares with the neighbour on that side, which computes them too. Halos
//! are two cells or nodes deep, corners included. Each rank writes every
//! owned cell's and node's global value, but its own mark on the nodes of
//! its edges (as if both owners computed them differently). After each
//! exchange:
//! - every halo cell holds its global value;
//! - every halo node holds what its owner beside holds: the global value,
//!   or that owner's mark where the node lies on the owner's edge;
//! - every node of this rank's edges still holds this rank's mark;
//! - the rank sent exactly the bytes of the halo cells and nodes its
//!   neighbours fill, the shared nodes excluded (`FieldExchange::stats`);
//! - a start on the cells alone leaves every node as it was.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::field::{ElemType, FieldLayout, Order};
use sode::pattern::{grid_position, ProcessGrid};
use sode::{FieldExchange, Stencil};
use sode_examples::process_grid;
use sode_job::World;

#[derive(Parser, Debug)]
#[command(
    about = "a cell and a node field (shared edge nodes never sent) through one FieldExchange"
)]
struct Args {
    /// Start this many ranks here (without a launcher; default 4).
    #[arg(short = 'n')]
    ranks: Option<usize>,
}

/// Cells along axis 0 and axis 1.
const CELLS: [usize; 2] = [23, 30];
/// Halo depth, cells and nodes alike.
const H: usize = 2;
/// Stage arrays of each field.
const STAGES: usize = 3;

/// One rank's block: cells `lo[a] .. lo[a] + n[a]` per axis.
#[derive(Debug, Clone, Copy)]
struct Block {
    lo: [usize; 2],
    n: [usize; 2],
}

impl Block {
    /// The block at `coords` of a `dims` grid.
    fn at(dims: &[usize], coords: [usize; 2]) -> Block {
        let split = |a: usize| {
            let (q, r) = (CELLS[a] / dims[a], CELLS[a] % dims[a]);
            (
                coords[a] * q + coords[a].min(r),
                q + usize::from(coords[a] < r),
            )
        };
        let ((l0, n0), (l1, n1)) = (split(0), split(1));
        Block {
            lo: [l0, l1],
            n: [n0, n1],
        }
    }

    /// Whether global node `(i, j)` lies on this block's edge (modulo the
    /// periodic axis 1).
    fn on_edge(&self, i: i64, j: i64) -> bool {
        let jj = (j - self.lo[1] as i64).rem_euclid(CELLS[1] as i64);
        i == self.lo[0] as i64
            || i == (self.lo[0] + self.n[0]) as i64
            || jj == 0
            || jj == self.n[1] as i64
    }
}

/// The global value of cell or node `(i, j)` in stage `s`.
fn value(node: bool, s: usize, i: i64, j: i64) -> f64 {
    let kind = if node { 2e6 } else { 1e6 };
    kind + s as f64 * 1e7 + i as f64 * 1000.0 + j.rem_euclid(CELLS[1] as i64) as f64
}

/// What rank `r` of block `b` holds at node `(i, j)` in stage `s`: its
/// mark on its edges.
fn held(r: usize, b: &Block, s: usize, i: i64, j: i64) -> f64 {
    if b.on_edge(i, j) {
        -1.0 - r as f64 - s as f64 * 100.0
    } else {
        value(true, s, i, j)
    }
}

/// The side of `[lo, lo + n)` that `k` lies on: -1 below, 0 inside, 1 above.
fn side(k: usize, lo: usize, n: usize) -> i64 {
    if k < lo {
        -1
    } else if k >= lo + n {
        1
    } else {
        0
    }
}

/// This rank: where it is, and its arrays (C order, axis 1 fastest).
struct Rank {
    me: usize,
    dims: Vec<usize>,
    coords: [usize; 2],
    block: Block,
    cell_ext: [usize; 2],
    node_ext: [usize; 2],
}

/// Cells of a halo outside the non-periodic axis's ends keep this.
const UNTOUCHED: f64 = -7.0;

impl Rank {
    /// Stage `s`'s arrays: the owned cells and nodes written, the rest
    /// `UNTOUCHED`.
    fn arrays(&self, s: usize) -> (Vec<f64>, Vec<f64>) {
        let b = &self.block;
        let mut cells = vec![UNTOUCHED; self.cell_ext[0] * self.cell_ext[1]];
        let mut nodes = vec![UNTOUCHED; self.node_ext[0] * self.node_ext[1]];
        for a in H..H + b.n[0] {
            for c in H..H + b.n[1] {
                let (i, j) = self.global(a, c);
                cells[a * self.cell_ext[1] + c] = value(false, s, i, j);
            }
        }
        for a in H..=H + b.n[0] {
            for c in H..=H + b.n[1] {
                let (i, j) = self.global(a, c);
                nodes[a * self.node_ext[1] + c] = held(self.me, b, s, i, j);
            }
        }
        (cells, nodes)
    }

    /// The global index of array index `(a, c)`.
    fn global(&self, a: usize, c: usize) -> (i64, i64) {
        (
            self.block.lo[0] as i64 - H as i64 + a as i64,
            self.block.lo[1] as i64 - H as i64 + c as i64,
        )
    }

    /// The rank at `offset` from this one and its block, or `None` past
    /// the ends of axis 0.
    fn neighbour(&self, offset: [i64; 2]) -> Option<(usize, Block)> {
        let c0 = self.coords[0] as i64 + offset[0];
        if c0 < 0 || c0 >= self.dims[0] as i64 {
            return None;
        }
        let c1 = (self.coords[1] as i64 + offset[1]).rem_euclid(self.dims[1] as i64);
        let c = [c0 as usize, c1 as usize];
        Some((grid_position(&self.dims, &c), Block::at(&self.dims, c)))
    }

    /// Every cell and node of stage `s` that is not what it should be.
    fn wrong(&self, s: usize, cells: &[f64], nodes: &[f64], nodes_sent: bool) -> Vec<String> {
        let b = &self.block;
        let mut wrong = Vec::new();
        let fresh = self.arrays(s).1;
        for a in 0..self.node_ext[0] {
            for c in 0..self.node_ext[1] {
                let (i, j) = self.global(a, c);
                let o = [side(a, H, b.n[0] + 1), side(c, H, b.n[1] + 1)];
                let want = match (o, self.neighbour(o)) {
                    _ if !nodes_sent => fresh[a * self.node_ext[1] + c],
                    ([0, 0], _) => held(self.me, b, s, i, j),
                    (_, None) => UNTOUCHED,
                    (_, Some((owner, ob))) => held(owner, &ob, s, i, j),
                };
                let got = nodes[a * self.node_ext[1] + c];
                if got.to_bits() != want.to_bits() {
                    wrong.push(format!("node ({i}, {j}) holds {got}, not {want}"));
                }
            }
        }
        for a in 0..self.cell_ext[0] {
            for c in 0..self.cell_ext[1] {
                let (i, j) = self.global(a, c);
                let inside = (0..CELLS[0] as i64).contains(&i);
                let want = if inside {
                    value(false, s, i, j)
                } else {
                    UNTOUCHED
                };
                let got = cells[a * self.cell_ext[1] + c];
                if got.to_bits() != want.to_bits() {
                    wrong.push(format!("cell ({i}, {j}) holds {got}, not {want}"));
                }
            }
        }
        wrong
    }

    /// The bytes one exchange of both fields sends to other ranks: to each
    /// neighbour, `H` layers of cells and nodes along the axes it lies
    /// across, the shared nodes excluded.
    fn bytes_per_exchange(&self) -> u64 {
        let n = self.block.n;
        let mut bytes = 0;
        for o0 in -1..=1i64 {
            for o1 in -1..=1i64 {
                let Some((peer, _)) = self.neighbour([o0, o1]) else {
                    continue;
                };
                if (o0, o1) == (0, 0) || peer == self.me {
                    continue;
                }
                let along = |o: i64, k: usize| if o != 0 { H } else { k };
                let cells = along(o0, n[0]) * along(o1, n[1]);
                let nodes = along(o0, n[0] + 1) * along(o1, n[1] + 1);
                bytes += ((cells + nodes) * std::mem::size_of::<f64>()) as u64;
            }
        }
        bytes
    }
}

fn run(_: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let timeout = Duration::from_secs(60);
    let world = World::init(timeout)?;
    let me = world.rank();
    let dims = process_grid(world.size(), 2);
    let coords = [me / dims[1], me % dims[1]];
    let block = Block::at(&dims, coords);
    let n = block.n;
    // cells(0:n0+3, 0:n1+3) and nodes(0:n0+4, 0:n1+4) in C order: the
    // owned cells or nodes in the middle, H halo layers round them.
    let cells = FieldLayout::with_halo(ElemType::F64, &n, &[H, H], Order::C);
    let nodes = FieldLayout::with_halo(ElemType::F64, &[n[0] + 1, n[1] + 1], &[H, H], Order::C)
        .overlap(&[1, 1], &[1, 1]);
    let rank = Rank {
        me,
        dims: dims.clone(),
        coords,
        block,
        cell_ext: [cells.extents[0], cells.extents[1]],
        node_ext: [nodes.extents[0], nodes.extents[1]],
    };
    let at: Vec<usize> = (0..world.size()).collect();
    let grid = ProcessGrid {
        dims: &dims,
        periodic: &[false, true],
        stencil: Stencil::Full,
        at: &at,
    };
    let mut x = FieldExchange::builder(&world, vec![cells, nodes])
        .setup_timeout(timeout)
        .cartesian(&grid, &coords)?;

    let mut stages: Vec<(Vec<f64>, Vec<f64>)> = (0..STAGES).map(|s| rank.arrays(s)).collect();
    let mut wrong = Vec::new();
    for (s, (c, v)) in stages.iter_mut().enumerate() {
        x.start(&[(&*c).into(), (&*v).into()])?;
        x.wait(
            Instant::now() + timeout,
            &mut [(&mut *c).into(), (&mut *v).into()],
        )?;
        wrong.extend(rank.wrong(s, c, v, true));
    }
    let sent = x.stats().bytes_sent;
    let want = STAGES as u64 * rank.bytes_per_exchange();
    if sent != want {
        wrong.push(format!(
            "sent {sent} bytes in {STAGES} exchanges; the halos need {want}"
        ));
    }
    // The cells alone, on fresh arrays: the nodes stay as they were.
    let (mut c, v) = rank.arrays(0);
    x.start_fields(&[0], &[(&c).into()])?;
    x.wait_fields(timeout, &[0], &mut [(&mut c).into()])?;
    wrong.extend(rank.wrong(0, &c, &v, false));

    if let Some(first) = wrong.first() {
        return Err(format!("rank {me}: {} wrong, the first: {first}", wrong.len()).into());
    }
    println!(
        "rank {me}: grid {}x{} (periodic along axis 1), block {}x{}, cells and nodes, halo {H}: {STAGES} stage arrays and a start on the cells alone through one exchange, every halo cell and node its owner's, no shared node sent ({sent} bytes sent)",
        dims[0], dims[1], n[0], n[1]
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "staggered",
        Some(args.ranks.unwrap_or(4)),
        Duration::from_secs(600),
        || run(&args),
    )
}
