//! `sode::reorder` on one node: launch order is kept (every order moves 0
//! bytes between nodes), the renumbered world runs a halo exchange, and
//! ranks that describe different decompositions all fail alike.

use std::time::{Duration, Instant};

use sode::{reorder, Decomposition, HaloExchange, Stencil};
mod common;
use common::{free_port, thread_world};

fn chain(n: usize, cells: usize) -> Decomposition {
    Decomposition::new(&[cells * n, 8], &[n, 1], &[false, false], 1, Stencil::Faces).unwrap()
}

#[test]
fn on_one_node_launch_order_is_kept_and_the_world_runs() {
    let port = free_port();
    let hs: Vec<_> = (0..3)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 3, port, "reorder-one-node");
                let d = chain(3, 8);
                let r = reorder(&w, &d, 8, Duration::from_secs(30)).unwrap();
                assert!(!r.moved(), "{:?}", r.order);
                assert_eq!(r.order, vec![0, 1, 2]);
                assert_eq!(r.bytes_between_nodes, 0.0);
                assert_eq!(r.world.rank(), rank);
                let mut halo = HaloExchange::builder(&r.world, &d).build().unwrap();
                let cells: usize = halo.local_extent().iter().product();
                let mut u = vec![rank as f64; cells];
                halo.start(&[&u]).unwrap();
                halo.wait(Instant::now() + Duration::from_secs(30), &mut [&mut u])
                    .unwrap();
                // A neighbour's value arrived in the halo.
                let neighbour = if rank == 0 { 1.0 } else { rank as f64 - 1.0 };
                assert!(u.contains(&neighbour));
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn ranks_that_disagree_all_fail() {
    let port = free_port();
    let hs: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "reorder-disagree");
                // Rank 1's blocks are wider.
                let d = chain(2, if rank == 0 { 8 } else { 16 });
                let e = reorder(&w, &d, 8, Duration::from_secs(30))
                    .unwrap_err()
                    .to_string();
                // And a decomposition of the wrong size.
                let e2 = reorder(&w, &chain(3, 8), 8, Duration::from_secs(30))
                    .unwrap_err()
                    .to_string();
                (e, e2)
            })
        })
        .collect();
    for h in hs {
        let (e, e2) = h.join().unwrap();
        assert!(
            e.contains("ranks [1] described another decomposition"),
            "{e}"
        );
        assert!(
            e2.contains("ranks [0, 1] gave no decomposition of this job's 2 ranks"),
            "{e2}"
        );
    }
}
