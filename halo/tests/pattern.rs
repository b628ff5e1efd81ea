//! The field and pattern model every language binds, used from Rust:
//! fields laid out as a Fortran code holds them (a cell field and a
//! staggered vertex field of another element type), a periodic 2 x 2
//! process grid, and one committed exchange started on three stage arrays
//! in turn (each rank on another) and on a subset of its fields. Four
//! ranks as threads of this process, over shared memory and TCP; every
//! halo cell is checked against its owner's value, and every array not
//! started against what it held.

use std::time::Duration;

use sode::field::{ElemType, FieldLayout, Order};
use sode::pattern::{self, BoxMessage, FieldArrays, GridNeighbour, ProcessGrid};
use sode::{Array, ArrayMut, FieldExchange, LinkExchange, Locality, Stencil, Transport};

mod common;

/// Owned cells per rank along each axis.
const OWN: [usize; 2] = [6, 5];
/// Ranks per axis.
const DIMS: [usize; 2] = [2, 2];
const STAGES: usize = 3;

/// A Fortran-order array (axis 0 fastest) of `own` owned elements with a
/// halo of 1 all round.
fn layout(ty: ElemType, own: [usize; 2]) -> FieldLayout {
    FieldLayout::with_halo(ty, &own, &[1, 1], Order::Fortran)
}

/// Field 0: f64 cells. Field 1: f32 vertices along axis 0 (the node at
/// each end is owned by both neighbours along it, and never sent).
fn layouts() -> [FieldLayout; 2] {
    [
        layout(ElemType::F64, OWN),
        layout(ElemType::F32, [OWN[0] + 1, OWN[1]]).overlap(&[1, 0], &[1, 0]),
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
    let grouping = pattern::Grouping::by_rank(&grouped);
    let planned = pattern::PlannedLinks::cartesian(&layouts, &neighbours, &grouping);
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
        // Unpacked, the receive buffers are released until the next
        // start, over every channel: reading one again is refused.
        let receiving = planned.pieces.iter().position(|p| p.recv.is_some());
        if let Some(i) = receiving {
            let e = links.recv_buf(i).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains("released"), "{e}");
        }
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

/// `rank(r, port)` on each of `n` threads, the ranks of one job meeting at
/// `port`; what each returned, in rank order.
fn job<T, F>(n: usize, rank: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, u16) -> T + Send + Copy + 'static,
{
    let port = common::free_port();
    let ranks: Vec<_> = (0..n)
        .map(|r| std::thread::spawn(move || rank(r, port)))
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

fn exchange_over(transport: Transport) {
    job(4, move |r, port| run_rank(r, port, transport, 9));
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

// The same model as one handle: `FieldExchange`, on typed arrays.

/// One rank's typed arrays: `STAGES` of each field.
struct Typed {
    cells: Vec<Vec<f64>>,
    verts: Vec<Vec<f32>>,
}

/// Rank `rank` through a `FieldExchange`: as [`run_rank`], each iteration
/// on stage `(it + rank) % 3`, every third on field 0 alone, and every
/// halo and untouched array checked. The arrays are typed; the check reads
/// them back through a [`Rank`] of their bytes. The first `lent` stages'
/// arrays are lent, a set each: only starts on other stages, and on field
/// 0 alone, go through sode's buffers (counted in the stats).
fn run_handle(rank: usize, port: u16, transport: Transport, iterations: usize, lent: usize) {
    let lend = lent > 0;
    let w = common::thread_world(rank, 4, port, "field-exchange-test");
    let coords = [rank / DIMS[1], rank % DIMS[1]];
    let at: Vec<usize> = (0..4).collect();
    let grid = ProcessGrid {
        dims: &DIMS,
        periodic: &[true, true],
        stencil: Stencil::Full,
        at: &at,
    };
    let cells = |l: &FieldLayout| l.extents.iter().product::<usize>();
    let [c, v] = layouts();
    // Declared before the exchange, which may hold its arrays lent.
    let mut t = Typed {
        cells: vec![vec![0.0; cells(&c)]; STAGES],
        verts: vec![vec![0.0; cells(&v)]; STAGES],
    };
    let builder = FieldExchange::builder(&w, layouts().to_vec())
        .transport(transport)
        .setup_timeout(Duration::from_secs(30));
    let builder = lend_stages(builder, &mut t, lent);
    let mut x = builder.cartesian(&grid, &coords).unwrap();
    assert_eq!(x.in_place(), [lend, lend], "every face in place when lent");
    let mut staged = 0;
    for it in 1..=iterations {
        let s = (it + rank) % STAGES;
        let subset = it % 3 == 0;
        staged += u64::from(lend && (subset || s >= lent));
        let mut me = as_bytes(&t, coords, s, [true, !subset]);
        for field in 0..2 {
            let global = me.global(field);
            for (i, j, owned) in me.cells(field) {
                if owned {
                    let v = value(field, it, me.point(field, i, j), global);
                    me.set(field, s, i, j, v);
                }
            }
        }
        from_bytes(&me, &mut t);
        let before = me.arrays.clone();
        if subset {
            x.start_fields(&[0], &[(&t.cells[s]).into()]).unwrap();
            x.wait_fields(common::deadline(), &[0], &mut [(&mut t.cells[s]).into()])
                .unwrap();
        } else {
            x.start(&[(&t.cells[s]).into(), (&t.verts[s]).into()])
                .unwrap();
            let (cs, vs) = (&mut t.cells[s], &mut t.verts[s]);
            x.wait(common::deadline(), &mut [cs.into(), vs.into()])
                .unwrap();
        }
        check(&as_bytes(&t, coords, s, [true, !subset]), &before, it, rank);
    }
    assert_eq!(
        x.stats().staged_starts,
        staged,
        "rank {rank}: starts through sode's buffers, {lent} stages lent"
    );
    if lend {
        // Halos in place land in the arrays lent: a wait naming others is
        // refused, and the exchange waits on.
        x.start(&[(&t.cells[0]).into(), (&t.verts[0]).into()])
            .unwrap();
        let (c1, v1) = (&mut t.cells[1], &mut t.verts[1]);
        let e = x.wait(common::deadline(), &mut [c1.into(), v1.into()]);
        let e = e.map_err(|e| e.to_string()).unwrap_err();
        assert!(
            e.contains("field 0: the exchange was started on the array lent for it"),
            "{e}"
        );
        let (c0, v0) = (&mut t.cells[0], &mut t.verts[0]);
        x.wait(common::deadline(), &mut [c0.into(), v0.into()])
            .unwrap();
    }
    misuse_is_told(&mut x, &mut t);
    w.barrier(Duration::from_secs(30)).unwrap();
}

/// The builder with the first `stages` stages' arrays lent, a set each,
/// every face in place (none lent: the builder as it was).
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
fn lend_stages<'w>(
    mut builder: sode::FieldExchangeBuilder<'w>,
    t: &mut Typed,
    stages: usize,
) -> sode::FieldExchangeBuilder<'w> {
    if stages == 0 {
        return builder;
    }
    let memory = |bytes: &mut [u8]| {
        // SAFETY: `t` outlives the exchange (declared before it), its
        // arrays are never resized, and the test touches no array between
        // a start and its wait.
        unsafe { sode::UserMemory::new(bytes.as_mut_ptr(), bytes.len()) }.unwrap()
    };
    for s in 0..stages {
        builder = builder.lend(vec![
            memory(bytemuck::cast_slice_mut(&mut t.cells[s])),
            memory(bytemuck::cast_slice_mut(&mut t.verts[s])),
        ]);
    }
    builder.zero_copy(sode::zero_copy::ZeroCopy::Always)
}

#[cfg(not(feature = "rdma"))]
fn lend_stages<'w>(
    builder: sode::FieldExchangeBuilder<'w>,
    _: &mut Typed,
    _: usize,
) -> sode::FieldExchangeBuilder<'w> {
    builder
}

/// The typed arrays as the byte arrays [`check`] reads.
fn as_bytes(t: &Typed, coords: [usize; 2], stage: usize, started: [bool; 2]) -> Rank {
    let bytes = |a: &[u8]| a.to_vec();
    Rank {
        layouts: layouts(),
        coords,
        arrays: [
            t.cells
                .iter()
                .map(|a| bytes(bytemuck::cast_slice(a)))
                .collect(),
            t.verts
                .iter()
                .map(|a| bytes(bytemuck::cast_slice(a)))
                .collect(),
        ],
        stage,
        started,
    }
}

fn from_bytes(me: &Rank, t: &mut Typed) {
    for (s, a) in me.arrays[0].iter().enumerate() {
        t.cells[s].copy_from_slice(bytemuck::cast_slice(a));
    }
    for (s, a) in me.arrays[1].iter().enumerate() {
        t.verts[s].copy_from_slice(bytemuck::cast_slice(a));
    }
}

/// Arrays unlike the fields, fields listed wrongly and calls out of turn
/// are errors that say what is wrong, and leave the exchange usable.
fn misuse_is_told(x: &mut FieldExchange, t: &mut Typed) {
    let told = |r: sode::Result<()>| r.map_err(|e| e.to_string()).unwrap_err();
    let e = told(x.start(&[(&t.verts[0]).into(), (&t.verts[1]).into()]));
    assert!(e.contains("field 0 is of F64, its array of F32"), "{e}");
    let e = told(x.start(&[(&t.cells[0][..10]).into(), (&t.verts[0]).into()]));
    assert!(
        e.contains("field 0's array holds 80 bytes, but its layout spans"),
        "{e}"
    );
    let e = told(x.start(&[(&t.cells[0]).into()]));
    assert!(e.contains("1 arrays for 2 fields"), "{e}");
    let e = told(x.start_fields(&[0, 0], &[(&t.cells[0]).into(), (&t.cells[1]).into()]));
    assert!(e.contains("field 0 listed twice"), "{e}");
    let e = told(x.start_fields(&[2], &[(&t.cells[0]).into()]));
    assert!(e.contains("field 2 listed, but there are 2"), "{e}");
    let e = told(x.wait(common::deadline(), &mut [(&mut t.cells[0]).into()]));
    assert!(e.contains("no exchange in flight: call start first"), "{e}");
}

fn handle_over(transport: Transport) {
    job(4, move |r, port| run_handle(r, port, transport, 9, 0));
}

#[test]
fn one_handle_on_typed_stage_arrays_over_shared_memory() {
    handle_over(Transport::Shm);
}

#[test]
fn one_handle_on_typed_stage_arrays_over_tcp() {
    handle_over(Transport::Tcp);
}

#[test]
fn one_handle_on_typed_stage_arrays_over_rdma() {
    if common::rdma_available() {
        handle_over(Transport::Rdma);
    }
}

/// Stage 0's arrays lent: its starts move every face in place (the
/// device reads the fields and writes the halos), the other stages' and
/// the subsets go through sode's buffers; every halo checked alike.
#[test]
#[cfg(feature = "rdma")]
fn one_handle_with_lent_arrays_over_rdma() {
    if common::rdma_available() {
        job(4, |r, port| run_handle(r, port, Transport::Rdma, 9, 1));
    }
}

/// Ranks that lent different numbers of stages (1, 2, 3, 1): each names
/// only its own sets, and its neighbours land in them or in its staging
/// windows; every halo checked, and each rank's staged starts counted by
/// its own sets.
#[test]
#[cfg(feature = "rdma")]
fn one_handle_with_other_sets_lent_per_rank_over_rdma() {
    if common::rdma_available() {
        job(4, |r, port| {
            run_handle(r, port, Transport::Rdma, 9, 1 + r % STAGES)
        });
    }
}

/// Every stage's arrays lent, a set each: a start on any stage moves its
/// faces in place, neighbours on different stages (each rank names its
/// own set in its credits); only the subsets go through sode's buffers.
#[test]
#[cfg(feature = "rdma")]
fn one_handle_with_every_stage_lent_over_rdma() {
    if common::rdma_available() {
        job(4, |r, port| run_handle(r, port, Transport::Rdma, 9, STAGES));
    }
}

/// Four ranks build with `describe` changing rank `odd`'s fields; every
/// rank's error.
fn build_with(odd: usize, describe: fn(&mut [FieldLayout; 2])) -> Vec<String> {
    job(4, move |rank, port| {
        let w = common::thread_world(rank, 4, port, "field-agree-test");
        let at: Vec<usize> = (0..4).collect();
        let grid = ProcessGrid {
            dims: &DIMS,
            periodic: &[true, true],
            stencil: Stencil::Full,
            at: &at,
        };
        let mut l = layouts();
        if rank == odd {
            describe(&mut l);
        }
        let built = FieldExchange::builder(&w, l.to_vec())
            .transport(Transport::Shm)
            .setup_timeout(Duration::from_secs(30))
            .cartesian(&grid, &[rank / DIMS[1], rank % DIMS[1]]);
        built
            .map(|_| ())
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default()
    })
}

#[test]
fn a_rank_that_describes_other_fields_fails_every_rank_alike() {
    let told = build_with(2, |l| l[1].ty = ElemType::F64);
    for (rank, e) in told.iter().enumerate() {
        assert!(
            e.contains("rank 2 describes other fields or another grid than rank 0")
                && e.contains("F64"),
            "rank {rank}: {e:?}"
        );
    }
    let told = build_with(1, |l| l[0].owned_size[1] = 50);
    for (rank, e) in told.iter().enumerate() {
        assert!(
            e.contains("rank 1: field 0: axis 1: the 50 owned cells"),
            "rank {rank}: {e:?}"
        );
    }
}

/// Two ranks in a ring, described by their boxes: field 0 (f64 cells) and
/// field 1 (i32, one cell longer) each in boxes of their own.
fn boxes_rank(rank: usize, port: u16, transport: Transport) -> (Vec<f64>, Vec<i32>) {
    const N: usize = 5;
    let w = common::thread_world(rank, 2, port, "field-boxes-test");
    let field = |ty: ElemType, n: usize| FieldLayout::with_halo(ty, &[n], &[1], Order::C);
    let peer = 1 - rank;
    let one = |tag: u32, lo: usize, f: usize| BoxMessage {
        peer,
        tag,
        lo: vec![lo],
        size: vec![1],
        field: Some(f),
    };
    // Tags 0/1 field 0, 2/3 field 1: first owned cell to the peer's upper
    // halo, last owned cell to its lower halo.
    let sends = [one(0, 1, 0), one(1, N, 0), one(2, 1, 1), one(3, N + 1, 1)];
    let recvs = [
        one(0, N + 1, 0),
        one(1, 0, 0),
        one(2, N + 2, 1),
        one(3, 0, 1),
    ];
    let mut x = FieldExchange::builder(
        &w,
        vec![field(ElemType::F64, N), field(ElemType::I32, N + 1)],
    )
    .transport(transport)
    .setup_timeout(Duration::from_secs(30))
    .boxes(&sends, &recvs)
    .unwrap();
    let base = 100 * (rank + 1);
    let mut u: Vec<f64> = (0..N + 2).map(|i| (base + i) as f64).collect();
    let mut k: Vec<i32> = (0..N + 3).map(|i| -((base + i) as i32)).collect();
    let e = x.set_depth(1).map_err(|e| e.to_string()).unwrap_err();
    assert!(
        e.contains("an exchange built from boxes moves each box whole"),
        "{e}"
    );
    x.start(&[(&u).into(), (&k).into()]).unwrap();
    x.wait(common::deadline(), &mut [(&mut u).into(), (&mut k).into()])
        .unwrap();
    w.barrier(Duration::from_secs(30)).unwrap();
    (u, k)
}

#[test]
fn one_handle_over_boxes_of_one_field_each() {
    for transport in [Transport::Shm, Transport::Tcp] {
        let got = job(2, move |rank, port| boxes_rank(rank, port, transport));
        for (rank, (u, k)) in got.iter().enumerate() {
            let peer = 100 * (2 - rank);
            // Upper halo: the peer's first owned cell; lower: its last.
            assert_eq!(
                (u[6], u[0]),
                ((peer + 1) as f64, (peer + 5) as f64),
                "{transport:?} rank {rank} cells {u:?}"
            );
            assert_eq!(
                (k[7], k[0]),
                (-((peer + 1) as i32), -((peer + 6) as i32)),
                "{transport:?} rank {rank} ints {k:?}"
            );
            let base = 100 * (rank + 1);
            assert!(
                (1..6).all(|i| u[i] == (base + i) as f64),
                "{transport:?} rank {rank}: owned cells moved: {u:?}"
            );
        }
    }
}

/// Two ranks on a periodic 1-D grid, one f64 field with halos of 2: a
/// start at depth 1 fills the inner layer of each halo only, and depth 0
/// both again. Returns each phase's array.
fn depth_rank(rank: usize, port: u16) -> Vec<Vec<f64>> {
    const N: usize = 6;
    let w = common::thread_world(rank, 2, port, "field-depth-test");
    let layout = FieldLayout::with_halo(ElemType::F64, &[N], &[2], Order::C);
    let at = [0, 1];
    let grid = ProcessGrid {
        dims: &[2],
        periodic: &[true],
        stencil: Stencil::Full,
        at: &at,
    };
    let mut x = FieldExchange::builder(&w, vec![layout])
        .transport(Transport::Shm)
        .cartesian(&grid, &[rank])
        .unwrap();
    let mut phases = Vec::new();
    for (phase, depth) in [(1, 0), (2, 1), (3, 0)] {
        x.set_depth(depth).unwrap();
        let mut u: Vec<f64> = (0..N + 4)
            .map(|i| match i {
                2..=7 => (phase * 1000 + rank * N + i - 2) as f64,
                _ => -1.0,
            })
            .collect();
        x.start(&[(&u).into()]).unwrap();
        x.wait(common::deadline(), &mut [(&mut u).into()]).unwrap();
        phases.push(u);
    }
    w.barrier(Duration::from_secs(30)).unwrap();
    phases
}

#[test]
fn one_handle_at_a_depth_fills_the_inner_layers_only() {
    let got = job(2, depth_rank);
    for (rank, phases) in got.iter().enumerate() {
        let other = 6 * (1 - rank);
        for (k, (u, depth)) in phases.iter().zip([0, 1, 0]).enumerate() {
            let v = |i: usize| ((k + 1) * 1000 + other + i) as f64;
            // Below: the other rank's last two cells; above: its first two.
            let want = [
                if depth == 1 { -1.0 } else { v(4) },
                v(5),
                v(0),
                if depth == 1 { -1.0 } else { v(1) },
            ];
            let halos = [u[0], u[1], u[8], u[9]];
            assert_eq!(halos, want, "rank {rank}, phase {k} (depth {depth}): {u:?}");
        }
    }
}

/// Two ranks on a periodic 1-D grid: a complex field (`[f64; 2]`) and a
/// field of 24-byte records (`[u64; 3]`, as a struct would be), each
/// halo filled bit for bit by its neighbour's edge element.
fn wide_rank(rank: usize, port: u16, transport: Transport) -> (Vec<[f64; 2]>, Vec<[u64; 3]>) {
    const N: usize = 4;
    let w = common::thread_world(rank, 2, port, "field-wide-test");
    let layout = |ty| FieldLayout::with_halo(ty, &[N], &[1], Order::C);
    let at = [0, 1];
    let grid = ProcessGrid {
        dims: &[2],
        periodic: &[true],
        stencil: Stencil::Full,
        at: &at,
    };
    let mut x =
        FieldExchange::builder(&w, vec![layout(ElemType::C64), layout(ElemType::Bytes(24))])
            .transport(transport)
            .cartesian(&grid, &[rank])
            .unwrap();
    let g = |i: usize| (rank * N + i) as u64;
    let mut z: Vec<[f64; 2]> = (0..N + 2)
        .map(|i| [g(i) as f64 + 0.25, -(g(i) as f64)])
        .collect();
    let mut r: Vec<[u64; 3]> = (0..N + 2)
        .map(|i| [g(i), g(i) << 40, u64::MAX - g(i)])
        .collect();
    for halo in [0, N + 1] {
        z[halo] = [f64::NAN; 2];
        r[halo] = [0; 3];
    }
    let e = x
        .start(&[(&z).into(), (&z).into()])
        .map_err(|e| e.to_string())
        .unwrap_err();
    assert!(
        e.contains("field 1 is of Bytes(24), its array of C64"),
        "{e}"
    );
    x.start(&[(&z).into(), Array::pod(&r)]).unwrap();
    x.wait(
        common::deadline(),
        &mut [(&mut z).into(), ArrayMut::pod(&mut r)],
    )
    .unwrap();
    w.barrier(Duration::from_secs(30)).unwrap();
    (z, r)
}

#[test]
fn complex_numbers_and_records_of_any_size_travel_bit_for_bit() {
    for transport in [Transport::Shm, Transport::Tcp] {
        let got = job(2, move |rank, port| wide_rank(rank, port, transport));
        for (rank, (z, r)) in got.iter().enumerate() {
            // Below: the other rank's last owned element (its index 4);
            // above: its first (index 1).
            let other = |i: usize| ((1 - rank) * 4 + i) as u64;
            for (halo, i) in [(0, 4), (5, 1)] {
                let want_z = [other(i) as f64 + 0.25, -(other(i) as f64)];
                let want_r = [other(i), other(i) << 40, u64::MAX - other(i)];
                assert_eq!(z[halo], want_z, "{transport:?} rank {rank}: {z:?}");
                assert_eq!(r[halo], want_r, "{transport:?} rank {rank}: {r:?}");
            }
        }
    }
}

/// One rank whose boxes go to itself: field 0 (f64, 2-D, C order, 4 x 6
/// cells with halos of 1) sends its second row to its last and its
/// second-to-last row to its first, as a periodic axis the rank spans
/// alone; field 1 (i64, 3 x 2 cells) its first owned cell to the halo
/// row below its last.
/// Such messages are copied straight from the cells sent into the halo at
/// the wait, so the wait must name the arrays of the start.
#[test]
fn a_rank_that_is_its_own_neighbour_copies_its_halos_from_the_started_arrays() {
    let w = common::thread_world(0, 1, common::free_port(), "self-copy-test");
    let (rows, cols) = (6usize, 4usize);
    let grid = FieldLayout::with_halo(ElemType::F64, &[rows - 2, cols - 2], &[1, 1], Order::C);
    let small = FieldLayout::with_halo(ElemType::I64, &[3, 2], &[1, 1], Order::C);
    let to_self = |tag: u32, lo: Vec<usize>, size: Vec<usize>, f: usize| BoxMessage {
        peer: 0,
        tag,
        lo,
        size,
        field: Some(f),
    };
    let sends = [
        to_self(0, vec![1, 1], vec![1, cols - 2], 0),
        to_self(1, vec![rows - 2, 1], vec![1, cols - 2], 0),
        to_self(2, vec![1, 1], vec![1, 1], 1),
    ];
    let recvs = [
        to_self(0, vec![rows - 1, 1], vec![1, cols - 2], 0),
        to_self(1, vec![0, 1], vec![1, cols - 2], 0),
        to_self(2, vec![4, 1], vec![1, 1], 1),
    ];
    let mut x = FieldExchange::builder(&w, vec![grid, small])
        .setup_timeout(Duration::from_secs(30))
        .boxes(&sends, &recvs)
        .unwrap();
    let mut u: Vec<f64> = (0..rows * cols).map(|i| i as f64).collect();
    let mut k: Vec<i64> = (0..20).map(|i| -i).collect();
    let (u0, k0) = (u.clone(), k.clone());
    x.start(&[(&u).into(), (&k).into()]).unwrap();
    // Another array of the same layout: refused, and the exchange waits on.
    let mut other = u.clone();
    let e = x
        .wait(
            common::deadline(),
            &mut [(&mut other).into(), (&mut k).into()],
        )
        .map_err(|e| e.to_string())
        .unwrap_err();
    assert!(
        e.contains("field 0: not the array the exchange was started on"),
        "{e}"
    );
    x.wait(common::deadline(), &mut [(&mut u).into(), (&mut k).into()])
        .unwrap();
    let mut want = u0.clone();
    for c in 1..cols - 1 {
        want[(rows - 1) * cols + c] = u0[cols + c];
        want[c] = u0[(rows - 2) * cols + c];
    }
    assert_eq!(u, want, "the grid after the exchange");
    let mut want_k = k0;
    want_k[4 * 4 + 1] = want_k[4 + 1];
    assert_eq!(k, want_k, "the small field after the exchange");
}

/// One rank whose box to itself overlaps the box it receives into (each a
/// block of rows, shifted by one row and one column): the cells received
/// are those of the start, as through a buffer, not cells the same
/// exchange has already written.
#[test]
fn a_box_to_itself_that_overlaps_its_receive_reads_the_cells_of_the_start() {
    let w = common::thread_world(0, 1, common::free_port(), "self-overlap-test");
    let n = 6usize;
    let grid = FieldLayout::with_halo(ElemType::F64, &[n - 2, n - 2], &[1, 1], Order::C);
    let at = |lo: Vec<usize>| BoxMessage {
        peer: 0,
        tag: 0,
        lo,
        size: vec![3, 3],
        field: Some(0),
    };
    let mut x = FieldExchange::builder(&w, vec![grid])
        .setup_timeout(Duration::from_secs(30))
        .boxes(&[at(vec![1, 1])], &[at(vec![2, 2])])
        .unwrap();
    let mut u: Vec<f64> = (0..n * n).map(|i| i as f64).collect();
    let u0 = u.clone();
    x.start(&[(&u).into()]).unwrap();
    x.wait(common::deadline(), &mut [(&mut u).into()]).unwrap();
    let mut want = u0.clone();
    for r in 0..3 {
        for c in 0..3 {
            want[(2 + r) * n + 2 + c] = u0[(1 + r) * n + 1 + c];
        }
    }
    assert_eq!(u, want);
}

/// One rank of a periodic 2 x 1 grid (each rank its own neighbour along
/// axis 1): a field of `ROWS` x `COLS` owned cells, C order, halo 1, all
/// 8 neighbours. Rank 1 starts each iteration 150 ms late; rank 0 first
/// waits until just after its start (a timeout, the exchange still in
/// flight), then waits on. Its copies to itself are made as its first
/// wait begins, before rank 1's halos arrive; after both waits every halo
/// cell holds its owner's value of the iteration.
fn late_peer_rank(rank: usize, port: u16) {
    const ROWS: usize = 5;
    const COLS: usize = 4;
    let (rows, cols) = (ROWS + 2, COLS + 2);
    let w = common::thread_world(rank, 2, port, "self-copy-late-test");
    let layout = FieldLayout::with_halo(ElemType::F64, &[ROWS, COLS], &[1, 1], Order::C);
    let grid = common::periodic_two_by_one();
    let mut x = FieldExchange::builder(&w, vec![layout])
        .transport(Transport::Shm)
        .setup_timeout(Duration::from_secs(30))
        .cartesian(&grid, &[rank, 0])
        .unwrap();
    // The value of global cell (gi, gj) at iteration `it` (periodic).
    let value = |it: usize, gi: usize, gj: usize| {
        let (gi, gj) = (gi % (2 * ROWS), gj % COLS);
        (it * 1000 + gi * COLS + gj) as f64
    };
    let mut u = vec![-1.0; rows * cols];
    for it in 1..=3 {
        for i in 1..=ROWS {
            for j in 1..=COLS {
                u[i * cols + j] = value(it, rank * ROWS + i - 1, j - 1);
            }
        }
        if rank == 1 {
            std::thread::sleep(Duration::from_millis(150));
        }
        x.start(&[(&u).into()]).unwrap();
        if rank == 0 {
            let soon = std::time::Instant::now() + Duration::from_millis(1);
            let e = x.wait(soon, &mut [(&mut u).into()]).unwrap_err();
            assert!(matches!(e, sode::HaloError::Timeout { .. }), "{e}");
        }
        x.wait(common::deadline(), &mut [(&mut u).into()]).unwrap();
        for i in 0..rows {
            for j in 0..cols {
                let (gi, gj) = (rank * ROWS + 2 * ROWS + i - 1, COLS + j - 1);
                let want = value(it, gi, gj);
                assert_eq!(
                    u[i * cols + j],
                    want,
                    "rank {rank}, iteration {it}: cell ({i}, {j})"
                );
            }
        }
    }
    w.barrier(Duration::from_secs(30)).unwrap();
}

#[test]
fn copies_to_itself_made_while_a_late_peer_is_awaited_fill_the_halos() {
    job(2, late_peer_rank);
}

/// One rank alone on a periodic grid, every neighbour itself, exchanging
/// 40 fields at once (a model's tracers, each its own array): its
/// messages to itself are copied straight from the arrays started,
/// however many fields they carry, and every halo cell of every field
/// holds its periodic image's value, over two iterations.
#[test]
fn forty_fields_of_a_rank_alone_on_a_periodic_grid_fill_every_halo() {
    const FIELDS: usize = 40;
    const ROWS: usize = 4;
    const COLS: usize = 3;
    let (rows, cols) = (ROWS + 2, COLS + 2);
    let w = common::thread_world(0, 1, common::free_port(), "many-fields-test");
    let layout = FieldLayout::with_halo(ElemType::F64, &[ROWS, COLS], &[1, 1], Order::C);
    let grid = ProcessGrid {
        dims: &[1, 1],
        periodic: &[true, true],
        stencil: Stencil::Full,
        at: &[0],
    };
    let mut x = FieldExchange::builder(&w, vec![layout; FIELDS])
        .setup_timeout(Duration::from_secs(30))
        .cartesian(&grid, &[0, 0])
        .unwrap();
    // Field f's global cell (gi, gj) at iteration `it`, periodic.
    let value = |it: usize, f: usize, gi: usize, gj: usize| {
        (it * 100_000 + f * 1000 + (gi % ROWS) * COLS + gj % COLS) as f64
    };
    let mut u = vec![vec![-1.0; rows * cols]; FIELDS];
    for it in 1..=2 {
        for (f, a) in u.iter_mut().enumerate() {
            for i in 1..=ROWS {
                for j in 1..=COLS {
                    a[i * cols + j] = value(it, f, i - 1, j - 1);
                }
            }
        }
        let started: Vec<Array<'_>> = u.iter().map(Array::from).collect();
        x.start(&started).unwrap();
        let mut waited: Vec<ArrayMut<'_>> = u.iter_mut().map(ArrayMut::from).collect();
        x.wait(common::deadline(), &mut waited).unwrap();
        for (f, a) in u.iter().enumerate() {
            for i in 0..rows {
                for j in 0..cols {
                    let want = value(it, f, i + ROWS - 1, j + COLS - 1);
                    assert_eq!(
                        a[i * cols + j],
                        want,
                        "iteration {it}, field {f}, cell ({i}, {j})"
                    );
                }
            }
        }
    }
}
