//! `sode-halo-check`: runs a halo exchange and checks every cell of every
//! field after each exchange: halo cells hold exactly what their owner
//! holds (wrapped across periodic edges), halo cells with no neighbour are
//! untouched, interior cells unchanged.
//!
//! ```text
//! sode-halo-check -n 6 --global 13,11 --grid 3,2 --periodic 1,0 --halo 2 --neighbours 8 --fields 2
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::{Decomposition, HaloExchange, Stencil, Transport};
use sode_job::World;

#[derive(Parser, Debug)]
struct Args {
    /// Start this many ranks here (when not started by a launcher).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// Global cells per axis (2 or 3 axes).
    #[arg(long, value_delimiter = ',', required = true)]
    global: Vec<usize>,
    /// Processes per axis.
    #[arg(long, value_delimiter = ',', required = true)]
    grid: Vec<usize>,
    /// Periodic axes, 1 or 0 per axis (default none).
    #[arg(long, value_delimiter = ',')]
    periodic: Vec<u8>,
    #[arg(long, default_value_t = 1)]
    halo: usize,
    /// 4 or 8 (2-D); 6, 18 or 26 (3-D).
    #[arg(long)]
    neighbours: usize,
    #[arg(long, default_value_t = 1)]
    fields: usize,
    #[arg(long, default_value_t = 3)]
    iters: u64,
    #[arg(long, default_value = "auto")]
    transport: String,
    #[arg(long, default_value_t = 2)]
    engines: usize,
    /// pairwise (credits between neighbours) or pseudo-collective (barriers).
    #[arg(long, default_value = "pairwise")]
    sync: String,
    /// Keep the fields in sode's memory, this many sets of them, exchanging
    /// set `iteration % sets` (0: the caller's own arrays).
    #[arg(long, default_value_t = 0)]
    shared_sets: usize,
    /// Then start on some of the fields: each alone, the last and first
    /// together (listed backwards), none, then all again; the fields left
    /// out must keep every cell as it was.
    #[arg(long)]
    subsets: bool,
    /// Then exchange at each depth from 1 to the halo's width, and every
    /// layer again, then the last field alone at depth 1: the layers
    /// beyond the depth, and the fields left out, must keep their values.
    #[arg(long)]
    depths: bool,
}

const UNTOUCHED: f64 = -1.0;

fn value(field: usize, g: &[usize], iter: u64) -> f64 {
    let mut v = field as f64;
    for &c in g.iter().rev() {
        v = v * 1000.0 + c as f64;
    }
    v + iter as f64 * 1e11
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "sode-halo-check",
        args.ranks,
        Duration::from_secs(600),
        || run(&args),
    )
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let dims = a.global.len();
    let stencil = match (dims, a.neighbours) {
        (1, 2) | (2, 4) | (3, 6) => Stencil::Faces,
        (3, 18) => Stencil::FacesEdges,
        (2, 8) | (3, 26) => Stencil::Full,
        (d, n) => {
            return Err(format!(
                "{n} neighbours in {d}-D: use 2 (1-D), 4 or 8 (2-D), 6, 18 or 26 (3-D)"
            )
            .into())
        }
    };
    let periodic: Vec<bool> = if a.periodic.is_empty() {
        vec![false; dims]
    } else {
        a.periodic.iter().map(|&p| p != 0).collect()
    };
    let d = Decomposition::new(&a.global, &a.grid, &periodic, a.halo, stencil)?;
    let world = World::init(Duration::from_secs(60))?;
    let me = world.rank();
    let transport: Transport = a.transport.parse()?;
    let mut halo = HaloExchange::builder(&world, &d)
        .fields(a.fields)
        .transport(transport)
        .engines(a.engines)
        .sync(a.sync.parse()?)
        .shared_fields(a.shared_sets)
        .build()?;
    let (start, size) = d.block(me);
    let block = Block {
        ext: halo.local_extent().to_vec(),
        start,
        size,
        halo: a.halo,
        global: a.global.clone(),
        periodic,
        stencil,
    };
    let checked = if a.shared_sets > 0 {
        exchange_shared(a, &mut halo, &block)?
    } else {
        exchange(a, &mut halo, &block)?
    };
    let ch = halo.channels();
    let count = |k: &str| ch.iter().filter(|c| **c == k).count();
    println!(
        "rank {me}: {} neighbours (shm {}, rdma {}, tcp {}, local {}; read in place {}), {checked} halo cells checked over {} iterations, {} bytes gathered from the job{}",
        ch.len(),
        count("shm"),
        count("rdma"),
        count("tcp"),
        count("local"),
        halo.halos_read_in_place(),
        a.iters,
        world.gathered_bytes(),
        halo.plan_summary().map(|p| format!(", plan {p}")).unwrap_or_default()
    );
    Ok(())
}

/// Exchanges the fields sode keeps, set `it % sets` each iteration; every
/// cell of every set checked after each, the sets not exchanged too (they
/// must hold what they held).
fn exchange_shared(
    a: &Args,
    halo: &mut HaloExchange,
    block: &Block,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut checked = 0u64;
    let sets = a.shared_sets;
    for it in 0..a.iters {
        let set = it as usize % sets;
        for (k, field) in halo.shared_fields::<f64>()?.into_iter().enumerate() {
            if k / a.fields == set {
                block.fill(k % a.fields, field, it);
            }
        }
        halo.start_set(set)?;
        halo.wait_set(Instant::now() + Duration::from_secs(60))?;
        for (k, field) in halo.shared_fields::<f64>()?.into_iter().enumerate() {
            // Each set holds what its last exchange left.
            let s = k / a.fields;
            let Some(last) = (0..=it).rev().find(|i| *i as usize % sets == s) else {
                continue;
            };
            checked += block.check(k % a.fields, field, last, 0)?;
        }
    }
    Ok(checked)
}

/// Exchanges the caller's own arrays; every cell checked after each.
fn exchange(
    a: &Args,
    halo: &mut HaloExchange,
    block: &Block,
) -> Result<u64, Box<dyn std::error::Error>> {
    let cells: usize = block.ext.iter().product();
    let mut fields: Vec<Vec<f64>> = vec![vec![0.0; cells]; a.fields];
    let mut checked = 0u64;
    for it in 0..a.iters {
        for (f, field) in fields.iter_mut().enumerate() {
            block.fill(f, field, it);
        }
        let refs: Vec<&[f64]> = fields.iter().map(|f| f.as_slice()).collect();
        halo.start(&refs)?;
        let mut muts: Vec<&mut [f64]> = fields.iter_mut().map(|f| f.as_mut_slice()).collect();
        halo.wait(Instant::now() + Duration::from_secs(60), &mut muts)?;
        for (f, field) in fields.iter().enumerate() {
            checked += block.check(f, field, it, 0)?;
        }
    }
    if a.subsets {
        checked += exchange_subsets(a, halo, block, &mut fields)?;
    }
    if a.depths {
        checked += exchange_depths(a, halo, block, &mut fields)?;
    }
    Ok(checked)
}

/// Exchanges at each depth from 1 to the halo's width, then at every layer
/// (`--depths`), iterations after the others; every cell checked.
fn exchange_depths(
    a: &Args,
    halo: &mut HaloExchange,
    block: &Block,
    fields: &mut [Vec<f64>],
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut checked = 0;
    for (k, depth) in (1..=a.halo).chain([0]).enumerate() {
        let it = a.iters + 100 + k as u64;
        for (f, field) in fields.iter_mut().enumerate() {
            block.fill(f, field, it);
        }
        halo.set_depth(depth)?;
        let refs: Vec<&[f64]> = fields.iter().map(|f| f.as_slice()).collect();
        halo.start(&refs)?;
        let mut muts: Vec<&mut [f64]> = fields.iter_mut().map(|f| f.as_mut_slice()).collect();
        halo.wait(Instant::now() + Duration::from_secs(60), &mut muts)?;
        for (f, field) in fields.iter().enumerate() {
            checked += block.check(f, field, it, depth)?;
        }
    }
    // The last field alone at one layer: the others keep their halos.
    let (it, last) = (a.iters + 200, fields.len() - 1);
    for (f, field) in fields.iter_mut().enumerate() {
        block.fill(f, field, it);
    }
    halo.set_depth(1)?;
    halo.start_fields(&[last], &[fields[last].as_slice()])?;
    halo.wait_fields(
        Instant::now() + Duration::from_secs(60),
        &[last],
        &mut [fields[last].as_mut_slice()],
    )?;
    halo.set_depth(0)?;
    let mut before = vec![0.0; fields[last].len()];
    for (f, field) in fields.iter().enumerate() {
        if f == last {
            checked += block.check(f, field, it, 1)?;
            continue;
        }
        block.fill(f, &mut before, it);
        if field
            .iter()
            .zip(&before)
            .any(|(x, y)| x.to_bits() != y.to_bits())
        {
            return Err(
                format!("depth 1, field {last} started: field {f}, left out, changed").into(),
            );
        }
    }
    Ok(checked)
}

/// Starts on some of the fields (`--subsets`), iterations from
/// `a.iters` on; a field left out must hold what was written before.
fn exchange_subsets(
    a: &Args,
    halo: &mut HaloExchange,
    block: &Block,
    fields: &mut [Vec<f64>],
) -> Result<u64, Box<dyn std::error::Error>> {
    let n = a.fields;
    let mut lists: Vec<Vec<usize>> = (0..n).map(|f| vec![f]).collect();
    if n > 1 {
        lists.push(vec![n - 1, 0]);
    }
    lists.push(vec![]);
    lists.push((0..n).collect());
    let mut checked = 0;
    let mut before = vec![0.0; fields.first().map_or(0, Vec::len)];
    for (k, which) in lists.iter().enumerate() {
        let it = a.iters + k as u64;
        for (f, field) in fields.iter_mut().enumerate() {
            block.fill(f, field, it);
        }
        let refs: Vec<&[f64]> = which.iter().map(|&f| fields[f].as_slice()).collect();
        halo.start_fields(which, &refs)?;
        let mut muts: Vec<&mut [f64]> = fields
            .iter_mut()
            .enumerate()
            .filter(|(f, _)| which.contains(f))
            .map(|(_, v)| v.as_mut_slice())
            .collect();
        // `muts` is in field order: list the fields so.
        let mut sorted = which.clone();
        sorted.sort_unstable();
        halo.wait_fields(Instant::now() + Duration::from_secs(60), &sorted, &mut muts)?;
        for (f, field) in fields.iter().enumerate() {
            if which.contains(&f) {
                checked += block.check(f, field, it, 0)?;
                continue;
            }
            block.fill(f, &mut before, it);
            if let Some(i) = (0..field.len()).find(|&i| field[i].to_bits() != before[i].to_bits()) {
                return Err(format!(
                    "iteration {it}, fields {which:?} started: field {f}, left out, changed at local cell {:?}",
                    block.coords(i)
                )
                .into());
            }
        }
    }
    Ok(checked)
}

/// This rank's block of the global grid, with its halo.
struct Block {
    ext: Vec<usize>,
    start: Vec<usize>,
    size: Vec<usize>,
    halo: usize,
    global: Vec<usize>,
    periodic: Vec<bool>,
    stencil: Stencil,
}

impl Block {
    /// Local coordinates of cell `i`.
    fn coords(&self, mut i: usize) -> Vec<usize> {
        self.ext
            .iter()
            .map(|&e| {
                let c = i % e;
                i /= e;
                c
            })
            .collect()
    }

    /// Interior cells get their global value, halo cells `UNTOUCHED`.
    fn fill(&self, f: usize, field: &mut [f64], it: u64) {
        let (h, dims) = (self.halo, self.ext.len());
        for (i, cell) in field.iter_mut().enumerate() {
            let l = self.coords(i);
            let interior = (0..dims).all(|ax| l[ax] >= h && l[ax] < h + self.size[ax]);
            *cell = if interior {
                let g: Vec<usize> = (0..dims).map(|ax| self.start[ax] + l[ax] - h).collect();
                value(f, &g, it)
            } else {
                UNTOUCHED
            };
        }
    }

    /// Checks every cell after an exchange at `depth` layers (0: every
    /// layer); the halo cells checked.
    fn check(&self, f: usize, field: &[f64], it: u64, depth: usize) -> Result<u64, String> {
        let mut checked = 0;
        for (i, &got) in field.iter().enumerate() {
            let l = self.coords(i);
            let (mut want, offset, g) = self.expected(f, &l, it);
            if depth > 0 && self.beyond(&l, depth) {
                want = UNTOUCHED;
            }
            if got.to_bits() != want.to_bits() {
                return Err(format!(
                    "iteration {it}, field {f}, local cell {l:?} (offset {offset:?}, global {g:?}): got {got}, expected {want}"
                ));
            }
            checked += u64::from(offset.iter().any(|&o| o != 0));
        }
        Ok(checked)
    }

    /// Whether local cell `l` lies more than `depth` layers outside the
    /// owned box along some axis.
    fn beyond(&self, l: &[usize], depth: usize) -> bool {
        let h = self.halo;
        l.iter().enumerate().any(|(ax, &x)| {
            let out = if x < h {
                h - x
            } else {
                (x + 1).saturating_sub(h + self.size[ax])
            };
            out > depth
        })
    }

    /// What local cell `l` must hold: its owner's value, wrapped across
    /// periodic edges, where the stencil reaches it; `UNTOUCHED` elsewhere.
    /// Also its offset (per axis -1 below the block, +1 above, 0 inside)
    /// and global coordinates.
    fn expected(&self, f: usize, l: &[usize], it: u64) -> (f64, Vec<i32>, Vec<usize>) {
        let (h, dims) = (self.halo, self.ext.len());
        let offset: Vec<i32> = (0..dims)
            .map(|ax| {
                if l[ax] < h {
                    -1
                } else if l[ax] >= h + self.size[ax] {
                    1
                } else {
                    0
                }
            })
            .collect();
        let mut g = Vec::with_capacity(dims);
        let mut outside = false;
        for (ax, &la) in l.iter().enumerate() {
            let x = self.start[ax] as i64 + la as i64 - h as i64;
            let n = self.global[ax] as i64;
            if x < 0 || x >= n {
                outside |= !self.periodic[ax];
                g.push(x.rem_euclid(n) as usize);
            } else {
                g.push(x as usize);
            }
        }
        let nonzero = offset.iter().filter(|&&o| o != 0).count();
        let reached = match self.stencil {
            Stencil::Faces => nonzero <= 1,
            Stencil::FacesEdges => nonzero <= 2,
            Stencil::Full => true,
        };
        let want = if nonzero == 0 || (reached && !outside) {
            value(f, &g, it)
        } else {
            UNTOUCHED
        };
        (want, offset, g)
    }
}
