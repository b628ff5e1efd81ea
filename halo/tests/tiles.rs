//! Several domains a rank (tiles) in one `FieldExchange`, as tiled models
//! keep them: the tiles of a rank are the last axis of its arrays, the
//! grid of tiles is 3 x 4 (open along axis 0, periodic along axis 1) and
//! its tiles are scattered over the ranks, so that a tile's neighbours are
//! on other ranks and on its own. A cell field (halo 2, corners included)
//! and a node field (both edges owned, halo 1); every halo cell and node
//! must hold its owner's value, and those past the open edges stay as
//! they were, on 1, 2 and 4 ranks over shared memory and TCP.

use std::time::{Duration, Instant};

use sode::field::{ElemType, FieldLayout, Order};
use sode::pattern::{ProcessGrid, Tile};
use sode::{FieldExchange, Stencil, Transport};
mod common;
use common::{free_port, thread_world};

/// Cells of a tile along each axis, and the cells' halo.
const N: [usize; 2] = [5, 4];
const HALO: usize = 2;
const DIMS: [usize; 2] = [3, 4];
const PERIODIC: [bool; 2] = [false, true];
const UNTOUCHED: f64 = -1.0;

/// The rank of the tile at grid position `p`: scattered.
fn owner(p: usize, ranks: usize) -> usize {
    (p * 7 + 3) % ranks
}

/// A field's cells (or nodes) of one tile: `nodes` adds the shared edge.
struct Shape {
    nodes: bool,
    halo: usize,
}

impl Shape {
    fn extent(&self, a: usize) -> usize {
        N[a] + usize::from(self.nodes) + 2 * self.halo
    }

    /// The global index along axis `a` of local index `k` in tile
    /// coordinate `t`: `None` past an open edge.
    fn global(&self, a: usize, t: usize, k: usize) -> Option<i64> {
        let g = (t * N[a] + k) as i64 - self.halo as i64;
        let span = (DIMS[a] * N[a]) as i64;
        if PERIODIC[a] {
            Some(g.rem_euclid(span))
        } else {
            let last = span - 1 + i64::from(self.nodes);
            (0..=last).contains(&g).then_some(g)
        }
    }

    fn owned(&self, a: usize, k: usize) -> bool {
        (self.halo..self.halo + N[a] + usize::from(self.nodes)).contains(&k)
    }
}

fn value(field: usize, it: usize, i: i64, j: i64) -> f64 {
    (field * 100_000 + it * 10_000) as f64 + (i * 100 + j) as f64
}

const SHAPES: [Shape; 2] = [
    Shape {
        nodes: false,
        halo: HALO,
    },
    Shape {
        nodes: true,
        halo: 1,
    },
];

/// Fills (`check`: false) or checks one field's tiles; the cells wrong.
fn visit(field: usize, u: &mut [f64], tiles: &[Tile], it: usize, check: bool) -> usize {
    let s = &SHAPES[field];
    let (e0, e1) = (s.extent(0), s.extent(1));
    let mut wrong = 0;
    for t in tiles {
        for b in 0..e1 {
            for a in 0..e0 {
                let at = a + e0 * (b + e1 * t.index);
                let (i, j) = (s.global(0, t.coords[0], a), s.global(1, t.coords[1], b));
                let want = match (i, j) {
                    (Some(i), Some(j)) => value(field, it, i, j),
                    _ => UNTOUCHED,
                };
                if !check {
                    let owned = s.owned(0, a) && s.owned(1, b);
                    u[at] = if owned { want } else { UNTOUCHED };
                } else if u[at] != want {
                    if wrong < 3 {
                        eprintln!(
                            "field {field}, tile {:?}, local ({a}, {b}): {} not {want}",
                            t.coords, u[at]
                        );
                    }
                    wrong += 1;
                }
            }
        }
    }
    wrong
}

fn rank_run(rank: usize, ranks: usize, port: u16, transport: Transport) -> usize {
    let w = thread_world(rank, ranks, port, &format!("tiles-{ranks}-{transport:?}"));
    let at: Vec<usize> = (0..DIMS[0] * DIMS[1]).map(|p| owner(p, ranks)).collect();
    let tiles: Vec<Tile> = (0..at.len())
        .filter(|&p| at[p] == rank)
        .enumerate()
        .map(|(index, p)| Tile {
            coords: vec![p / DIMS[1], p % DIMS[1]],
            index,
        })
        .collect();
    let nt = tiles.len();
    let cells = FieldLayout::with_halo(
        ElemType::F64,
        &[N[0], N[1], nt],
        &[HALO, HALO],
        Order::Fortran,
    );
    let nodes = FieldLayout::with_halo(
        ElemType::F64,
        &[N[0] + 1, N[1] + 1, nt],
        &[1, 1],
        Order::Fortran,
    )
    .overlap(&[1, 1], &[1, 1]);
    let grid = ProcessGrid {
        dims: &DIMS,
        periodic: &PERIODIC,
        stencil: Stencil::Full,
        at: &at,
    };
    let mut x = FieldExchange::builder(&w, vec![cells, nodes])
        .transport(transport)
        .tiles(&grid, &tiles)
        .expect("a tiled exchange");
    let len = |f: usize| (0..2).map(|a| SHAPES[f].extent(a)).product::<usize>() * nt;
    let mut u = [vec![0.0f64; len(0)], vec![0.0f64; len(1)]];
    let mut wrong = 0;
    for it in 0..3 {
        for (f, arr) in u.iter_mut().enumerate() {
            visit(f, arr, &tiles, it, false);
        }
        x.start(&[(&u[0]).into(), (&u[1]).into()]).unwrap();
        let (a, b) = u.split_at_mut(1);
        x.wait(
            Instant::now() + Duration::from_secs(30),
            &mut [(&mut a[0]).into(), (&mut b[0]).into()],
        )
        .unwrap();
        for (f, arr) in u.iter_mut().enumerate() {
            wrong += visit(f, arr, &tiles, it, true);
        }
    }
    w.barrier(Duration::from_secs(30)).unwrap();
    wrong
}

fn run(ranks: usize, transport: Transport) {
    let port = free_port();
    let threads: Vec<_> = (0..ranks)
        .map(|r| std::thread::spawn(move || rank_run(r, ranks, port, transport)))
        .collect();
    for (r, t) in threads.into_iter().enumerate() {
        assert_eq!(
            t.join().unwrap(),
            0,
            "rank {r} of {ranks}: halo cells wrong"
        );
    }
}

#[test]
fn tiles_on_one_rank_are_copies() {
    run(1, Transport::Shm);
}

#[test]
fn tiles_over_shared_memory() {
    run(2, Transport::Shm);
    run(4, Transport::Shm);
}

#[test]
fn tiles_over_tcp() {
    run(4, Transport::Tcp);
}

#[test]
fn a_tile_of_another_rank_is_refused_on_every_rank() {
    let port = free_port();
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "tiles-refused");
                let at = vec![0, 1];
                let grid = ProcessGrid {
                    dims: &[1, 2],
                    periodic: &[false, true],
                    stencil: Stencil::Faces,
                    at: &at,
                };
                // Rank 1 claims rank 0's tile.
                let tiles = vec![Tile {
                    coords: vec![0, 0],
                    index: 0,
                }];
                let u = FieldLayout::with_halo(ElemType::F64, &[4, 4, 1], &[1, 1], Order::Fortran);
                FieldExchange::builder(&w, vec![u])
                    .tiles(&grid, &tiles)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    for t in threads {
        let e = t.join().unwrap().expect_err("a tile of another rank");
        assert!(
            e.contains("rank 1") && e.contains("rank 0's domain"),
            "unexpected: {e}"
        );
    }
}

#[test]
fn tiles_over_rdma() {
    if common::rdma_available() {
        run(4, Transport::Rdma);
    }
}
