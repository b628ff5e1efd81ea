//! The Latin-square fat-tree paper, reproduced: the projective plane, the
//! contention-free all-to-all schedules, Table 3, and the throughput ratios.

use sode_scheduler::topology::{
    is_prime, LatinSquareFatTree, PartialRule, Point, ProjectivePlane, Schedule, ScheduleKind,
};
use sode_scheduler::SchedError;
use std::collections::HashSet;

const PRIMES: [usize; 7] = [2, 3, 5, 7, 11, 13, 17];

#[test]
fn projective_plane_axioms() {
    for n in PRIMES {
        let plane = ProjectivePlane::new(n).unwrap();
        let size = n * n + n + 1;
        assert_eq!(plane.size(), size);
        for i in 0..size {
            assert_eq!(plane.points_on(i).len(), n + 1, "n={n}: line {i}");
            assert_eq!(plane.lines_through(i).len(), n + 1, "n={n}: point {i}");
            assert_eq!(plane.point_index(plane.point(i)), i);
        }
        // Two points: exactly one line. Two lines: exactly one point.
        for a in 0..size {
            for b in a + 1..size {
                let common = plane
                    .lines_through(a)
                    .iter()
                    .filter(|l| plane.lines_through(b).contains(l))
                    .count();
                assert_eq!(common, 1, "n={n}: points {a}, {b}");
                let meet = plane
                    .points_on(a)
                    .iter()
                    .filter(|p| plane.points_on(b).contains(p))
                    .count();
                assert_eq!(meet, 1, "n={n}: lines {a}, {b}");
                let l = plane.line_through(a, b).unwrap();
                assert!(plane.points_on(l).contains(&a) && plane.points_on(l).contains(&b));
            }
        }
        // Four points, no three on a line: a unit square of the grid.
        let quad = [
            Point::Pcr(0, 0),
            Point::Pcr(1, 0),
            Point::Pcr(0, 1),
            Point::Pcr(1, 1),
        ]
        .map(|p| plane.point_index(p));
        for i in 0..4 {
            for j in i + 1..4 {
                for k in j + 1..4 {
                    let l = plane.line_through(quad[i], quad[j]).unwrap();
                    assert!(
                        !plane.points_on(l).contains(&quad[k]),
                        "n={n}: three collinear"
                    );
                }
            }
        }
    }
}

#[test]
fn non_prime_orders_and_bad_k_m_are_rejected() {
    for n in [0, 1, 4, 6, 9, 15] {
        assert!(!is_prime(n));
        let err = ProjectivePlane::new(n).unwrap_err();
        assert!(
            matches!(err, SchedError::InvalidTopology(ref m) if m.contains("not prime")),
            "{err}"
        );
    }
    for (k, m) in [(0, 0), (4, 2), (2, 3), (3, 0)] {
        let err = Schedule::partial(3, k, m, PartialRule::Geometric).unwrap_err();
        assert!(err.to_string().contains("1 <= m <= k <= n"), "{err}");
    }
    assert!(Schedule::shift_fat_tree(1, None).is_err());
    assert!(Schedule::shift_fat_tree(5, Some(26)).is_err());
}

/// Every phase a permutation of the schedule's servers, every ordered pair
/// (each server to itself too) in exactly one phase, no link twice in a phase.
fn check_all_to_all(s: &Schedule) {
    let servers: HashSet<usize> = s.servers().iter().copied().collect();
    let d = servers.len();
    assert_eq!(s.phase_count(), d);
    let mut pairs = HashSet::new();
    for t in 0..s.phase_count() {
        let phase = s.phase(t);
        assert_eq!(phase.len(), d);
        let srcs: HashSet<u32> = phase.iter().map(|r| r.src).collect();
        let dsts: HashSet<u32> = phase.iter().map(|r| r.dst).collect();
        assert_eq!(srcs.len(), d, "phase {t}: a server sends twice");
        assert_eq!(dsts.len(), d, "phase {t}: a server receives twice");
        for r in &phase {
            assert!(servers.contains(&(r.dst as usize)));
            assert!(
                pairs.insert((r.src, r.dst)),
                "pair {} -> {} twice",
                r.src,
                r.dst
            );
        }
    }
    assert_eq!(pairs.len(), d * d);
    assert_eq!(s.peak_link_load(), 1, "a link is used twice in a phase");
    assert_eq!(s.throughput_ratio(), 1.0);
}

#[test]
fn whole_machine_all_to_all_is_contention_free() {
    for n in [2, 3, 5, 7] {
        let s = Schedule::whole(n).unwrap();
        assert_eq!(s.phase_count(), (n + 1) * (n * n + n + 1));
        check_all_to_all(&s);
    }
}

#[test]
fn partial_all_to_all_is_contention_free() {
    for (n, k, m) in [
        (2, 2, 2),
        (3, 2, 2),
        (3, 3, 3),
        (5, 3, 3),
        (5, 5, 4),
        (7, 4, 4),
        (7, 6, 6),
        (7, 7, 7),
        (11, 6, 6),
        (13, 7, 7),
    ] {
        let s = Schedule::partial(n, k, m, PartialRule::Geometric).unwrap();
        assert_eq!(s.servers().len(), n * k * m);
        check_all_to_all(&s);
    }
}

#[test]
fn table_3_is_reproduced() {
    let table_3: [[usize; 12]; 12] = [
        [4, 11, 6, 9, 8, 3, 10, 1, 0, 7, 2, 5],
        [5, 10, 7, 8, 9, 2, 11, 0, 1, 6, 3, 4],
        [8, 1, 10, 3, 0, 5, 2, 7, 4, 9, 6, 11],
        [9, 0, 11, 2, 1, 4, 3, 6, 5, 8, 7, 10],
        [2, 5, 0, 7, 6, 9, 4, 11, 10, 1, 8, 3],
        [3, 4, 1, 6, 7, 8, 5, 10, 11, 0, 9, 2],
        [6, 9, 4, 11, 10, 1, 8, 3, 2, 5, 0, 7],
        [7, 8, 5, 10, 11, 0, 9, 2, 3, 4, 1, 6],
        [10, 3, 8, 1, 2, 7, 0, 5, 6, 11, 4, 9],
        [11, 2, 9, 0, 3, 6, 1, 4, 7, 10, 5, 8],
        [0, 7, 2, 5, 4, 11, 6, 9, 8, 3, 10, 1],
        [1, 6, 3, 4, 5, 10, 7, 8, 9, 2, 11, 0],
    ];
    let s = Schedule::partial(3, 2, 2, PartialRule::Tabulated).unwrap();
    assert_eq!(
        s.kind(),
        ScheduleKind::Partial {
            k: 2,
            m: 2,
            rule: PartialRule::Tabulated
        }
    );
    // The table numbers servers in schedule order: leaf P(x, y) at y k + x, then id.
    let serial = |global: u32| {
        s.servers()
            .iter()
            .position(|&g| g == global as usize)
            .unwrap()
    };
    for (t, expected) in table_3.iter().enumerate() {
        let phase = s.phase(t);
        let got: Vec<usize> = phase.iter().map(|r| serial(r.dst)).collect();
        assert_eq!(
            &got[..],
            &expected[..],
            "phase {t} (group {}, phase {})",
            t / 2,
            t % 2
        );
    }
    check_all_to_all(&s);
    // Server 0 of the table sits under P(0, 0) and server 4 under P(0, 1).
    let topo = s.latin_square().unwrap();
    assert_eq!(topo.server(s.servers()[0]).leaf, Point::Pcr(0, 0));
    assert_eq!(topo.server(s.servers()[4]).leaf, Point::Pcr(0, 1));
}

#[test]
fn the_tabulated_rule_collides_when_moves_wrap() {
    // Why Geometric is the default: with k < n, Table 3's rule leaves the line.
    let s = Schedule::partial(7, 6, 6, PartialRule::Tabulated).unwrap();
    assert!(s.peak_link_load() > 1);
    assert!(s.throughput_ratio() < 0.9);
}

#[test]
fn shift_degrades_with_size_and_the_proposed_schedules_do_not() {
    let mut previous = 1.0;
    for n in [2, 3, 5, 7, 11, 13, 17] {
        let shift = Schedule::shift_latin_square(n, None)
            .unwrap()
            .throughput_ratio();
        assert!(
            shift < previous,
            "n={n}: shift {shift} did not fall below {previous}"
        );
        previous = shift;
    }
    // The paper: 0.108 for the whole n = 17 machine.
    assert!(
        (previous - 0.108).abs() < 0.002,
        "shift at n=17: {previous}"
    );
    for (n, k, m) in [(17, 16, 16), (17, 13, 13), (17, 9, 9)] {
        assert_eq!(
            Schedule::partial(n, k, m, PartialRule::Geometric)
                .unwrap()
                .throughput_ratio(),
            1.0
        );
        assert!(
            Schedule::shift_latin_square(n, Some((k, m)))
                .unwrap()
                .throughput_ratio()
                < 0.25
        );
    }
    assert_eq!(Schedule::whole(17).unwrap().throughput_ratio(), 1.0);
    // A conventional fat-tree runs the shift pattern without contention.
    for (degree, servers) in [(5, 25), (5, 10), (7, 28)] {
        assert_eq!(
            Schedule::shift_fat_tree(degree, Some(servers))
                .unwrap()
                .throughput_ratio(),
            1.0
        );
    }
}

#[test]
fn latin_square_sizes() {
    for n in PRIMES {
        let t = LatinSquareFatTree::new(n).unwrap();
        assert_eq!(t.server_count(), (n + 1) * (n * n + n + 1));
    }
}
