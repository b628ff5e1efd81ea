//! What forwarding costs: sode's bounded exchange (at most B connections
//! per rank, the other messages forwarded by the ranks between) timed
//! beside the same exchange with every pair it needs connected, in the
//! same run, the two alternated round by round. Prints two tables:
//!
//! - one message each way between ranks 0 and 2, direct, then forwarded
//!   (the pair forbidden to connect, as behind a firewall);
//! - an all-to-all with every pair connected, then with at most B = 2 and
//!   3 connections per rank.
//!
//! Each cell is the slowest rank's time per exchange, median and minimum
//! over the rounds; every received byte of the last exchange is checked.
//!
//! ```sh
//! cargo run --release -p sode-examples --example bounded_cost -- -n 8
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sode::{BoundedExchange, HaloError, Link, Message, Transport};
use sode_job::World;

#[derive(Parser, Debug)]
#[command(about = "sode's bounded exchange: forwarded beside direct")]
struct Args {
    /// Start this many ranks here (without a launcher; default 8).
    #[arg(short = 'n')]
    ranks: Option<usize>,
    /// Exchanges per round.
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// Rounds (the median and minimum are printed).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// auto, shm, rdma or tcp.
    #[arg(long, default_value = "auto")]
    transport: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    sode_job::launcher::main_or_relaunch(
        "bounded_cost",
        Some(args.ranks.unwrap_or(8)),
        Duration::from_secs(3600),
        || run(&args),
    )
}

/// Byte `o` of the message `from` sends `to`.
fn byte(from: usize, to: usize, o: usize) -> u8 {
    (from * 29 + to * 11 + o) as u8
}

/// One configuration under test, and its timings so far.
struct Case {
    x: BoundedExchange,
    us: Vec<f64>,
}

impl Case {
    fn new(
        world: &World,
        links: Vec<Link>,
        bound: usize,
        forbid: bool,
        t: Transport,
    ) -> Result<Case, HaloError> {
        let mut b = BoundedExchange::builder(world, links.clone())
            .bound(bound)
            .transport(t);
        if forbid {
            b = b.forbid(0, 2);
        }
        let mut x = b.build()?;
        for (i, l) in links.iter().enumerate() {
            if l.send.is_some() {
                for (o, b) in x.send_buf(i)?.iter_mut().enumerate() {
                    *b = byte(world.rank(), l.peer, o);
                }
            }
        }
        Ok(Case { x, us: Vec::new() })
    }

    fn once(&mut self) -> Result<(), HaloError> {
        self.x.start()?;
        self.x.wait(Duration::from_secs(60))
    }

    /// A timed batch: the slowest rank's microseconds per exchange.
    fn batch(&mut self, world: &World, iters: usize) -> Result<(), Box<dyn std::error::Error>> {
        world.barrier(Duration::from_secs(60))?;
        let t0 = Instant::now();
        for _ in 0..iters {
            self.once()?;
        }
        let mine = t0.elapsed().as_secs_f64() / iters as f64 * 1e6;
        let all = world.allgather(&mine.to_le_bytes(), Duration::from_secs(60))?;
        let slowest = all
            .iter()
            .map(|b| f64::from_le_bytes(b.as_slice().try_into().unwrap_or([0; 8])))
            .fold(0.0, f64::max);
        self.us.push(slowest);
        Ok(())
    }

    /// Every received byte, then "median (min)".
    fn report(&mut self, me: usize) -> Result<String, Box<dyn std::error::Error>> {
        let links = self.x.links().to_vec();
        for (i, l) in links.iter().enumerate() {
            if l.recv.is_some() {
                let got = self.x.recv_buf(i)?;
                if let Some(o) = (0..got.len()).find(|&o| got[o] != byte(l.peer, me, o)) {
                    return Err(format!("rank {me}: byte {o} from rank {} is wrong", l.peer).into());
                }
            }
        }
        self.us.sort_by(f64::total_cmp);
        Ok(format!(
            "{:.1} ({:.1})",
            self.us[self.us.len() / 2],
            self.us[0]
        ))
    }
}

/// A message of `len` bytes each way with each of `peers`.
fn links(peers: impl Iterator<Item = usize>, len: usize) -> Vec<Link> {
    peers
        .map(|peer| Link {
            peer,
            send: Some(Message { len, tag: 1 }),
            recv: Some(Message { len, tag: 1 }),
            offset: Vec::new(),
            name: format!("rank {peer}"),
        })
        .collect()
}

/// Times `cases` alternately, round by round; their reports.
fn alternate(
    world: &World,
    a: &Args,
    cases: &mut [Case],
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    for c in cases.iter_mut() {
        c.once()?;
    }
    for _ in 0..a.rounds {
        for c in cases.iter_mut() {
            c.batch(world, a.iters)?;
        }
    }
    cases.iter_mut().map(|c| c.report(world.rank())).collect()
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if a.iters == 0 || !(1..=100).contains(&a.rounds) {
        return Err("--iters must be at least 1 and --rounds 1 to 100".into());
    }
    let world = World::init(Duration::from_secs(60))?;
    let (me, n) = (world.rank(), world.size());
    if n < 4 {
        return Err("give at least 4 ranks (-n 4): ranks 0 and 2 need a rank between them".into());
    }
    let t: Transport = a.transport.parse()?;
    if me == 0 {
        println!(
            "### One message each way between ranks 0 and 2 ({n} ranks, {})\n",
            a.transport
        );
        println!("| bytes | direct us (median, min) | forwarded us | forwarded / direct | hops |");
        println!("|---:|---:|---:|---:|---:|");
    }
    for len in [8usize, 65536, 1 << 20] {
        let mine = match me {
            0 => links(std::iter::once(2), len),
            2 => links(std::iter::once(0), len),
            _ => Vec::new(),
        };
        let mut cases = vec![
            Case::new(&world, mine.clone(), 3, false, t)?,
            Case::new(&world, mine, 3, true, t)?,
        ];
        let hops = cases[1].x.rounds();
        let r = alternate(&world, a, &mut cases)?;
        if me == 0 {
            println!(
                "| {len} | {} | {} | {:.2} | {hops} |",
                r[0],
                r[1],
                cases[1].us[cases[1].us.len() / 2] / cases[0].us[cases[0].us.len() / 2]
            );
        }
    }
    if me == 0 {
        println!("\n### All-to-all of {n} ranks ({}): every pair connected, then at most B connections\n", a.transport);
        println!("| bytes per pair | every pair us | B = 2 us | B = 3 us | B = 2 / every | B = 3 / every | rounds B = 2, 3 |");
        println!("|---:|---:|---:|---:|---:|---:|---:|");
    }
    for len in [64usize, 16384] {
        let all = links((0..n).filter(|&p| p != me), len);
        let mut cases = vec![
            Case::new(&world, all.clone(), n - 1, false, t)?,
            Case::new(&world, all.clone(), 2, false, t)?,
            Case::new(&world, all, 3, false, t)?,
        ];
        let rounds = (cases[1].x.rounds(), cases[2].x.rounds());
        let r = alternate(&world, a, &mut cases)?;
        let median = |c: &Case| c.us[c.us.len() / 2];
        if me == 0 {
            println!(
                "| {len} | {} | {} | {} | {:.2} | {:.2} | {}, {} |",
                r[0],
                r[1],
                r[2],
                median(&cases[1]) / median(&cases[0]),
                median(&cases[2]) / median(&cases[0]),
                rounds.0,
                rounds.1
            );
        }
    }
    Ok(())
}
