//! Planning time: the 14-put SCALE-LES3 all8 pattern, a 26-neighbour 3-D
//! halo, and a 1,000-put random pattern.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sode_scheduler::patterns::{halo, random, scale_les3, DirectionSet, HaloShape};
use sode_scheduler::{plan, Algorithm, Machine};

fn planning(c: &mut Criterion) {
    let m = Machine::K_COMPUTER;
    let all8 = scale_les3(872, DirectionSet::All8, m).expect("pattern");
    let shape = HaloShape {
        size: vec![64, 64, 64],
        halo: 2,
        element_bytes: 8,
        neighbours: 26,
    };
    let halo26 = halo(&shape, m).expect("pattern");
    let random1000 = random(1000, 7, m).expect("pattern");
    let mut group = c.benchmark_group("plan");
    for algorithm in [Algorithm::BottomLeft(4), Algorithm::Auto] {
        group.bench_function(format!("all8/{algorithm}"), |b| {
            b.iter(|| plan(black_box(&all8), algorithm))
        });
        group.bench_function(format!("halo3d-26/{algorithm}"), |b| {
            b.iter(|| plan(black_box(&halo26), algorithm))
        });
    }
    group.sample_size(10);
    for algorithm in [Algorithm::BottomLeft(4), Algorithm::Auto] {
        group.bench_function(format!("random-1000/{algorithm}"), |b| {
            b.iter(|| plan(black_box(&random1000), algorithm))
        });
    }
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
