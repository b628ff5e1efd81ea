//! Starting the ranks of a job on this machine: `sode-run`, and programs
//! that start their own ranks when no launcher did.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::backoff::Backoff;
use crate::error::{JobError, Result};
use crate::launch::{launched, JOB_ID_VAR, ROOT_VAR};

/// Exit status of a job stopped at its timeout (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status of a job stopped by SIGINT, SIGTERM or SIGHUP.
pub const EXIT_INTERRUPTED: i32 = 130;

/// The `main` of a program that is a rank of a job, or starts its own: when
/// a launcher started this process, installs the diagnostics subscriber and
/// runs `body`, printing its error (with every cause) under `program`'s name;
/// otherwise runs `ranks` ranks of this very executable with this process's
/// arguments ([`run_local`]) and returns the job's status.
pub fn main_or_relaunch(
    program: &str,
    ranks: Option<usize>,
    timeout: Duration,
    body: impl FnOnce() -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> ExitCode {
    crate::diag::init();
    if !launched() {
        let Some(n) = ranks else {
            eprintln!("{program}: give -n N, or start it with sode-run, srun or mpirun");
            return ExitCode::from(2);
        };
        return match relaunch_self(n, Some(timeout)) {
            Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => {
                eprintln!("{program}: {}", crate::diag::chain(&e));
                ExitCode::from(2)
            }
        };
    }
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: error: {}", crate::diag::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Runs `n` ranks of this very executable with this process's arguments
/// (see [`run_local`]) and returns the status to exit with.
///
/// # Errors
///
/// As [`run_local`], and [`JobError::Start`] when this executable's path
/// cannot be read.
pub fn relaunch_self(n: usize, timeout: Option<Duration>) -> Result<i32> {
    let me = std::env::current_exe().map_err(|e| JobError::Start {
        why: "cannot find this program's path".into(),
        source: Some(e),
    })?;
    run_local(
        n,
        &me.to_string_lossy(),
        &std::env::args().skip(1).collect::<Vec<_>>(),
        timeout,
    )
}

/// One started rank.
#[derive(Debug)]
struct Rank {
    child: Child,
    /// Exit status once it ended.
    status: Option<i32>,
}

impl Rank {
    /// The rank's process group (a negative pid signals the whole group).
    fn group(&self) -> Pid {
        Pid::from_raw(-(self.child.id() as i32))
    }

    /// Reaps it if it ended; its status then.
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_some() {
            return None;
        }
        let st = self.child.try_wait().ok().flatten()?;
        self.status = Some(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)));
        Some(st)
    }
}

/// Why a job ended early.
#[derive(Debug, Clone, Copy)]
struct Stop {
    code: i32,
}

/// Starts `n` ranks of `program` with `args` on this machine, with
/// `SODE_RANK`, `SODE_SIZE`, `SODE_ROOT` and `SODE_JOB_ID` set, forwards
/// their output line by line prefixed with `[rank]`, and waits. When a rank
/// fails, the others are stopped (SIGTERM, then SIGKILL after two seconds;
/// each rank runs in its own process group, so what it started stops with
/// it); so are they after `timeout`, or when this process gets SIGINT,
/// SIGTERM or SIGHUP. Returns the job's exit status: 0, the failing rank's
/// status, 124 on timeout, 130 when interrupted; `Err` when the job could
/// not start.
///
/// # Errors
///
/// [`JobError::Start`] when the ranks cannot be spawned or the
/// rendezvous cannot listen.
pub fn run_local(
    n: usize,
    program: &str,
    args: &[String],
    timeout: Option<Duration>,
) -> Result<i32> {
    if n == 0 {
        return Err(JobError::Start {
            why: "a job needs at least one rank".into(),
            source: None,
        });
    }
    let interrupted = watch_signals()?;
    let (mut ranks, forwarders) = spawn_ranks(n, program, args)?;
    let stop = supervise(&mut ranks, &interrupted, timeout);
    if stop.is_some() {
        stop_all(&mut ranks);
    }
    // Whatever the ranks left behind in their groups ends with the job (it
    // would otherwise hold their output open).
    for r in &ranks {
        let _ = kill(r.group(), Signal::SIGKILL);
    }
    for f in forwarders {
        let _ = f.join();
    }
    Ok(stop.map_or(0, |s| s.code.clamp(1, 255)))
}

/// Ranks run in their own process groups, so a Ctrl-C at the terminal
/// reaches only the launcher: it passes it on by stopping the job.
fn watch_signals() -> Result<Arc<AtomicBool>> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted)).map_err(|e| {
            JobError::Start {
                why: format!("cannot handle signal {sig}"),
                source: Some(e),
            }
        })?;
    }
    Ok(interrupted)
}

fn spawn_ranks(
    n: usize,
    program: &str,
    args: &[String],
) -> Result<(Vec<Rank>, Vec<JoinHandle<()>>)> {
    let port = crate::launch::free_port()?;
    let job = format!("run{}-{}", std::process::id(), port);
    // The ranks prove to each other with it that they belong to this job;
    // the environment of a process is readable by its own user only.
    let secret = crate::auth::Secret::random()?.to_hex();
    let mut ranks: Vec<Rank> = Vec::with_capacity(n);
    let mut forwarders = Vec::new();
    for rank in 0..n {
        let spawned = Command::new(program)
            .args(args)
            .env("SODE_RANK", rank.to_string())
            .env("SODE_SIZE", n.to_string())
            .env(ROOT_VAR, format!("127.0.0.1:{port}"))
            .env(JOB_ID_VAR, &job)
            .env(crate::auth::SECRET_VAR, &secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so stopping a rank stops what it started.
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                for r in &mut ranks {
                    let _ = r.child.kill();
                }
                return Err(JobError::Start {
                    why: format!("cannot start {program:?}"),
                    source: Some(e),
                });
            }
        };
        if let Some(out) = child.stdout.take() {
            forwarders.push(std::thread::spawn(move || forward(out, rank, false)));
        }
        if let Some(err) = child.stderr.take() {
            forwarders.push(std::thread::spawn(move || forward(err, rank, true)));
        }
        ranks.push(Rank {
            child,
            status: None,
        });
    }
    Ok((ranks, forwarders))
}

/// Waits for every rank; the reason to stop the job early, if one comes.
fn supervise(
    ranks: &mut [Rank],
    interrupted: &AtomicBool,
    timeout: Option<Duration>,
) -> Option<Stop> {
    let started = Instant::now();
    let mut backoff = Backoff::setup(Duration::from_millis(5));
    while ranks.iter().any(|r| r.status.is_none()) {
        for (i, r) in ranks.iter_mut().enumerate() {
            let Some(st) = r.poll() else { continue };
            let code = r.status.unwrap_or(1);
            if code != 0 {
                let how = match st.signal() {
                    Some(sig) => format!("was killed by signal {sig}"),
                    None => format!("exited with status {code}"),
                };
                tracing::error!("rank {i} {how}; stopping the other ranks");
                return Some(Stop { code });
            }
        }
        if interrupted.load(Ordering::Relaxed) {
            tracing::error!("interrupted; stopping the ranks");
            return Some(Stop {
                code: EXIT_INTERRUPTED,
            });
        }
        if let Some(t) = timeout.filter(|&t| started.elapsed() > t) {
            tracing::error!("the job did not finish within {t:?}; stopping it");
            return Some(Stop { code: EXIT_TIMEOUT });
        }
        backoff.snooze();
    }
    None
}

/// SIGTERM, then SIGKILL after two seconds, to every rank still running.
fn stop_all(ranks: &mut [Rank]) {
    for r in ranks.iter().filter(|r| r.status.is_none()) {
        let _ = kill(r.group(), Signal::SIGTERM);
    }
    let until = Instant::now() + Duration::from_secs(2);
    let mut backoff = Backoff::setup(Duration::from_millis(10));
    while Instant::now() < until && ranks.iter().any(|r| r.status.is_none()) {
        ranks.iter_mut().for_each(|r| {
            r.poll();
        });
        backoff.snooze();
    }
    for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
        let _ = kill(r.group(), Signal::SIGKILL);
        let _ = r.child.wait();
        r.status = Some(128 + Signal::SIGKILL as i32);
    }
}

fn forward(stream: impl std::io::Read, rank: usize, to_stderr: bool) {
    let reader = BufReader::new(stream);
    for line in reader.split(b'\n') {
        let Ok(line) = line else { break };
        let text = String::from_utf8_lossy(&line);
        let result = if to_stderr {
            writeln!(std::io::stderr().lock(), "[{rank}] {text}")
        } else {
            writeln!(std::io::stdout().lock(), "[{rank}] {text}")
        };
        if result.is_err() {
            break;
        }
    }
}
