//! Starting the ranks of a job on this machine: what `sode-run` does, for
//! programs that launch themselves.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Whether this process was started as a rank (a launcher set a rank
/// variable that [`LaunchInfo`](crate::LaunchInfo) reads).
pub fn launched() -> bool {
    [
        "SODE_RANK",
        "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// For a program that starts its own ranks when no launcher did: runs `n`
/// ranks of this very executable with this process's arguments (see
/// [`run_local`]) and returns the status to exit with (2 if the job could
/// not start, with the reason on stderr).
pub fn relaunch_self(n: usize, timeout: Option<Duration>) -> u8 {
    let started = std::env::current_exe()
        .map_err(|e| format!("cannot find this program's path: {e}"))
        .and_then(|me| {
            run_local(
                n,
                &me.to_string_lossy(),
                &std::env::args().skip(1).collect::<Vec<_>>(),
                timeout,
            )
        });
    match started {
        Ok(code) => code.clamp(0, 255) as u8,
        Err(e) => {
            eprintln!("launch: {e}");
            2
        }
    }
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
pub fn run_local(
    n: usize,
    program: &str,
    args: &[String],
    timeout: Option<Duration>,
) -> Result<i32, String> {
    if n == 0 {
        return Err("a job needs at least one rank".into());
    }
    let rest = args;
    // A free port for rank 0 to listen on. It is released before rank 0
    // binds it; another process taking it in between makes rank 0 fail
    // with a clear bind error, and the job with it.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port for SODE_ROOT: {e}"))?
        .port();
    let job = format!("run{}-{}", std::process::id(), port);
    let mut children: Vec<Child> = Vec::with_capacity(n);
    let mut forwarders = Vec::new();
    for rank in 0..n {
        let mut child = Command::new(program)
            .args(rest)
            .env("SODE_RANK", rank.to_string())
            .env("SODE_SIZE", n.to_string())
            .env("SODE_ROOT", format!("127.0.0.1:{port}"))
            .env("SODE_JOB_ID", &job)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so stopping a rank stops what it started.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                for c in &mut children {
                    let _ = c.kill();
                }
                format!("cannot start {program:?}: {e}")
            })?;
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        forwarders.push(std::thread::spawn(move || forward(out, rank, false)));
        forwarders.push(std::thread::spawn(move || forward(err, rank, true)));
        children.push(child);
    }

    // Ranks run in their own process groups, so a Ctrl-C at the terminal
    // reaches only sode-run: pass it on by stopping the job.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    let started = Instant::now();
    let mut status: Vec<Option<i32>> = vec![None; n];
    let mut failure: Option<(usize, i32)> = None;
    while status.iter().any(Option::is_none) {
        for (rank, c) in children.iter_mut().enumerate() {
            if status[rank].is_some() {
                continue;
            }
            if let Ok(Some(st)) = c.try_wait() {
                use std::os::unix::process::ExitStatusExt;
                let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
                status[rank] = Some(code);
                if code != 0 && failure.is_none() {
                    let how = match st.signal() {
                        Some(sig) => format!("was killed by signal {sig}"),
                        None => format!("exited with status {code}"),
                    };
                    eprintln!("sode-run: rank {rank} {how}; stopping the other ranks");
                    failure = Some((rank, code));
                }
            }
        }
        if failure.is_none() && interrupted.load(Ordering::Relaxed) {
            eprintln!("sode-run: interrupted; stopping the ranks");
            failure = Some((usize::MAX, 130));
        }
        if failure.is_none() {
            if let Some(t) = timeout.filter(|&t| started.elapsed() > t) {
                eprintln!("sode-run: the job did not finish within {t:?}; stopping it");
                failure = Some((usize::MAX, 124));
            }
        }
        if failure.is_some() {
            stop_all(&mut children, &mut status);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Whatever the ranks left behind in their groups ends with the job (it
    // would otherwise hold their output open).
    for c in &children {
        let _ = kill(group_of(c), Signal::SIGKILL);
    }
    for f in forwarders {
        let _ = f.join();
    }
    Ok(match failure {
        None => 0,
        Some((_, code)) => code.clamp(1, 255),
    })
}

/// SIGTERM, then SIGKILL after two seconds, to every rank still running.
fn stop_all(children: &mut [Child], status: &mut [Option<i32>]) {
    for (rank, c) in children.iter().enumerate() {
        if status[rank].is_none() {
            let _ = kill(group_of(c), Signal::SIGTERM);
        }
    }
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until && status.iter().any(Option::is_none) {
        for (rank, c) in children.iter_mut().enumerate() {
            if status[rank].is_none() {
                if let Ok(Some(st)) = c.try_wait() {
                    status[rank] = Some(st.code().unwrap_or(1));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for (rank, c) in children.iter_mut().enumerate() {
        if status[rank].is_none() {
            let _ = kill(group_of(c), Signal::SIGKILL);
            let _ = c.wait();
            status[rank] = Some(137);
        }
    }
}

/// The process group of rank `c` (negative pid: signal the whole group).
fn group_of(c: &Child) -> Pid {
    Pid::from_raw(-(c.id() as i32))
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
