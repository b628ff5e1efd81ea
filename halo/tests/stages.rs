//! A Runge-Kutta code's halo exchange in Rust: three stage arrays through
//! one committed exchange (`HaloExchange::start` takes the arrays of each
//! call, as MPI takes a buffer), two ranks as threads of this process,
//! checked bit for bit against the same integration of the whole grid in
//! one process. The C (`examples/c/rk2d.c`) and Fortran
//! (`stencil3d.f90`) bindings do the same with `sode_exchange_start_arrays`.

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, thread_world};

const GLOBAL: [usize; 2] = [22, 9];
const STEPS: usize = 12;
const DT: f64 = 0.1;

fn initial(x: usize, y: usize) -> f64 {
    ((x * 7 + y * 13) % 17) as f64 + 0.125 * x as f64
}

/// L(u) on the owned cells of an array of extent `ext` (axis 0 fastest,
/// the owned box from 1 on both axes), a 5-point Laplacian.
fn laplacian(ext: &[usize], u: &[f64], out: &mut [f64]) {
    for y in 1..ext[1] - 1 {
        for x in 1..ext[0] - 1 {
            let at = |x: usize, y: usize| u[y * ext[0] + x];
            out[y * ext[0] + x] =
                at(x - 1, y) + at(x + 1, y) + at(x, y - 1) + at(x, y + 1) - 4.0 * at(x, y);
        }
    }
}

/// One SSP-RK3 step of `u` with stage arrays `s1`, `s2`; `halo(x)` fills
/// `x`'s halo before each stage reads it.
fn rk3_step(
    ext: &[usize],
    [u, s1, s2]: [&mut Vec<f64>; 3],
    l: &mut [f64],
    halo: &mut dyn FnMut(&mut [f64]),
) {
    let owned = |k: usize| {
        let (x, y) = (k % ext[0], k / ext[0]);
        x >= 1 && x < ext[0] - 1 && y >= 1 && y < ext[1] - 1
    };
    halo(u);
    laplacian(ext, u, l);
    for k in (0..u.len()).filter(|&k| owned(k)) {
        s1[k] = u[k] + DT * l[k];
    }
    halo(s1);
    laplacian(ext, s1, l);
    for k in (0..u.len()).filter(|&k| owned(k)) {
        s2[k] = 0.75 * u[k] + 0.25 * (s1[k] + DT * l[k]);
    }
    halo(s2);
    laplacian(ext, s2, l);
    for k in (0..u.len()).filter(|&k| owned(k)) {
        u[k] = u[k] / 3.0 + 2.0 / 3.0 * (s2[k] + DT * l[k]);
    }
}

/// `u` after `STEPS` steps, on an array of extent `ext` whose owned box
/// starts at global cell `start`.
fn integrate(
    ext: &[usize],
    start: &[usize],
    size: &[usize],
    halo: &mut dyn FnMut(&mut [f64]),
) -> Vec<f64> {
    let cells = ext[0] * ext[1];
    let (mut u, mut s1, mut s2, mut l) = (
        vec![0.0; cells],
        vec![0.0; cells],
        vec![0.0; cells],
        vec![0.0; cells],
    );
    for y in 0..size[1] {
        for x in 0..size[0] {
            u[(y + 1) * ext[0] + x + 1] = initial(start[0] + x, start[1] + y);
        }
    }
    for _ in 0..STEPS {
        rk3_step(ext, [&mut u, &mut s1, &mut s2], &mut l, halo);
    }
    u
}

#[test]
fn three_stage_arrays_through_one_exchange_match_one_process() {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "stages-test");
                let d = Decomposition::new(&GLOBAL, &[2, 1], &[false, false], 1, Stencil::Faces)
                    .unwrap();
                let mut ex = HaloExchange::builder(&w, &d)
                    .transport(Transport::Shm)
                    .build()
                    .unwrap();
                let ext = ex.local_extent().to_vec();
                let (start, size) = d.block(rank);
                let mut exchanges = 0;
                let mut halo = |x: &mut [f64]| {
                    ex.start(&[&*x]).unwrap();
                    ex.wait(Instant::now() + Duration::from_secs(30), &mut [x])
                        .unwrap();
                    exchanges += 1;
                };
                let u = integrate(&ext, &start, &size, &mut halo);
                assert_eq!(exchanges, 3 * STEPS, "one exchange per stage");
                (ext, start, size, u)
            })
        })
        .collect();
    let gext = [GLOBAL[0] + 2, GLOBAL[1] + 2];
    let whole = integrate(&gext, &[0, 0], &GLOBAL, &mut |_| {});
    for r in ranks {
        let (ext, start, size, u) = r.join().unwrap();
        for y in 0..size[1] {
            for x in 0..size[0] {
                let mine = u[(y + 1) * ext[0] + x + 1];
                let one = whole[(start[1] + y + 1) * gext[0] + start[0] + x + 1];
                assert_eq!(
                    mine.to_bits(),
                    one.to_bits(),
                    "cell ({}, {})",
                    start[0] + x,
                    start[1] + y
                );
            }
        }
    }
}
