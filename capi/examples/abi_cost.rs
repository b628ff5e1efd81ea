//! The cost of a start and a wait of an empty exchange (one rank, no
//! neighbours, one field sode keeps: nothing to move) called from Rust, for comparison with the same calls through
//! the C ABI (`examples/c/abi_cost.c`; `ci/abi-cost.sh` runs both):
//! nanoseconds per start + wait, median and minimum of 7 rounds.

use std::time::{Duration, Instant};

use sode::field::{ElemType, FieldLayout, Order};
use sode_capi::cart::{Cart, Shape};
use sode_capi::comm::Comm;
use sode_capi::exchange::Exchange;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let comm = Comm::from_env(Duration::from_secs(30))?;
    let cart = Cart {
        dims: vec![1, 1],
        coords: vec![0, 0],
        periodic: vec![false, false],
        halo_lo: vec![1, 1],
        halo_hi: vec![1, 1],
        shape: Shape::Box,
    };
    let mut x = Exchange::cartesian(comm.world.clone(), comm.timeout, cart)?;
    x.set_shared_fields(1)?;
    let field = FieldLayout::new(ElemType::F64, &[10, 10], Order::C)
        .owned(&[1, 1], &[8, 8])
        .halo(&[1, 1], &[1, 1]);
    x.add_field(field, |_| None)?;
    x.commit()?;
    let iters = 1_000_000u32;
    let mut rounds = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..iters {
            x.start_set(0)?;
            x.wait(Duration::from_secs(1))?;
        }
        rounds.push(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    rounds.sort_by(f64::total_cmp);
    println!(
        "rust ns per start+wait: median {:.1} min {:.1}",
        rounds[rounds.len() / 2],
        rounds[0]
    );
    Ok(())
}
