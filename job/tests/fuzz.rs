//! Fuzzing what the job layer reads from outside: launcher variables, the
//! job secret, and bytes that strangers send to a running rendezvous.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use sode_job::{LaunchInfo, Secret, World};

const VARS: &[&str] = &[
    "SODE_RANK",
    "SODE_SIZE",
    "SODE_LOCAL_RANK",
    "SODE_ROOT",
    "SODE_JOB_ID",
    "SODE_JOB_SECRET",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_NAMESPACE",
    "PMI_RANK",
    "PMI_SIZE",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn launcher_variables_never_panic(values in prop::collection::vec(prop::option::of("\\PC{0,80}|[0-9]{1,25}|-?[0-9]{1,3}"), VARS.len())) {
        let get = |k: &str| VARS.iter().position(|v| *v == k).and_then(|i| values[i].clone());
        if let Ok(l) = LaunchInfo::from_vars(get) {
            prop_assert!(l.rank < l.size);
            prop_assert!(l.size == 1 || (l.root.is_some() && l.secret.is_some()));
        }
    }

    #[test]
    fn secrets_parse_or_are_refused(text in "\\PC{0,100}|[0-9a-fA-F]{60,68}") {
        if let Ok(s) = Secret::from_hex(&text) {
            prop_assert_eq!(s.to_hex(), text.trim().to_ascii_lowercase());
        }
    }
}

/// A tiny deterministic generator for the strangers' bytes.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

#[test]
fn random_bytes_from_strangers_never_stop_a_rendezvous() {
    let secret = Secret::random().unwrap();
    let port = sode_job::free_port().unwrap();
    let root: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let launch = |rank| LaunchInfo {
        job_id: Some("fuzzed".into()),
        ..LaunchInfo::loopback(rank, 2, port, secret.clone())
    };
    let l0 = launch(0);
    let rank0 = std::thread::spawn(move || World::init_with(&l0, Duration::from_secs(60)));
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(root).is_err() {
        assert!(Instant::now() < until, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut rng = Lcg(7);
    let strangers: Vec<_> = (0..48)
        .map(|_| {
            let len = (rng.next() % 200) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            // Connected before the real rank joins (after it, the
            // rendezvous stops listening and a stranger would be refused).
            let mut s = TcpStream::connect(root).expect("rank 0 still listens");
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let _ = s.write_all(&bytes);
                let _ = s.shutdown(std::net::Shutdown::Write);
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                got
            })
        })
        .collect();
    let t0 = Instant::now();
    let l1 = launch(1);
    let w1 = World::init_with(&l1, Duration::from_secs(60)).expect("the real rank joins");
    let w0 = rank0.join().unwrap().expect("rank 0 meets rank 1");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(w0.job_id(), w1.job_id());
    for s in strangers {
        let got = s.join().unwrap();
        // The challenge and, after a wrong proof, the fixed refusal only.
        let refused = got.len() == 64 && &got[32..] == b"sode/1 refused: not this job's!!";
        assert!(
            got.len() <= 32 || refused,
            "a stranger received {} bytes",
            got.len()
        );
    }
}
