//! The field and pattern model every language binds, used from Rust:
//! fields laid out as a Fortran code holds them (a cell field and a
//! staggered vertex field of another element type), a periodic 2 x 2
//! process grid, and one committed exchange started on three stage arrays
//! in turn (each rank on another) and on a subset of its fields. Four
//! ranks as threads of this process, over shared memory and TCP; every
//! halo cell is checked against its owner's value, and every array not
//! started against what it held.

use std::time::Duration;

use sode::field::{ElemType, FieldLayout, Overlap};
use sode::pattern::{self, FieldArrays, GridNeighbour, ProcessGrid};
use sode::{LinkExchange, Locality, Stencil, Transport};

mod common;

/// Owned cells per rank along each axis.
const OWN: [usize; 2] = [6, 5];
/// Ranks per axis.
const DIMS: [usize; 2] = [2, 2];
const STAGES: usize = 3;

/// A Fortran-order array (axis 0 fastest) of `own` owned elements with a
/// halo of 1 all round.
fn layout(ty: ElemType, own: [usize; 2], overlap: Overlap) -> FieldLayout {
    let ext = [own[0] + 2, own[1] + 2];
    FieldLayout {
        ty,
        extents: ext.to_vec(),
        strides: vec![1, ext[0]],
        owned_lo: vec![1, 1],
        owned_size: own.to_vec(),
        halo_lo: vec![1, 1],
        halo_hi: vec![1, 1],
        overlap,
    }
}

/// Field 0: f64 cells. Field 1: f32 vertices along axis 0 (the node at
/// each end is owned by both neighbours along it, and never sent).
fn layouts() -> [FieldLayout; 2] {
    let vertex = Overlap {
        lo: vec![1, 0],
        hi: vec![1, 0],
    };
    [
        layout(ElemType::F64, OWN, Overlap::default()),
        layout(ElemType::F32, [OWN[0] + 1, OWN[1]], vertex),
    ]
}

/// The value of global point `g` (wrapped into the periodic grid of
/// `global` points) at iteration `it`, for field `field`.
fn value(field: usize, it: usize, g: [i64; 2], global: [usize; 2]) -> f64 {
    let w = |a: usize| g[a].rem_euclid(global[a] as i64) as f64;
    (field * 1_000_000 + it * 10_000) as f64 + w(0) * 100.0 + w(1)
}

/// One rank's arrays: per field, `STAGES` arrays of its layout, as bytes.
struct Rank {
    layouts: [FieldLayout; 2],
    coords: [usize; 2],
    arrays: [Vec<Vec<u8>>; 2],
    stage: usize,
    started: [bool; 2],
}

impl FieldArrays for Rank {
    fn layout(&self, field: usize) -> &FieldLayout {
        &self.layouts[field]
    }
    fn started(&self, field: usize) -> bool {
        self.started[field]
    }
    fn bytes(&self, field: usize) -> Option<&[u8]> {
        Some(&self.arrays[field][self.stage])
    }
    fn bytes_mut(&mut self, field: usize) -> Option<(&FieldLayout, &mut [u8])> {
        Some((&self.layouts[field], &mut self.arrays[field][self.stage]))
    }
}

impl Rank {
    /// Global points per axis of field `field` (vertices: the shared node
    /// counted once, the grid periodic).
    fn global(&self, field: usize) -> [usize; 2] {
        let own = &self.layouts[field].owned_size;
        let shared = self.layouts[field].overlap.above(0);
        [(own[0] - shared) * DIMS[0], own[1] * DIMS[1]]
    }

    /// The global point of local index `(i, j)` of field `field`.
    fn point(&self, field: usize, i: usize, j: usize) -> [i64; 2] {
        let l = &self.layouts[field];
        let shared = l.overlap.above(0);
        let first = [
            self.coords[0] * (l.owned_size[0] - shared),
            self.coords[1] * l.owned_size[1],
        ];
        [
            (first[0] + i) as i64 - l.owned_lo[0] as i64,
            (first[1] + j) as i64 - l.owned_lo[1] as i64,
        ]
    }

    fn get(&self, field: usize, stage: usize, i: usize, j: usize) -> f64 {
        let l = &self.layouts[field];
        let at = (i * l.strides[0] + j * l.strides[1]) * l.ty.size();
        let b = &self.arrays[field][stage][at..];
        match l.ty {
            ElemType::F32 => f64::from(f32::from_le_bytes(b[..4].try_into().unwrap())),
            _ => f64::from_le_bytes(b[..8].try_into().unwrap()),
        }
    }

    fn set(&mut self, field: usize, stage: usize, i: usize, j: usize, v: f64) {
        let l = &self.layouts[field];
        let at = (i * l.strides[0] + j * l.strides[1]) * l.ty.size();
        let b = &mut self.arrays[field][stage][at..];
        match l.ty {
            ElemType::F32 => b[..4].copy_from_slice(&(v as f32).to_le_bytes()),
            _ => b[..8].copy_from_slice(&v.to_le_bytes()),
        }
    }

    /// Every (i, j) of field `field`'s array, and whether it is owned.
    fn cells(&self, field: usize) -> Vec<(usize, usize, bool)> {
        let l = &self.layouts[field];
        let owned =
            |a: usize, x: usize| (l.owned_lo[a]..l.owned_lo[a] + l.owned_size[a]).contains(&x);
        (0..l.extents[1])
            .flat_map(|j| (0..l.extents[0]).map(move |i| (i, j)))
            .map(|(i, j)| (i, j, owned(0, i) && owned(1, j)))
            .collect()
    }
}

/// Rank `rank` of the job: `iterations` exchanges, each on stage array
/// `(it + rank) % 3`, every third one on field 0 only.
fn run_rank(rank: usize, port: u16, transport: Transport, iterations: usize) {
    let w = common::thread_world(rank, 4, port, "pattern-test");
    let coords = [rank / DIMS[1], rank % DIMS[1]];
    let layouts = layouts();
    for l in &layouts {
        l.check(2, &[1, 1], &[1, 1]).unwrap();
    }
    let mut builder = LinkExchange::builder(&w, Vec::new())
        .transport(transport)
        .setup_timeout(Duration::from_secs(30));
    let grouped: Vec<bool> = (0..4)
        .map(|peer| builder.locality_of(peer).unwrap() != Locality::Rdma)
        .collect();
    let at: Vec<usize> = (0..4).collect();
    let grid = ProcessGrid {
        dims: &DIMS,
        periodic: &[true, true],
        stencil: Stencil::Full,
        at: &at,
    };
    let neighbours: Vec<GridNeighbour> = grid.neighbours(&coords);
    assert_eq!(neighbours.len(), 8);
    let planned = pattern::PlannedLinks::cartesian(&layouts, &neighbours, &grouped);
    let mut links = builder.with_links(planned.links).build().unwrap();
    let bytes = |l: &FieldLayout| l.extents.iter().product::<usize>() * l.ty.size();
    let arrays = [
        vec![vec![0u8; bytes(&layouts[0])]; STAGES],
        vec![vec![0u8; bytes(&layouts[1])]; STAGES],
    ];
    let mut me = Rank {
        layouts,
        coords,
        arrays,
        stage: 0,
        started: [true; 2],
    };
    for it in 1..=iterations {
        me.stage = (it + rank) % STAGES;
        me.started = [true, it % 3 != 0];
        for field in 0..2 {
            let global = me.global(field);
            for (i, j, owned) in me.cells(field) {
                if owned {
                    let v = value(field, it, me.point(field, i, j), global);
                    me.set(field, me.stage, i, j, v);
                }
            }
        }
        let before = me.arrays.clone();
        pattern::carry(&mut links, &planned.pieces, &me).unwrap();
        links.set_shape(sode::start_shape(me.started, 0)).unwrap();
        pattern::pack_and_start(&mut links, &planned.pieces, &me).unwrap();
        links.wait(common::deadline()).unwrap();
        pattern::unpack(&mut links, &planned.pieces, &mut me).unwrap();
        check(&me, &before, it, rank);
    }
    w.barrier(Duration::from_secs(30)).unwrap();
}

/// After iteration `it`: the started fields' halos of the stage array hold
/// their owners' values; a field not started, and every other stage
/// array, are as they were (`before`).
fn check(me: &Rank, before: &[Vec<Vec<u8>>; 2], it: usize, rank: usize) {
    for (field, stages) in before.iter().enumerate() {
        for (stage, was) in stages.iter().enumerate() {
            if stage != me.stage || !me.started[field] {
                assert!(
                    me.arrays[field][stage] == *was,
                    "rank {rank}, iteration {it}: field {field}'s stage {stage} changed"
                );
                continue;
            }
            let global = me.global(field);
            for (i, j, owned) in me.cells(field) {
                let want = value(field, it, me.point(field, i, j), global);
                let got = me.get(field, stage, i, j);
                assert!(
                    owned || got == want,
                    "rank {rank}, iteration {it}: field {field} halo ({i}, {j}) holds {got}, not {want}"
                );
            }
        }
    }
}

fn exchange_over(transport: Transport) {
    let port = common::free_port();
    let ranks: Vec<_> = (0..4)
        .map(|rank| std::thread::spawn(move || run_rank(rank, port, transport, 9)))
        .collect();
    for r in ranks {
        r.join().unwrap();
    }
}

#[test]
fn stage_arrays_staggered_fields_and_subsets_over_shared_memory() {
    exchange_over(Transport::Shm);
}

#[test]
fn stage_arrays_staggered_fields_and_subsets_over_tcp() {
    exchange_over(Transport::Tcp);
}

#[test]
fn stage_arrays_staggered_fields_and_subsets_over_rdma() {
    if common::rdma_available() {
        exchange_over(Transport::Rdma);
    }
}
