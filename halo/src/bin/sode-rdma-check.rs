//! `sode-rdma-check`: probes the RDMA device, runs verified persistent
//! exchanges between the ranks `sode-run` starts, injects failures, and
//! measures. The transport's integration tests and benchmarks drive it.
//!
//! ```text
//! sode-rdma-check probe
//! sode-run -n 3 sode-rdma-check exchange --engines 2 --sizes 1,4096,1M --iters 1000
//! sode-run -n 2 sode-rdma-check bench
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::error::Error;

use clap::{Parser, Subcommand, ValueEnum};
use sode::plan::writes_from_plan;
use sode_job::{StateError, World};
use sode_scheduler::{Algorithm, Machine, Pattern, Request};
use sode_transport::{
    BufferId, CqLayout, Device, DeviceSelector, PersistentWrites, PostMode, RdmaExchangeBuilder,
    TransportError, WindowId, Write,
};

#[derive(Parser)]
#[command(about = "Probe, verify and measure sode's RDMA transport")]
struct Cli {
    /// Start this many ranks here (when not started by a launcher).
    #[arg(short = 'n', global = true)]
    ranks: Option<usize>,
    /// Stop the self-started job after this many seconds.
    #[arg(long, global = true, default_value_t = 600)]
    job_timeout: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open the device the environment selects and print its capabilities.
    Probe,
    /// 3 ranks: rank 2 writes with the key rank 0 gave rank 1; the device
    /// must refuse it, and rank 0's memory must stay as it was.
    StolenKey,
    /// Every rank writes to every other rank each iteration; every byte that
    /// arrives is checked.
    Exchange(ExchangeArgs),
    /// Bandwidth, latency, posting cost and CQ layouts (2 ranks).
    Bench(BenchArgs),
    /// A strided face (ROWS rows of BYTES bytes, STRIDE apart) sent to the
    /// other rank each exchange, packed into a staging range and written
    /// once, or gathered by the device from the rows (one gather entry per
    /// row, writes of up to the device's SGE limit); both ways verified,
    /// both timed (2 ranks).
    Gather {
        /// rows x bytes per row, e.g. 256x8,32x512.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "256x8,64x64,32x512,16x4096"
        )]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 100)]
        iters: usize,
    },
    /// Measure this device for the scheduler (loopback queue pairs).
    Calibrate {
        #[arg(long, default_value_t = 4)]
        engines: usize,
    },
    /// Register a receive window of --bytes (checks the locked-memory limit).
    Register {
        #[arg(long, value_parser = parse_size)]
        bytes: usize,
    },
}

#[derive(Parser, Clone)]
struct ExchangeArgs {
    /// Queue pairs per peer.
    #[arg(long, default_value_t = 1)]
    engines: usize,
    /// Sizes of the writes to each peer (a chain per engine), e.g. 1,64,4K,1M.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "1,4096")]
    sizes: Vec<usize>,
    /// Exchanges to run.
    #[arg(long, default_value_t = 10)]
    iters: u64,
    /// Largest inline write (0: none).
    #[arg(long)]
    inline_max: Option<u32>,
    #[arg(long, value_enum, default_value_t = Cq::Shared)]
    cq: Cq,
    #[arg(long, value_enum, default_value_t = Post::Chain)]
    post: Post,
    /// Deadline of each wait, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    deadline_ms: u64,
    /// This rank kills itself (SIGKILL) right after starting iteration --die-at.
    #[arg(long)]
    die_rank: Option<usize>,
    #[arg(long, default_value_t = 0)]
    die_at: u64,
    /// Rank 0 writes its first command with an rkey rank 1 never issued.
    #[arg(long)]
    wrong_rkey: bool,
    /// Succeed only if an error is reported within the deadline.
    #[arg(long)]
    expect_failure: bool,
    /// Place the writes with a sode-scheduler algorithm (bl:4, split,
    /// auto, ...; K-computer machine model with --engines engines) instead
    /// of round-robin by message.
    #[arg(long)]
    schedule: Option<String>,
}

#[derive(Parser, Clone)]
struct BenchArgs {
    /// Engine counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    engines: Vec<usize>,
    /// Write sizes for the bandwidth rows.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "4K,64K,1M")]
    sizes: Vec<usize>,
    /// Bytes per exchange in the bandwidth rows (split into writes of each size).
    #[arg(long, value_parser = parse_size, default_value = "4M")]
    total: usize,
    /// Exchanges per bandwidth row.
    #[arg(long, default_value_t = 10)]
    iters: u64,
    /// Exchanges for the latency row.
    #[arg(long, default_value_t = 200)]
    lat_iters: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Cq {
    Shared,
    PerEngine,
}

#[derive(Clone, Copy, ValueEnum)]
enum Post {
    Chain,
    Each,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .map(|n| n * mult)
        .map_err(|_| format!("{s:?} is not a size (e.g. 64, 4K, 1M)"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let single = matches!(
        cli.cmd,
        Cmd::Probe | Cmd::Register { .. } | Cmd::Calibrate { .. }
    );
    // One-process commands run as they are; the others start their ranks
    // when no launcher did.
    let ranks = if single { Some(1) } else { cli.ranks };
    let run = || match &cli.cmd {
        Cmd::Probe => probe(),
        Cmd::StolenKey => stolen_key(),
        Cmd::Exchange(a) => exchange(a),
        Cmd::Bench(a) => bench(a),
        Cmd::Register { bytes } => register(*bytes),
        Cmd::Calibrate { engines } => calibrate(*engines),
        Cmd::Gather { shapes, iters } => gather(shapes, *iters),
    };
    if single && !sode_job::launched() {
        sode_job::diag::init();
        return match run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "sode-rdma-check: error: {}",
                    sode_job::diag::chain(e.as_ref())
                );
                ExitCode::FAILURE
            }
        };
    }
    sode_job::launcher::main_or_relaunch(
        "sode-rdma-check",
        ranks,
        Duration::from_secs(cli.job_timeout),
        run,
    )
}

fn probe() -> Result<(), Box<dyn Error>> {
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    println!("{}", dev.caps());
    Ok(())
}

/// A strided face: `rows` rows of `bytes` bytes, `stride` apart.
struct Face<'a> {
    shape: &'a str,
    rows: usize,
    bytes: usize,
    stride: usize,
}

fn gather(shapes: &[String], iters: usize) -> Result<(), Box<dyn Error>> {
    let world = World::init(Duration::from_secs(60))?;
    if world.size() != 2 {
        return Err("gather needs exactly 2 ranks (sode-run -n 2)".into());
    }
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    let max_sge = dev.caps().max_sge.max(1) as usize;
    for shape in shapes {
        let parsed = shape
            .split_once('x')
            .and_then(|(r, b)| Some((r.parse::<usize>().ok()?, parse_size(b).ok()?)));
        let Some((rows, bytes)) = parsed.filter(|&(r, b)| r > 0 && b > 0) else {
            return Err(Box::new(TransportError::InvalidSetting {
                name: "--shapes".into(),
                value: shape.clone(),
                why: "expected ROWSxBYTES, e.g. 256x8".into(),
            }));
        };
        // Rows of a field whose lines are 2 KiB longer than the face row.
        let face = Face {
            shape,
            rows,
            bytes,
            stride: bytes + 2048,
        };
        let pack = time_face(&world, &dev, &face, false, iters)?;
        let gathered = time_face(&world, &dev, &face, true, iters)?;
        if world.rank() == 0 {
            println!(
                "gather rows={rows} bytes={bytes} sge_per_write={} pack_us={pack:.1} gather_us={gathered:.1} gather_over_pack={:.2} verified",
                rows.min(max_sge),
                gathered / pack
            );
        }
    }
    Ok(())
}

/// The median time of sending `face` to the other rank, packed into a
/// staging range and written once or gathered by the device, every byte
/// that arrived checked.
fn time_face(
    world: &World,
    dev: &Device,
    face: &Face<'_>,
    gathered: bool,
    iters: usize,
) -> Result<f64, Box<dyn Error>> {
    let (me, peer) = (world.rank(), 1 - world.rank());
    let (rows, bytes, stride) = (face.rows, face.bytes, face.stride);
    let max_sge = dev.caps().max_sge.max(1) as usize;
    let mut b = RdmaExchangeBuilder::new(dev).inline_max(0);
    let field = b.buffer(rows * stride + rows * bytes)?;
    let win = b.window(rows * bytes, &[peer])?;
    let staging = rows * stride;
    let write = |src_offset, dst_offset, len| Write {
        peer,
        engine: 0,
        src: field,
        src_offset,
        window: win,
        dst_offset,
        len,
    };
    if gathered {
        for (c, chunk) in (0..rows).collect::<Vec<_>>().chunks(max_sge).enumerate() {
            let pieces: Vec<(usize, usize)> = chunk.iter().map(|&r| (r * stride, bytes)).collect();
            b.write_gather(write(0, c * max_sge * bytes, 0), &pieces);
        }
    } else {
        b.write(write(staging, 0, rows * bytes));
    }
    let mut x = b.build(world, Duration::from_secs(60))?;
    let mut times = Vec::with_capacity(iters);
    for it in 0..iters + 3 {
        let buf = x.buffer_mut(field)?;
        for r in 0..rows {
            for k in 0..bytes {
                buf[r * stride + k] = pattern(me, peer, r, it as u64, k);
            }
        }
        let t0 = Instant::now();
        if !gathered {
            let (rows_part, stage) = buf.split_at_mut(staging);
            for r in 0..rows {
                stage[r * bytes..(r + 1) * bytes]
                    .copy_from_slice(&rows_part[r * stride..r * stride + bytes]);
            }
        }
        x.start()?;
        x.wait_for(Duration::from_secs(60))?;
        if it >= 3 {
            times.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let w = x.window(win)?;
        for r in 0..rows {
            for k in 0..bytes {
                let want = pattern(peer, me, r, it as u64, k);
                if w[r * bytes + k] != want {
                    let how = if gathered { "gather" } else { "pack" };
                    eprintln!("rank {me}: {} {how}: iteration {it}: row {r} byte {k} is {:#04x}, expected {want:#04x}", face.shape, w[r * bytes + k]);
                    std::process::exit(5);
                }
            }
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Bytes of the window rank 0 offers ranks 1 and 2; each writes 64 bytes at
/// its own offset, and the thief aims at `TARGET`, which nobody may write.
const STOLEN_WINDOW: usize = 4096;
const TARGET: usize = 2048;

fn stolen_key() -> Result<(), Box<dyn Error>> {
    let world = World::init(Duration::from_secs(60))?;
    if world.size() != 3 {
        return Err("stolen-key needs exactly 3 ranks (-n 3)".into());
    }
    let me = world.rank();
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    // Exchange 1: ranks 1 and 2 each write into rank 0's window with the
    // key it gave them.
    let mut b = RdmaExchangeBuilder::new(&dev).inline_max(0);
    let src = b.buffer(64)?;
    let win = b.window(STOLEN_WINDOW, if me == 0 { &[1, 2] } else { &[] })?;
    if me > 0 {
        b.write(Write {
            peer: 0,
            engine: 0,
            src,
            src_offset: 0,
            window: WindowId(0),
            dst_offset: (me - 1) * 1024,
            len: 64,
        });
    }
    let mut x = b.build(&world, Duration::from_secs(60))?;
    x.buffer_mut(src)?.fill(me as u8);
    x.start()?;
    x.wait_for(Duration::from_secs(60))?;
    let (addr, rkey) = x.offered_window(0, WindowId(0)).unwrap_or((0, 0));
    let keys = world.allgather(
        &[addr.to_le_bytes(), u64::from(rkey).to_le_bytes()].concat(),
        Duration::from_secs(60),
    )?;
    if me == 0 {
        let w = x.window(win)?;
        if w[..64].iter().any(|&v| v != 1) || w[1024..1088].iter().any(|&v| v != 2) {
            return Err("the writers' own keys did not deliver their data".into());
        }
        println!("rank 0: ranks 1 and 2 wrote with their own keys");
    }
    // Exchange 2, between ranks 0 and 2 only: rank 2 aims its write at
    // rank 0's first window, under the key rank 0 gave rank 1.
    let outcome = if me == 1 {
        // Rank 1 keeps step with the barrier that ends exchange 2.
        world.barrier(Duration::from_secs(60))?;
        Ok(())
    } else {
        steal(&world, &dev, &keys[1])
    };
    if me == 2 {
        match &outcome {
            Err(e) => println!(
                "rank 2: the stolen key was refused: {}",
                sode_job::diag::chain(e.as_ref())
            ),
            Ok(()) => return Err("rank 2's write with rank 1's key completed".into()),
        }
    }
    world.barrier(Duration::from_secs(60))?;
    if me == 0 {
        let w = x.window(win)?;
        if w[TARGET..TARGET + 64].iter().any(|&v| v != 0) {
            return Err("rank 0's memory was written through a key given to another rank".into());
        }
        println!("rank 0: the target range is unchanged");
    }
    Ok(())
}

/// Rank 0 offers a window to rank 2; rank 2's write targets `stolen`
/// (rank 1's address and key) instead.
fn steal(world: &World, dev: &Device, stolen: &[u8]) -> Result<(), Box<dyn Error>> {
    let me = world.rank();
    let addr = u64::from_le_bytes(stolen[..8].try_into()?);
    let rkey = u64::from_le_bytes(stolen[8..16].try_into()?) as u32;
    let mut b = RdmaExchangeBuilder::new(dev).inline_max(0);
    let src = b.buffer(64)?;
    b.window(64, if me == 0 { &[2] } else { &[] })?;
    if me == 2 {
        b = b.inject_target(0, addr + TARGET as u64, rkey);
        b.write(Write {
            peer: 0,
            engine: 0,
            src,
            src_offset: 0,
            window: WindowId(0),
            dst_offset: 0,
            len: 64,
        });
    }
    let mut y = b.build(world, Duration::from_secs(60))?;
    y.buffer_mut(src)?.fill(0xee);
    // Rank 0 cannot complete (nothing legitimate arrives): a short wait.
    let wait = if me == 0 {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(30)
    };
    // The device's refusal may come back within the start itself (the
    // start reaps what is already there): it is the outcome either way,
    // and every rank still meets the barrier below.
    let outcome = y.start().and_then(|()| y.wait_for(wait));
    // Rank 0 keeps its end open until rank 2 has its own verdict: closed
    // first, it would be what rank 2 reports, not the device's refusal.
    world.barrier(Duration::from_secs(60))?;
    Ok(outcome?)
}

fn calibrate(engines: usize) -> Result<(), Box<dyn Error>> {
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    let c = sode_transport::calibrate(&dev, engines)?;
    println!("{c:?}");
    println!("{:?}", sode::plan::machine_of(&c));
    Ok(())
}

fn register(bytes: usize) -> Result<(), Box<dyn Error>> {
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    let mut b = RdmaExchangeBuilder::new(&dev);
    b.window(bytes, &[])?;
    println!("registered {bytes} bytes on {}", dev.name());
    Ok(())
}

/// The byte `src` sends `dst` at `offset` of message `msg` in iteration `it`.
fn pattern(src: usize, dst: usize, msg: usize, it: u64, offset: usize) -> u8 {
    (src * 131 + dst * 31 + msg * 17 + it as usize * 7 + offset * 13 + offset / 251) as u8
}

/// Window `id` at rank `owner` receives from `writer`: one window per writer,
/// in rank order.
fn window_of(owner: usize, writer: usize) -> usize {
    if writer < owner {
        writer
    } else {
        writer - 1
    }
}

/// One buffer per rank, like a field with its halo: a block of messages
/// for each peer (the sources), then a window block for each writer.
struct Layout {
    field: BufferId,
    peers: Vec<usize>,
    windows: Vec<WindowId>,
    offsets: Vec<usize>,
    /// A block: the messages and 64 bytes nobody writes.
    block: usize,
}

fn build_all_to_all(
    world: &World,
    dev: &Device,
    a: &ExchangeArgs,
) -> Result<(PersistentWrites, Layout), Box<dyn Error>> {
    let me = world.rank();
    let peers: Vec<usize> = (0..world.size()).filter(|&p| p != me).collect();
    let mut b = RdmaExchangeBuilder::new(dev)
        .engines(a.engines)
        .cq_layout(match a.cq {
            Cq::Shared => CqLayout::Shared,
            Cq::PerEngine => CqLayout::PerEngine,
        });
    b = b.post_mode(match a.post {
        Post::Chain => PostMode::Chain,
        Post::Each => PostMode::PerRequest,
    });
    if let Some(m) = a.inline_max {
        b = b.inline_max(m);
    }
    if a.wrong_rkey && me == 0 {
        b = b.inject_wrong_rkey(0);
    }
    let mut offsets = Vec::new();
    let mut total = 0;
    for &s in &a.sizes {
        offsets.push(total);
        // Writes start 8-byte aligned, odd sizes leave odd gaps.
        total += s.div_ceil(8) * 8;
    }
    let block = total + 64;
    let field = b.buffer(2 * peers.len() * block)?;
    let mut windows = Vec::new();
    for (j, &p) in peers.iter().enumerate() {
        let offset = (peers.len() + j) * block;
        let w = b.window_in(field, offset, block, &[p])?;
        // Naming the same range again must not register it again.
        let again = b.window_in(field, offset, block, &[p])?;
        debug_assert_eq!(again.0, w.0 + 1);
        windows.push(again);
    }
    let k_count = a.sizes.len();
    let whole = |id: u32| {
        let (j, k) = (id as usize / k_count, id as usize % k_count);
        let (&p, &len) = (peers.get(j)?, a.sizes.get(k)?);
        Some(Write {
            peer: p,
            engine: k % a.engines,
            src: field,
            src_offset: j * block + offsets[k],
            // Each window is declared twice; writers use the second.
            window: WindowId(2 * window_of(p, me) + 1),
            dst_offset: offsets[k],
            len,
        })
    };
    let writes = match &a.schedule {
        None => (0..(peers.len() * k_count) as u32)
            .filter_map(whole)
            .collect(),
        Some(alg) => planned(alg, a.engines, peers.len() * k_count, me, whole)?,
    };
    for w in writes {
        b.write(w);
    }
    let x = b.build(world, Duration::from_secs(60))?;
    Ok((
        x,
        Layout {
            field,
            peers,
            windows,
            offsets,
            block,
        },
    ))
}

/// The writes `whole` describes, placed on engines by the scheduler's
/// algorithm `alg` (each peer on a link of its own).
fn planned(
    alg: &str,
    engines: usize,
    puts: usize,
    me: usize,
    whole: impl Fn(u32) -> Option<Write>,
) -> Result<Vec<Write>, Box<dyn Error>> {
    let algorithm: Algorithm = alg.parse().map_err(|e| TransportError::InvalidSetting {
        name: "--schedule".into(),
        value: alg.into(),
        why: format!("{e}"),
    })?;
    let pattern = Pattern {
        machine: Machine {
            engines,
            ..Machine::K_COMPUTER
        },
        requests: (0..puts as u32)
            .filter_map(|id| {
                let w = whole(id)?;
                // Zero-byte puts do not exist for the scheduler.
                (w.len > 0).then(|| Request {
                    id,
                    dest: w.peer as u32,
                    direction: "E".into(),
                    links: vec![format!("to-{}", w.peer)],
                    bytes: w.len as u64,
                })
            })
            .collect(),
    };
    let plan = sode_scheduler::plan(&pattern, algorithm).map_err(|e| e.to_string())?;
    if me == 0 {
        println!(
            "rank 0: {} plan, simulated {:.1} us, {} puts in {} pieces",
            plan.algorithm,
            plan.simulated_us,
            pattern.requests.len(),
            plan.engines.iter().map(Vec::len).sum::<usize>()
        );
    }
    Ok(writes_from_plan(&plan, whole)?)
}

fn exchange(a: &ExchangeArgs) -> Result<(), Box<dyn Error>> {
    let world = World::init(Duration::from_secs(60))?;
    let me = world.rank();
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    let (mut x, layout) = build_all_to_all(&world, &dev, a)?;
    let deadline = Duration::from_millis(a.deadline_ms);
    let mut verified: u64 = 0;
    let mut checksum: u64 = 0;
    let began = Instant::now();
    for it in 0..a.iters {
        let field = x.buffer_mut(layout.field)?;
        for (j, &p) in layout.peers.iter().enumerate() {
            for (k, &len) in a.sizes.iter().enumerate() {
                let off = j * layout.block + layout.offsets[k];
                for (o, byte) in field[off..off + len].iter_mut().enumerate() {
                    *byte = pattern(me, p, k, it, o);
                }
            }
        }
        let t0 = Instant::now();
        let step = x.start().and_then(|()| {
            if a.die_rank == Some(me) && it == a.die_at {
                // Mid-exchange: chains and credits are posted, nothing reaped.
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            }
            x.wait_for(deadline)
        });
        if let Err(e) = step {
            if a.expect_failure {
                let took = t0.elapsed();
                println!(
                    "rank {me}: failure reported after {} ms in iteration {it}: {}",
                    took.as_millis(),
                    sode_job::diag::chain(&e)
                );
                if took > deadline + Duration::from_secs(1) {
                    eprintln!("rank {me}: reported later than the deadline ({deadline:?})");
                    std::process::exit(3);
                }
                // A failed object refuses to run again.
                match x.start() {
                    Err(TransportError::State(StateError::Failed { .. })) => return Ok(()),
                    other => {
                        eprintln!(
                            "rank {me}: start after a failure returned {other:?}, expected Failed"
                        );
                        std::process::exit(4);
                    }
                }
            }
            return Err(e.into());
        }
        for (j, &p) in layout.peers.iter().enumerate() {
            let w = x.window(layout.windows[j])?;
            let mut written = vec![false; w.len()];
            for (k, &len) in a.sizes.iter().enumerate() {
                let off = layout.offsets[k];
                for (o, &byte) in w[off..off + len].iter().enumerate() {
                    let want = pattern(p, me, k, it, o);
                    if byte != want {
                        eprintln!(
                            "rank {me}: iteration {it}: byte {o} of message {k} ({len} bytes) from rank {p} is {byte:#04x}, expected {want:#04x}"
                        );
                        std::process::exit(5);
                    }
                    checksum = checksum.wrapping_mul(31).wrapping_add(u64::from(byte));
                }
                written[off..off + len].iter_mut().for_each(|b| *b = true);
                verified += len as u64;
            }
            // The gaps between messages and the 64 bytes after them are
            // never written.
            if let Some(i) = (0..w.len()).find(|&i| !written[i] && w[i] != 0) {
                eprintln!("rank {me}: iteration {it}: byte {i} of rank {p}'s window, outside every message, was written");
                std::process::exit(5);
            }
        }
    }
    if a.expect_failure {
        eprintln!(
            "rank {me}: expected a failure, but all {} exchanges succeeded",
            a.iters
        );
        std::process::exit(6);
    }
    let st = x.stats();
    println!(
        "rank {me}: {} exchanges with {} peers, {} engines, {} commands: {verified} bytes verified, checksum {checksum:016x}, {:.1} us per exchange, {} posts for {} requests, {} registrations",
        a.iters,
        x.peers().len(),
        a.engines,
        x.commands(),
        began.elapsed().as_secs_f64() * 1e6 / a.iters.max(1) as f64,
        st.post_calls,
        st.posted_requests,
        x.registrations(),
    );
    Ok(())
}

/// One direction: rank 0 writes `total` bytes as writes of `size`, spread
/// round-robin over `engines`; rank 1 only grants credits.
struct OneWay {
    engines: usize,
    size: usize,
    total: usize,
    cq: CqLayout,
    post: PostMode,
    inline_max: u32,
}

impl OneWay {
    fn build(&self, world: &World, dev: &Device) -> Result<PersistentWrites, Box<dyn Error>> {
        let me = world.rank();
        let mut b = RdmaExchangeBuilder::new(dev)
            .engines(self.engines)
            .cq_layout(self.cq)
            .post_mode(self.post)
            .inline_max(self.inline_max);
        if me == 0 {
            let src = b.buffer(self.total)?;
            for (k, off) in (0..self.total).step_by(self.size).enumerate() {
                b.write(Write {
                    peer: 1,
                    engine: k % self.engines,
                    src,
                    src_offset: off,
                    window: WindowId(0),
                    dst_offset: off,
                    len: self.size.min(self.total - off),
                });
            }
        } else {
            b.window(self.total, &[0])?;
        }
        Ok(b.build(world, Duration::from_secs(60))?)
    }
}

/// Bytes per exchange over the mean time of `iters` exchanges, in MB/s.
fn megabytes_per_second(
    x: &mut PersistentWrites,
    bytes: usize,
    iters: u64,
) -> Result<f64, Box<dyn Error>> {
    let t = time_exchanges(x, iters)?;
    let secs: f64 = t.iter().sum::<f64>() / 1e6;
    Ok(bytes as f64 * iters as f64 / secs / 1e6)
}

fn time_exchanges(x: &mut PersistentWrites, iters: u64) -> Result<Vec<f64>, Box<dyn Error>> {
    for _ in 0..2 {
        x.start()?;
        x.wait_for(Duration::from_secs(60))?;
    }
    let mut times = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t0 = Instant::now();
        x.start()?;
        x.wait_for(Duration::from_secs(60))?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(times)
}

fn bench(a: &BenchArgs) -> Result<(), Box<dyn Error>> {
    let world = World::init(Duration::from_secs(60))?;
    if world.size() != 2 {
        return Err("bench needs exactly 2 ranks (sode-run -n 2)".into());
    }
    let dev = Device::open(&DeviceSelector::from_env()?)?;
    let me = world.rank();
    let say = |line: String| {
        if me == 0 {
            println!("{line}");
        }
    };
    say(format!(
        "# device {} mtu {} inline {}",
        dev.name(),
        dev.caps().active_mtu,
        dev.caps().max_inline
    ));
    // Bandwidth: rows of `bw engines size cq MB/s`.
    for &e in &a.engines {
        for &s in &a.sizes {
            let mut x = OneWay {
                engines: e,
                size: s,
                total: a.total,
                cq: CqLayout::Shared,
                post: PostMode::Chain,
                inline_max: 0,
            }
            .build(&world, &dev)?;
            let mbps = megabytes_per_second(&mut x, a.total, a.iters)?;
            say(format!("bw engines={e} size={s} cq=shared MBps={mbps:.2}"));
        }
    }
    // Send CQ layouts at the most engines.
    let e = *a.engines.iter().max().unwrap_or(&1);
    let s = 65536.min(a.total);
    for (name, cq) in [
        ("shared", CqLayout::Shared),
        ("per-engine", CqLayout::PerEngine),
    ] {
        let mut x = OneWay {
            engines: e,
            size: s,
            total: a.total,
            cq,
            post: PostMode::Chain,
            inline_max: 0,
        }
        .build(&world, &dev)?;
        let mbps = megabytes_per_second(&mut x, a.total, a.iters)?;
        say(format!("cq engines={e} size={s} cq={name} MBps={mbps:.2}"));
    }
    // Posting cost: a chain of 64 writes of 64 bytes, one post per chain vs
    // one per request.
    for (name, post) in [("chain", PostMode::Chain), ("each", PostMode::PerRequest)] {
        let mut x = OneWay {
            engines: 1,
            size: 64,
            total: 64 * 64,
            cq: CqLayout::Shared,
            post,
            inline_max: 64,
        }
        .build(&world, &dev)?;
        time_exchanges(&mut x, a.iters.max(20))?;
        let st = x.stats();
        if me == 0 {
            say(format!(
                "post mode={name} requests={} calls={} ns_per_request={:.0}",
                st.posted_requests,
                st.post_calls,
                st.post_nanos as f64 / st.posted_requests.max(1) as f64
            ));
        }
    }
    say(latency(&world, &dev, a.lat_iters)?);
    world.barrier(Duration::from_secs(60))?;
    Ok(())
}

/// Latency: both ranks write 8 bytes to each other per exchange; the
/// table's line.
fn latency(world: &World, dev: &Device, iters: u64) -> Result<String, Box<dyn Error>> {
    let me = world.rank();
    let mut b = RdmaExchangeBuilder::new(dev).engines(1);
    let src = b.buffer(8)?;
    b.window(8, &[1 - me])?;
    b.write(Write {
        peer: 1 - me,
        engine: 0,
        src,
        src_offset: 0,
        window: WindowId(0),
        dst_offset: 0,
        len: 8,
    });
    let mut x = b.build(world, Duration::from_secs(60))?;
    let mut t = time_exchanges(&mut x, iters)?;
    t.sort_by(f64::total_cmp);
    let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
    Ok(format!(
        "lat size=8 exchange_us_median={:.1} min={:.1} mean={mean:.1}",
        t[t.len() / 2],
        t[0]
    ))
}
