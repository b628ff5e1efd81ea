//! `sode-sched`: make, plan, simulate and draw halo-exchange patterns.

use clap::{Parser, Subcommand};
use sode_scheduler::patterns::{halo, random, scale_les3, DirectionSet, HaloShape};
use sode_scheduler::placement::{Matrix, Qap, SolverOptions};
use sode_scheduler::topology::{PartialRule, Schedule, ScheduleKind};
use sode_scheduler::{
    gantt_svg, plan, simulate, table, Algorithm, Machine, Pattern, Plan, SchedError,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "sode-sched",
    version,
    about = "RDMA command scheduling for halo exchanges (RSched and beyond)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a pattern as JSON.
    Pattern {
        #[command(subcommand)]
        kind: PatternKind,
    },
    /// Plan a pattern and print the plan as JSON.
    Plan {
        /// round-robin:K, bl:K, bl-overhead, bl-share, greedy, split, exact or auto.
        #[arg(long, default_value = "auto")]
        algorithm: String,
        /// The pattern's JSON file (`-` for standard input).
        pattern: PathBuf,
    },
    /// Simulate a plan of a pattern and print the makespan.
    Simulate {
        /// The pattern's JSON file.
        pattern: PathBuf,
        /// The plan's JSON file.
        plan: PathBuf,
    },
    /// Every Table 1 row x direction set x algorithm, simulated (Markdown).
    Table {
        /// Machine preset: k or tofud.
        #[arg(long, default_value = "k")]
        machine: String,
    },
    /// Place ranks on slots: minimise the sum of T(i,j) * D(p(i),p(j)) (QAP, GRASP + tabu search).
    Place {
        /// Traffic between ranks: a JSON array of arrays.
        #[arg(long)]
        traffic: PathBuf,
        /// Distance between slots: a JSON array of arrays.
        #[arg(long)]
        distance: PathBuf,
        /// Search this long (restarts until then); without it, a fixed effort.
        #[arg(long)]
        seconds: Option<f64>,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// All-to-all schedules on the Latin-square fat-tree and their contention.
    Alltoall {
        #[command(subcommand)]
        kind: AlltoallKind,
    },
    /// Draw a plan as SVG: engines across, time down, colour = direction.
    Gantt {
        /// The pattern's JSON file.
        pattern: PathBuf,
        /// A plan's JSON file; without it the pattern is planned with --algorithm.
        plan: Option<PathBuf>,
        /// Algorithm used when no plan file is given.
        #[arg(long, default_value = "auto")]
        algorithm: String,
        /// Where to write the SVG.
        #[arg(long)]
        svg: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum PatternKind {
    /// The RSched paper's SCALE-LES3 benchmark (Table 1).
    ScaleLes3 {
        /// Vertical grid size.
        #[arg(long)]
        k: u64,
        /// ew, ns, ewns, diag or all8.
        #[arg(long, default_value = "all8")]
        directions: String,
        /// Machine preset: k or tofud.
        #[arg(long, default_value = "k")]
        machine: String,
    },
    /// A 2-D halo: 4 or 8 neighbours (default 8).
    Halo2d {
        #[arg(long)]
        nx: u64,
        #[arg(long)]
        ny: u64,
        #[command(flatten)]
        halo: HaloArgs,
    },
    /// A 3-D halo: 6, 18 or 26 neighbours (default 26).
    Halo3d {
        #[arg(long)]
        nx: u64,
        #[arg(long)]
        ny: u64,
        #[arg(long)]
        nz: u64,
        #[command(flatten)]
        halo: HaloArgs,
    },
    /// A random pattern (deterministic in its seed).
    Random {
        #[arg(long)]
        n: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value = "k")]
        machine: String,
    },
}

#[derive(Subcommand, Debug)]
enum AlltoallKind {
    /// Print the contention-free schedule: the whole machine of order n, or
    /// with --k and --m the n k m servers of an n x k grid rectangle.
    LatinSquare {
        #[command(flatten)]
        size: LatinArgs,
    },
    /// Print the throughput ratio (1.0 = no link shared) of a schedule.
    Ratio {
        /// latin-square or fat-tree.
        #[arg(long, default_value = "latin-square")]
        topology: String,
        /// shift or proposed (proposed: Latin square only).
        #[arg(long, default_value = "proposed")]
        schedule: String,
        #[command(flatten)]
        size: LatinArgs,
        /// Fat-tree switch degree.
        #[arg(long)]
        degree: Option<usize>,
        /// Fat-tree servers used (whole leaves first); all by default.
        #[arg(long)]
        servers: Option<usize>,
    },
}

/// The size of a Latin-square all-to-all.
#[derive(clap::Args, Debug)]
struct LatinArgs {
    /// Prime order of the projective plane (switch degree n + 1).
    #[arg(long)]
    n: Option<usize>,
    /// Grid columns used (partial all-to-all).
    #[arg(long, requires = "m")]
    k: Option<usize>,
    /// Servers used per leaf (partial all-to-all).
    #[arg(long, requires = "k")]
    m: Option<usize>,
    /// Move rule of the partial schedule: geometric (the paper's definition,
    /// contention-free) or tabulated (the rule of the paper's Table 3).
    #[arg(long, default_value = "geometric")]
    rule: String,
}

impl LatinArgs {
    fn n(&self) -> Result<usize, CliError> {
        self.n.ok_or(CliError::Usage(
            "--n (the prime order) is required for a Latin-square fat-tree",
        ))
    }
    fn proposed(&self) -> Result<Schedule, CliError> {
        let n = self.n()?;
        let rule = match self.rule.as_str() {
            "geometric" => PartialRule::Geometric,
            "tabulated" => PartialRule::Tabulated,
            _ => return Err(CliError::Usage("--rule takes geometric or tabulated")),
        };
        Ok(match (self.k, self.m) {
            (Some(k), Some(m)) => Schedule::partial(n, k, m, rule)?,
            _ => Schedule::whole(n)?,
        })
    }
    fn shift(&self) -> Result<Schedule, CliError> {
        Ok(Schedule::shift_latin_square(self.n()?, self.k.zip(self.m))?)
    }
}

/// Streams a schedule as JSON (the whole n = 17 machine has 30 million flows).
fn print_schedule(schedule: &Schedule, size: &LatinArgs) -> std::io::Result<()> {
    use std::io::Write;
    let topology = schedule.latin_square().expect("a Latin-square schedule");
    let out = std::io::stdout();
    let mut w = std::io::BufWriter::new(out.lock());
    let server = |index: u32| {
        let s = topology.server(index as usize);
        let leaf: Vec<String> = s.leaf.coordinates().iter().map(|c| c.to_string()).collect();
        format!("{{\"leaf\": [{}], \"id\": {}}}", leaf.join(", "), s.id)
    };
    let (k, m) = match schedule.kind() {
        ScheduleKind::Partial { k, m, .. } => (k.to_string(), m.to_string()),
        _ => ("null".into(), "null".into()),
    };
    writeln!(
        w,
        "{{\"n\": {}, \"k\": {k}, \"m\": {m}, \"phases\": [",
        size.n.unwrap_or(0)
    )?;
    for t in 0..schedule.phase_count() {
        let flows: Vec<String> = schedule
            .phase(t)
            .iter()
            .map(|r| format!("{{\"src\": {}, \"dst\": {}}}", server(r.src), server(r.dst)))
            .collect();
        let comma = if t + 1 < schedule.phase_count() {
            ","
        } else {
            ""
        };
        writeln!(w, "  [{}]{comma}", flows.join(", "))?;
    }
    writeln!(w, "]}}")?;
    w.flush()
}

/// What 2-D and 3-D halos share.
#[derive(clap::Args, Debug)]
struct HaloArgs {
    /// Halo width in points.
    #[arg(long, default_value_t = 1)]
    halo: u64,
    /// Bytes per point (element size x fields).
    #[arg(long, default_value_t = 8)]
    element_bytes: u64,
    /// Neighbour count (2-D: 4 or 8; 3-D: 6, 18 or 26).
    #[arg(long)]
    neighbours: Option<usize>,
    /// Machine preset: k or tofud.
    #[arg(long, default_value = "k")]
    machine: String,
}

impl HaloArgs {
    fn pattern(&self, size: Vec<u64>) -> Result<Pattern, CliError> {
        let neighbours = self
            .neighbours
            .unwrap_or(if size.len() == 2 { 8 } else { 26 });
        let shape = HaloShape {
            size,
            halo: self.halo,
            element_bytes: self.element_bytes,
            neighbours,
        };
        Ok(halo(&shape, machine(&self.machine)?)?)
    }
}

/// Errors of the command-line tool: the library's, and file access.
#[derive(Debug)]
enum CliError {
    Sched(SchedError),
    Read(PathBuf, std::io::Error),
    Write(PathBuf, std::io::Error),
    UnknownMachine(String),
    Usage(&'static str),
    Output(std::io::Error),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Sched(e) => write!(f, "{e}"),
            CliError::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            CliError::Write(p, e) => write!(f, "cannot write {}: {e}", p.display()),
            CliError::UnknownMachine(m) => write!(f, "unknown machine `{m}`: use k or tofud"),
            CliError::Usage(m) => f.write_str(m),
            CliError::Output(e) => write!(f, "cannot write the output: {e}"),
        }
    }
}

impl From<SchedError> for CliError {
    fn from(e: SchedError) -> Self {
        CliError::Sched(e)
    }
}

fn machine(name: &str) -> Result<Machine, CliError> {
    Machine::preset(name).ok_or_else(|| CliError::UnknownMachine(name.to_string()))
}

/// Most bytes of one input file: far above any pattern, plan or matrix the
/// scheduler takes (100,000 puts; a placement of 10,000 ranks is larger,
/// but takes hours to search), and a bound on what a wrong path
/// (`/dev/zero`, a device, a huge file) can make it hold.
const MAX_INPUT_BYTES: u64 = 256 << 20;

fn read(path: &Path) -> Result<String, CliError> {
    use std::io::Read;
    let too_big = || {
        CliError::Read(
            path.into(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "more than {} MiB: not a pattern, plan or matrix sode-sched reads",
                    MAX_INPUT_BYTES >> 20
                ),
            ),
        )
    };
    let mut text = String::new();
    let read = if path == Path::new("-") {
        std::io::stdin()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text))
    };
    read.map_err(|e| CliError::Read(path.into(), e))?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_big());
    }
    Ok(text)
}

/// Writes `text` and a newline to standard output, reporting a full disk
/// or a closed pipe as an error rather than a panic.
fn emit(text: impl std::fmt::Display) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(CliError::Output)
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Pattern { kind } => {
            let pattern = match kind {
                PatternKind::ScaleLes3 {
                    k,
                    directions,
                    machine: m,
                } => scale_les3(k, directions.parse::<DirectionSet>()?, machine(&m)?)?,
                PatternKind::Halo2d { nx, ny, halo } => halo.pattern(vec![nx, ny])?,
                PatternKind::Halo3d { nx, ny, nz, halo } => halo.pattern(vec![nx, ny, nz])?,
                PatternKind::Random {
                    n,
                    seed,
                    machine: m,
                } => random(n, seed, machine(&m)?)?,
            };
            emit(pattern.to_json())?;
        }
        Command::Plan { algorithm, pattern } => {
            let pattern = Pattern::from_json(&read(&pattern)?)?;
            let plan = plan(&pattern, algorithm.parse::<Algorithm>()?)?;
            emit(plan.to_json())?;
        }
        Command::Simulate { pattern, plan } => {
            let pattern = Pattern::from_json(&read(&pattern)?)?;
            let plan = Plan::from_json(&read(&plan)?)?;
            let sim = simulate(&pattern, &plan)?;
            emit(format_args!("{:.3}", sim.makespan_us))?;
        }
        Command::Table { machine: m } => {
            let machine = machine(&m)?;
            let t = table(machine)?;
            emit(format_args!(
                "Simulated time per exchange (us) on machine `{m}` ({} engines, engine {} GB/s, link {} GB/s, node {} GB/s, {} us per command, {} us fixed); * = fastest (auto excluded); last column: auto / best of the paper's algorithms.\n",
                machine.engines, machine.engine_gbps, machine.link_gbps, machine.node_gbps, machine.command_overhead_us, machine.fixed_overhead_us
            ))?;
            emit(t.to_markdown().trim_end_matches('\n'))?;
        }
        Command::Place {
            traffic,
            distance,
            seconds,
            seed,
        } => place(&traffic, &distance, seconds, seed)?,
        Command::Alltoall { kind } => alltoall(kind)?,
        Command::Gantt {
            pattern,
            plan: plan_path,
            algorithm,
            svg,
        } => {
            let pattern = Pattern::from_json(&read(&pattern)?)?;
            let plan = match plan_path {
                Some(p) => Plan::from_json(&read(&p)?)?,
                None => plan(&pattern, algorithm.parse::<Algorithm>()?)?,
            };
            let picture = gantt_svg(&pattern, &plan)?;
            std::fs::write(&svg, picture).map_err(|e| CliError::Write(svg.clone(), e))?;
            eprintln!("wrote {}", svg.display());
        }
    }
    Ok(())
}

/// The best placement found from the identity, searched further for
/// `seconds` when given.
fn place(traffic: &Path, distance: &Path, seconds: Option<f64>, seed: u64) -> Result<(), CliError> {
    let matrix = |path: &Path| -> Result<Matrix, CliError> {
        serde_json::from_str(&read(path)?).map_err(|e| {
            CliError::Sched(SchedError::InvalidMatrix(format!(
                "{}: {e}: give a JSON array of arrays of numbers",
                path.display()
            )))
        })
    };
    let qap = Qap::new(matrix(traffic)?, matrix(distance)?)?;
    let identity: Vec<usize> = (0..qap.size()).collect();
    let mut best = qap.solve_from(
        &[identity],
        &SolverOptions {
            seed,
            ..SolverOptions::default()
        },
    )?;
    if let Some(limit) = seconds {
        let limit = std::time::Duration::try_from_secs_f64(limit)
            .ok()
            .filter(|d| *d <= std::time::Duration::from_secs(7 * 24 * 3600))
            .ok_or(CliError::Usage(
                "--seconds takes a number of seconds from 0 to 604800 (a week)",
            ))?;
        let deadline = std::time::Instant::now() + limit;
        let mut round = 1;
        while std::time::Instant::now() < deadline {
            let found = qap.solve(&SolverOptions {
                restarts: 1,
                seed: seed.wrapping_add(round),
                ..SolverOptions::default()
            });
            if found.cost < best.cost {
                best = found;
            }
            round += 1;
        }
    }
    emit(serde_json::json!({ "permutation": best.permutation, "cost": best.cost }))?;
    Ok(())
}

fn alltoall(kind: AlltoallKind) -> Result<(), CliError> {
    match kind {
        AlltoallKind::LatinSquare { size } => {
            let schedule = size.proposed()?;
            print_schedule(&schedule, &size).map_err(CliError::Output)?;
        }
        AlltoallKind::Ratio {
            topology,
            schedule,
            size,
            degree,
            servers,
        } => {
            let s =
                match (topology.as_str(), schedule.as_str()) {
                    ("latin-square", "proposed") => size.proposed()?,
                    ("latin-square", "shift") => size.shift()?,
                    ("fat-tree", "shift") => {
                        let degree =
                            degree.ok_or(CliError::Usage("--degree is required for a fat-tree"))?;
                        Schedule::shift_fat_tree(degree, servers)?
                    }
                    ("fat-tree", _) => {
                        return Err(CliError::Usage(
                            "a conventional fat-tree runs --schedule shift",
                        ))
                    }
                    _ => return Err(CliError::Usage(
                        "--topology takes latin-square or fat-tree; --schedule shift or proposed",
                    )),
                };
            emit(format_args!(
                "{{\"servers\": {}, \"phases\": {}, \"throughput_ratio\": {}}}",
                s.servers().len(),
                s.phase_count(),
                s.throughput_ratio()
            ))?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sode-sched: error: {e}");
            ExitCode::from(2)
        }
    }
}
