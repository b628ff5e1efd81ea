//! `sode-run -n N [--timeout SECS] PROGRAM ARGS...`: starts N ranks of
//! PROGRAM on this machine with the bootstrap environment set (`SODE_RANK`,
//! `SODE_SIZE`, `SODE_ROOT`, `SODE_JOB_ID`), forwards their output line by
//! line with a `[rank]` prefix, and fails as a whole when one rank fails:
//! the others are stopped and sode-run exits with the failing rank's status.

use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: sode-run -n N [--timeout SECS] PROGRAM [ARGS...]\n\
  Starts N ranks of PROGRAM here with SODE_RANK, SODE_SIZE, SODE_ROOT and SODE_JOB_ID set.\n\
  Output lines are prefixed with [rank]. If one rank fails, the others are stopped\n\
  and sode-run exits with its status; --timeout stops the whole job after SECS.";

/// Most ranks sode-run starts on one machine.
const MAX_LOCAL_RANKS: usize = 4096;

/// A command line, parsed.
struct Job {
    ranks: usize,
    timeout: Option<Duration>,
    program: String,
    args: Vec<String>,
}

fn main() -> ExitCode {
    sode_job::diag::init();
    let job = match parse(std::env::args().skip(1)) {
        Ok(Some(job)) => job,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("sode-run: {msg}");
            return ExitCode::from(2);
        }
    };
    match sode_job::launcher::run_local(job.ranks, &job.program, &job.args, job.timeout) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("sode-run: {}", sode_job::diag::chain(&e));
            ExitCode::from(2)
        }
    }
}

/// The job to run, or `None` for `--help`.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Job>, String> {
    let mut ranks: Option<usize> = None;
    let mut timeout: Option<Duration> = None;
    let mut program = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "-n" | "--np" => {
                let v = args.next().ok_or(format!("-n needs a number\n{USAGE}"))?;
                ranks = Some(
                    v.parse()
                        .map_err(|_| format!("-n {v:?}: expected a positive number of ranks"))?,
                );
            }
            "--timeout" => {
                let v = args
                    .next()
                    .ok_or(format!("--timeout needs seconds\n{USAGE}"))?;
                let secs: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout {v:?}: expected seconds"))?;
                timeout = Some(Duration::try_from_secs_f64(secs).map_err(|_| {
                    format!("--timeout {v:?}: expected a finite, non-negative number of seconds")
                })?);
            }
            "-h" | "--help" => return Ok(None),
            _ => {
                program = Some(a);
                break;
            }
        }
    }
    let ranks = ranks.filter(|&n| n > 0).ok_or(format!(
        "the number of ranks (-n N, N >= 1) is missing\n{USAGE}"
    ))?;
    if ranks > MAX_LOCAL_RANKS {
        return Err(format!(
            "-n {ranks}: sode-run starts ranks on this machine, at most {MAX_LOCAL_RANKS}; use srun or mpirun for larger jobs"
        ));
    }
    let program = program.ok_or(format!("no program given\n{USAGE}"))?;
    Ok(Some(Job {
        ranks,
        timeout,
        program,
        args: args.collect(),
    }))
}
