//! Reordered ranks, as `MPI_Cart_create(..., reorder = 1)`: the ranks of a
//! decomposition are renumbered so that the neighbours that exchange the
//! most bytes are nearest. The traffic comes from the decomposition, the
//! distances from where the ranks run ([`crate::distance`]: NUMA nodes
//! inside a node, round trips measured between nodes), and the assignment
//! from the QAP solver of `sode_scheduler::placement`, started from launch
//! order so it is never worse than it. Rank 0 chooses and every rank adopts
//! its choice, so the ranks cannot disagree.

use std::time::Duration;

use sode_job::World;
use sode_scheduler::placement::{Matrix, Qap, SolverOptions};

use crate::decomp::Decomposition;
use crate::distance::{gather, layout_of, measure_round_trips, Layout, Numa, RoundTrip};
use crate::error::{HaloError, Result};

/// A world renumbered for a decomposition, and what it gained.
#[derive(Debug, Clone)]
pub struct Reordered {
    /// The renumbered world: its rank `r` owns block `r` of the
    /// decomposition.
    pub world: World,
    /// `order[r]`: the launch rank (of the world given) that is now rank r.
    pub order: Vec<usize>,
    /// Bytes per exchange, over the whole job, between ranks on different
    /// nodes in launch order.
    pub launch_bytes_between_nodes: f64,
    /// The same in the new order.
    pub bytes_between_nodes: f64,
    /// Bytes per exchange times their distance, summed over the job, in
    /// launch order: what the placement minimises (a byte inside one NUMA
    /// node costs 1, between nodes about 10 times their measured round trip
    /// over the median node pair's).
    pub launch_cost: f64,
    /// The same in the new order.
    pub cost: f64,
    /// The round trips measured between nodes (their first ranks, launch
    /// numbering), in microseconds.
    pub round_trips: Vec<(usize, usize, f64)>,
}

impl Reordered {
    /// Whether any rank got a new number.
    pub fn moved(&self) -> bool {
        self.order.iter().enumerate().any(|(r, &l)| r != l)
    }
}

/// What each rank contributes first: the decomposition and cell size it
/// described, as text (none when its decomposition does not fit the job),
/// where it runs inside its node, and (a node's first rank) the round trips
/// it measured, or why it could not.
#[derive(serde::Serialize, serde::Deserialize)]
struct Card {
    described: Option<String>,
    numa: Numa,
    round_trips: std::result::Result<Vec<RoundTrip>, String>,
}

/// Renumbers `world`'s ranks for `decomp`, each cell `cell_bytes` long
/// (all fields together); collective. The identity when no order costs
/// less (bytes times distance).
///
/// # Errors
///
/// On every rank alike: [`HaloError::Usage`] when the ranks described
/// different decompositions or one of another size than the job, or a
/// node's round trips could not be measured; [`HaloError::Barrier`] when
/// the job's collectives fail or time out.
pub fn reorder(
    world: &World,
    decomp: &Decomposition,
    cell_bytes: usize,
    timeout: Duration,
) -> Result<Reordered> {
    let n = world.size();
    // Every rank takes part in both allgathers, even with bad input, so
    // that all fail alike rather than some waiting for the others.
    let valid = decomp.ranks() == n;
    let card = Card {
        described: valid.then(|| format!("{decomp:?} {cell_bytes}")),
        numa: Numa::local(),
        round_trips: measure_round_trips(world, timeout)
            .map_err(|e| sode_job::diag::chain(&e).to_string()),
    };
    let cards: Vec<Card> = gather(world, &card, timeout, "reorder")?;
    check_cards(&cards, decomp.ranks(), n)?;
    let layout = layout_of(
        world,
        cards
            .into_iter()
            .map(|c| (c.numa, c.round_trips.unwrap_or_default())),
    );
    let traffic = traffic(decomp, cell_bytes);
    let chosen = match world.rank() {
        0 => choose(&traffic, &layout)?,
        _ => Vec::new(),
    };
    let orders: Vec<Vec<usize>> = gather(world, &chosen, timeout, "reorder")?;
    let order = orders.into_iter().next().unwrap_or_default();
    if order.len() != n {
        return Err(HaloError::Usage {
            op: "reorder",
            why: format!(
                "rank 0 chose an order of {} ranks for a job of {n}",
                order.len()
            ),
        });
    }
    let renumbered = world
        .renumbered(&order)
        .map_err(|source| HaloError::Barrier {
            source: Box::new(source),
        })?;
    let identity: Vec<usize> = (0..n).collect();
    let between = |o: &[usize]| bytes_between_nodes(&traffic, &layout.node, o);
    let cost = |o: &[usize]| weighted(&traffic, &layout, o);
    let reordered = Reordered {
        world: renumbered,
        launch_bytes_between_nodes: between(&identity),
        bytes_between_nodes: between(&order),
        launch_cost: cost(&identity),
        cost: cost(&order),
        round_trips: layout
            .round_trips
            .iter()
            .map(|(&(a, b), &us)| (a, b, us))
            .collect(),
        order,
    };
    tracing::debug!(?reordered.order, reordered.cost, reordered.launch_cost, "reordered the ranks");
    Ok(reordered)
}

/// Fails, on every rank alike, unless every rank described the same
/// decomposition of this job's `n` ranks (`ranks` is this rank's) and
/// every node's round trips were measured.
fn check_cards(cards: &[Card], ranks: usize, n: usize) -> Result<()> {
    let usage = |why: String| HaloError::Usage { op: "reorder", why };
    let unfit: Vec<usize> = (0..n).filter(|&r| cards[r].described.is_none()).collect();
    if !unfit.is_empty() {
        return Err(usage(format!(
            "ranks {unfit:?} gave no decomposition of this job's {n} ranks (a bad argument, or a grid of another size: this rank's has {ranks} ranks)"
        )));
    }
    let differ: Vec<usize> = (1..n)
        .filter(|&r| cards[r].described != cards[0].described)
        .collect();
    if !differ.is_empty() {
        return Err(usage(format!(
            "ranks {differ:?} described another decomposition or cell size than rank 0: every rank must pass the same"
        )));
    }
    if let Some((r, why)) = cards
        .iter()
        .enumerate()
        .find_map(|(r, c)| c.round_trips.as_ref().err().map(|w| (r, w)))
    {
        return Err(usage(format!(
            "rank {r} could not measure the round trips between nodes: {why}"
        )));
    }
    Ok(())
}

/// Jobs up to this many ranks are placed by the QAP search; larger ones
/// (whose dense matrices and cubic search would cost seconds to minutes)
/// by filling the nodes in turn.
const QAP_MAX: usize = 256;

/// Rank 0's choice, `order[new] = launch rank`: the better of launch
/// order and the best placement found, by bytes times distance.
fn choose(traffic: &Traffic, layout: &Layout) -> Result<Vec<usize>> {
    let node = &layout.node;
    let n = node.len();
    let identity: Vec<usize> = (0..n).collect();
    // Launch ranks grouped by node, nodes in order of their first rank,
    // launch order within: near the best for a decomposition numbered
    // along its axes.
    let mut node_filling = identity.clone();
    node_filling.sort_by_key(|&r| (node[r], r));
    let best = if n <= QAP_MAX {
        search(traffic, layout.matrix(), &[identity.clone(), node_filling])?
    } else {
        node_filling
    };
    // Strictly better, beyond rounding: a tie keeps launch order.
    let (now, then) = (
        weighted(traffic, layout, &identity),
        weighted(traffic, layout, &best),
    );
    Ok(if then < now * (1.0 - 1e-9) {
        best
    } else {
        identity
    })
}

/// The QAP search, bounded to about SWAP_BUDGET swap evaluations (under
/// a second), from each of `starts`.
fn search(traffic: &Traffic, distance: Matrix, starts: &[Vec<usize>]) -> Result<Vec<usize>> {
    const SWAP_BUDGET: usize = 20_000_000;
    let n = distance.len();
    let mut dense = vec![vec![0.0; n]; n];
    for (a, row) in traffic.iter().enumerate() {
        for &(b, bytes) in row {
            dense[a][b] += bytes;
        }
    }
    let usage = |e: sode_scheduler::SchedError| HaloError::Usage {
        op: "reorder",
        why: e.to_string(),
    };
    let qap = Qap::new(dense, distance).map_err(usage)?;
    let options = SolverOptions {
        restarts: if n <= 32 { 4 } else { 1 },
        tabu_iterations: (SWAP_BUDGET / (n * n).max(1)).clamp(1, 50 * n.max(1)),
        seed: 1,
    };
    Ok(qap.solve_from(starts, &options).map_err(usage)?.permutation)
}

/// Per rank, the ranks it sends to and the bytes per exchange.
type Traffic = Vec<Vec<(usize, f64)>>;

/// Bytes times distance when new rank `r` runs where launch rank
/// `order[r]` does.
fn weighted(traffic: &Traffic, layout: &Layout, order: &[usize]) -> f64 {
    let mut cost = 0.0;
    for (a, row) in traffic.iter().enumerate() {
        for &(b, t) in row {
            cost += t * layout.distance(order[a], order[b]);
        }
    }
    cost
}

/// Bytes per exchange between ranks on different nodes when new rank `r`
/// runs where launch rank `order[r]` does.
fn bytes_between_nodes<N: PartialEq>(traffic: &Traffic, node: &[N], order: &[usize]) -> f64 {
    let mut bytes = 0.0;
    for (a, row) in traffic.iter().enumerate() {
        for &(b, t) in row {
            if node[order[a]] != node[order[b]] {
                bytes += t;
            }
        }
    }
    bytes
}

/// What each rank sends its neighbours per exchange.
fn traffic(decomp: &Decomposition, cell_bytes: usize) -> Traffic {
    (0..decomp.ranks())
        .map(|a| {
            decomp
                .neighbours(a)
                .into_iter()
                .filter(|nb| nb.rank != a)
                .map(|nb| (nb.rank, (nb.send.cells() * cell_bytes) as f64))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Stencil;
    use std::collections::BTreeMap;

    #[test]
    fn traffic_of_a_chain() {
        let d = Decomposition::new(&[40, 4], &[4, 1], &[false, false], 1, Stencil::Faces).unwrap();
        let t = traffic(&d, 8);
        // Faces of 4 cells of 8 bytes, to each neighbour of the chain.
        assert_eq!(t[0], vec![(1, 32.0)]);
        assert_eq!(t[1].len(), 2);
        assert!(t[1].contains(&(0, 32.0)) && t[1].contains(&(2, 32.0)));
        assert_eq!(t[3], vec![(2, 32.0)]);
    }

    /// Ranks on `nodes` (one NUMA node each), with `round_trips`.
    fn layout(nodes: &[usize], round_trips: &[((usize, usize), f64)]) -> Layout {
        Layout::new(
            nodes.to_vec(),
            vec![Numa::default(); nodes.len()],
            round_trips.iter().copied().collect(),
        )
    }

    #[test]
    fn a_scrambled_chain_is_put_back_in_node_order() {
        let d = Decomposition::new(&[40, 4], &[4, 1], &[false, false], 1, Stencil::Faces).unwrap();
        let t = traffic(&d, 8);
        let identity: Vec<usize> = (0..4).collect();
        // Launch order puts ranks 0 and 2 on node A, 1 and 3 on node B:
        // every link of the chain 0-1-2-3 crosses.
        let scrambled = layout(&[0, 1, 0, 1], &[((0, 1), 80.0)]);
        let between = |o: &[usize]| bytes_between_nodes(&t, &scrambled.node, o);
        let order = choose(&t, &scrambled).unwrap();
        assert_eq!(between(&identity), 6.0 * 32.0, "three links, both ways");
        assert_eq!(between(&order), 2.0 * 32.0, "one link crosses: {order:?}");
        // Already in node order: kept as launched.
        let sorted = layout(&[0, 0, 1, 1], &[((0, 2), 80.0)]);
        assert_eq!(choose(&t, &sorted).unwrap(), identity);
    }

    #[test]
    fn a_far_pair_of_nodes_is_kept_apart_though_the_bytes_between_nodes_are_the_same() {
        // A chain of 6 over nodes b (launch 0-1), a (2-3) and c (4-5), as
        // ci/softroce/three-nodes.sh launches it: a and c reach each other
        // only through b's gateway, a round trip three times as long.
        let d = Decomposition::new(&[60, 4], &[6, 1], &[false, false], 1, Stencil::Faces).unwrap();
        let t = traffic(&d, 8);
        let trips = [((0, 2), 100.0), ((0, 4), 100.0), ((2, 4), 300.0)];
        let l = layout(&[0, 0, 1, 1, 2, 2], &trips);
        let identity: Vec<usize> = (0..6).collect();
        let order = choose(&t, &l).unwrap();
        let between = |o: &[usize]| bytes_between_nodes(&t, &l.node, o);
        assert_eq!(
            between(&order),
            between(&identity),
            "two crossings either way"
        );
        assert!(weighted(&t, &l, &order) < weighted(&t, &l, &identity));
        // In the new order no neighbour pair spans a and c.
        for r in 0..5 {
            let pair = [l.node[order[r]], l.node[order[r + 1]]];
            assert!(pair != [1, 2] && pair != [2, 1], "{order:?}");
        }
        // Without the measurement (every pair alike) launch order stays.
        let flat = layout(&[0, 0, 1, 1, 2, 2], &[]);
        assert_eq!(choose(&t, &flat).unwrap(), identity);
    }

    #[test]
    fn a_grid_over_three_nodes_is_placed_at_the_optimum() {
        // The 3 x 2 grid of ci/softroce/three-nodes.sh (launched b 0-1,
        // a 2-3, c 4-5) with round trips a CI run measured: a-c through the
        // gateway 16641 us. Tabu search alone stopped at 30746 (a and c
        // still neighbours); the optimum is 14041, a and c apart.
        let t = three_nodes_grid();
        let trips = [((0, 2), 2252.0), ((0, 4), 1640.0), ((2, 4), 16641.0)];
        let l = layout(&[0, 0, 1, 1, 2, 2], &trips);
        let order = choose(&t, &l).unwrap();
        assert!(
            (weighted(&t, &l, &order) - 14040.9).abs() < 0.1,
            "{order:?}"
        );
        assert!(!spans_a_and_c(&t, &l, &order), "{order:?}");
    }

    /// The traffic of ci/softroce/three-nodes.sh's reordered stencil: a
    /// 3 x 2 grid of 48^2 cells, 4 neighbours, walls.
    fn three_nodes_grid() -> Traffic {
        let d = Decomposition::new(&[48, 48], &[3, 2], &[false, false], 1, Stencil::Faces).unwrap();
        traffic(&d, 8)
    }

    /// Whether any two neighbours of `order` run on nodes 1 and 2 (a and c
    /// of ci/softroce/three-nodes.sh).
    fn spans_a_and_c(t: &Traffic, l: &Layout, order: &[usize]) -> bool {
        t.iter().enumerate().any(|(a, row)| {
            row.iter().any(|&(b, _)| {
                let pair = [l.node[order[a]], l.node[order[b]]];
                pair == [1, 2] || pair == [2, 1]
            })
        })
    }

    #[test]
    fn a_pair_forwarded_by_a_gateway_costs_at_least_its_two_hops() {
        // Round trips a CI run measured on the grid of three-nodes.sh:
        // through the gateway a-c took 10133 us, less than a-b (4737) and
        // b-c (8044) together. By the round trips alone the cheapest order
        // makes a and c neighbours across a short face; but every
        // forwarded byte crosses both links and is copied on node b.
        let t = three_nodes_grid();
        let trips = [((0, 2), 4737.0), ((0, 4), 8044.0), ((2, 4), 10133.0)];
        let by_round_trips = layout(&[0, 0, 1, 1, 2, 2], &trips);
        let order = choose(&t, &by_round_trips).unwrap();
        assert!(spans_a_and_c(&t, &by_round_trips, &order), "{order:?}");
        let forwarded =
            layout(&[0, 0, 1, 1, 2, 2], &trips).with_gateways(BTreeMap::from([((1, 2), vec![0])]));
        let a_c = forwarded.distance(2, 4);
        let hops = forwarded.distance(2, 0) + forwarded.distance(0, 4);
        assert_eq!(a_c, hops, "a-c costs a-b and b-c");
        assert!(a_c > by_round_trips.distance(2, 4));
        let order = choose(&t, &forwarded).unwrap();
        assert!(!spans_a_and_c(&t, &forwarded, &order), "{order:?}");
        let identity: Vec<usize> = (0..6).collect();
        assert!(weighted(&t, &forwarded, &order) < weighted(&t, &forwarded, &identity));
        // A gateway's measured round trip above its hops' sum stands.
        let slow = layout(
            &[0, 0, 1, 1, 2, 2],
            &[((0, 2), 4737.0), ((0, 4), 8044.0), ((2, 4), 90000.0)],
        )
        .with_gateways(BTreeMap::from([((1, 2), vec![0])]));
        assert!(slow.distance(2, 4) > slow.distance(2, 0) + slow.distance(0, 4));
    }

    #[test]
    fn large_jobs_are_placed_quickly() {
        // 1024 ranks dealt round-robin to 4 nodes: the QAP is skipped.
        let d =
            Decomposition::new(&[512, 512], &[32, 32], &[true, true], 1, Stencil::Full).unwrap();
        let t = traffic(&d, 8);
        let node: Vec<usize> = (0..1024).map(|r| r % 4).collect();
        let l = layout(&node, &[]);
        let between = |o: &[usize]| bytes_between_nodes(&t, &node, o);
        let identity: Vec<usize> = (0..1024).collect();
        let t0 = std::time::Instant::now();
        let order = choose(&t, &l).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(between(&order) < between(&identity) / 4.0);
    }
}
