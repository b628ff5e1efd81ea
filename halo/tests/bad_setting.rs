//! A setting a build reads on each rank alone (`SODE_PROGRESS`), wrong on
//! one rank only: that rank's build fails, naming it, and its neighbour's
//! fails at once too, naming that rank and the setting, rather than wait
//! out its setup timeout for the rank's shared memory. Two ranks run as
//! processes (this test executable run again), rank 1 with
//! `SODE_PROGRESS=bogus`.

use std::time::{Duration, Instant};

use sode::LinkExchange;
use sode_job::World;
mod common;
use common::{free_port, link_to, output_of, spawn_rank};

const ROLE: &str = "SODE_BAD_SETTING_TEST";

/// One rank, when run as a child with `ROLE` set: builds an exchange with
/// the other and prints how it went.
#[test]
fn rank() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let w = World::init(Duration::from_secs(30)).unwrap();
    let peer = 1 - w.rank();
    let link = link_to(peer);
    let began = Instant::now();
    let built = LinkExchange::builder(&w, vec![link])
        .setup_timeout(Duration::from_secs(30))
        .build();
    match built {
        Ok(_) => println!("built"),
        Err(e) => println!(
            "build: {} ms: {}",
            began.elapsed().as_millis(),
            sode_job::diag::chain(&e)
        ),
    }
}

#[test]
fn a_setting_wrong_on_one_rank_fails_its_neighbours_build_at_once() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let port = free_port();
    let job = format!("badsetting{}", std::process::id());
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let env: &[(&str, &str)] = if r == 1 {
                &[(sode::PROGRESS_VAR, "bogus")]
            } else {
                &[]
            };
            spawn_rank(r, 2, port, &job, (ROLE, "1"), env)
        })
        .collect();
    let outs: Vec<String> = ranks.into_iter().map(|c| output_of(c).1).collect();
    let line = |r: usize| {
        outs[r]
            .lines()
            .find_map(|l| l.split_once("build: ").map(|(_, rest)| rest.to_string()))
            .unwrap_or_else(|| panic!("rank {r} built, or said nothing:\n{}", outs[r]))
    };
    let (own, theirs) = (line(1), line(0));
    assert!(own.contains(sode::PROGRESS_VAR), "rank 1: {own}");
    let (ms, message) = theirs.split_once(" ms: ").unwrap();
    assert!(
        message.contains("rank 1") && message.contains(sode::PROGRESS_VAR),
        "rank 0: {message}"
    );
    let ms: u64 = ms.parse().unwrap();
    assert!(ms < 10_000, "rank 0 told after {ms} ms: {message}");
}
