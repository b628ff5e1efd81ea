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

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("sode-run: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode, String> {
    let mut args = std::env::args().skip(1);
    let mut n: Option<usize> = None;
    let mut timeout: Option<Duration> = None;
    let mut program = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "-n" | "--np" => {
                let v = args.next().ok_or(format!("-n needs a number\n{USAGE}"))?;
                n = Some(
                    v.parse()
                        .map_err(|_| format!("-n {v:?}: expected a positive number of ranks"))?,
                );
            }
            "--timeout" => {
                let v = args
                    .next()
                    .ok_or(format!("--timeout needs seconds\n{USAGE}"))?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout {v:?}: expected seconds"))?;
                timeout = Some(Duration::from_secs_f64(s));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            _ => {
                program = Some(a);
                break;
            }
        }
    }
    let n = n.filter(|&n| n > 0).ok_or(format!(
        "the number of ranks (-n N, N >= 1) is missing\n{USAGE}"
    ))?;
    let program = program.ok_or(format!("no program given\n{USAGE}"))?;
    let rest: Vec<String> = args.collect();

    let code = sode_transport::launch::run_local(n, &program, &rest, timeout)?;
    Ok(ExitCode::from(code as u8))
}
