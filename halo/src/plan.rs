//! Where the scheduler meets the transport: a plan becomes the writes of a
//! persistent exchange, and a calibration of the device becomes the
//! scheduler's machine model.

use sode_scheduler::{Machine, Plan};
use sode_transport::{Calibration, Write};

use crate::error::{HaloError, Result};

/// The scheduler's machine model for a calibrated device: `engines` queue
/// pairs at the measured per-queue-pair bandwidth sharing the measured node
/// bandwidth (one port: no separate link limit), the measured cost per
/// command, and two write latencies (credit, then data) per exchange.
pub fn machine_of(c: &Calibration) -> Machine {
    Machine {
        engines: c.engines,
        engine_gbps: c.qp_gbps,
        link_gbps: c.node_gbps.max(c.qp_gbps),
        node_gbps: c.node_gbps.max(c.qp_gbps),
        command_overhead_us: c.command_overhead_us,
        fixed_overhead_us: 2.0 * c.write_latency_us,
    }
}

/// The writes that carry out `plan`: every piece of every put goes on the
/// engine the plan put it on, and each engine's writes keep the plan's order
/// (so each (peer, engine) chain is posted in that order). `put(id)` gives
/// put `id` as one whole write (its peer, source and target; its engine is
/// ignored); a split put becomes one write per piece, at the piece's offset.
pub fn writes_from_plan(
    plan: &Plan,
    mut put: impl FnMut(u32) -> Option<Write>,
) -> Result<Vec<Write>> {
    let mut writes = Vec::new();
    for (engine, commands) in plan.engines.iter().enumerate() {
        for c in commands {
            let Some(whole) = put(c.id) else {
                return Err(HaloError::Plan {
                    why: format!(
                        "engine {engine} names put {}, which the exchange does not have",
                        c.id
                    ),
                });
            };
            let offset = c.offset.unwrap_or(0) as usize;
            let len = c
                .bytes
                .map_or(whole.len.saturating_sub(offset), |b| b as usize);
            if offset.checked_add(len).is_none_or(|end| end > whole.len) {
                return Err(HaloError::Plan {
                    why: format!(
                        "a piece {offset}..{} of put {} lies outside its {} bytes",
                        offset + len,
                        c.id,
                        whole.len
                    ),
                });
            }
            writes.push(Write {
                engine,
                src_offset: whole.src_offset + offset,
                dst_offset: whole.dst_offset + offset,
                len,
                ..whole
            });
        }
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sode_scheduler::{plan, Algorithm, Machine, Pattern, Request};
    use sode_transport::{BufferId, WindowId};

    fn pattern(sizes: &[u64], engines: usize) -> Pattern {
        Pattern {
            machine: Machine {
                engines,
                ..Machine::K_COMPUTER
            },
            requests: sizes
                .iter()
                .enumerate()
                .map(|(i, &bytes)| Request {
                    id: i as u32,
                    dest: (i % 3) as u32 + 1,
                    direction: ["E", "W", "N"][i % 3].into(),
                    links: vec![format!("link{}", i % 3)],
                    bytes,
                })
                .collect(),
        }
    }

    fn whole(sizes: &[u64]) -> impl Fn(u32) -> Option<Write> + '_ {
        move |id| {
            let i = id as usize;
            let len = *sizes.get(i)? as usize;
            let at: usize = sizes[..i].iter().sum::<u64>() as usize;
            Some(Write {
                peer: i % 3 + 1,
                engine: 99,
                src: BufferId(0),
                src_offset: at,
                window: WindowId(i % 3),
                dst_offset: 1000 + at,
                len,
            })
        }
    }

    #[test]
    fn every_byte_once_on_the_plans_engines_in_its_order() {
        let sizes = [224_256u64, 224_256, 112_128, 112_128, 14_016, 14_016, 1_000];
        for alg in ["round-robin:4", "bl:4", "split", "auto"] {
            let pat = pattern(&sizes, 4);
            let p = plan(&pat, alg.parse::<Algorithm>().unwrap()).unwrap();
            let writes = writes_from_plan(&p, whole(&sizes)).unwrap();
            // Coverage: each put's bytes exactly once, at matching offsets.
            for (i, &n) in sizes.iter().enumerate() {
                let mut covered = vec![0u8; n as usize];
                let base = sizes[..i].iter().sum::<u64>() as usize;
                for w in writes.iter().filter(|w| {
                    w.window == WindowId(i % 3)
                        && w.src_offset >= base
                        && w.src_offset < base + n as usize
                }) {
                    assert_eq!(
                        w.dst_offset - w.src_offset,
                        1000,
                        "{alg}: source and target move together"
                    );
                    covered[w.src_offset - base..w.src_offset - base + w.len]
                        .iter_mut()
                        .for_each(|c| *c += 1);
                }
                assert!(
                    covered.iter().all(|&c| c == 1),
                    "{alg}: put {i} not covered exactly once"
                );
            }
            // Engines and order follow the plan.
            let mut k = 0;
            for (e, cmds) in p.engines.iter().enumerate() {
                for _ in cmds {
                    assert_eq!(writes[k].engine, e, "{alg}");
                    k += 1;
                }
            }
            assert_eq!(k, writes.len());
        }
        // The split algorithm does cut puts here, so pieces were exercised.
        let p = plan(&pattern(&sizes, 4), "split".parse().unwrap()).unwrap();
        assert!(
            p.splits_puts(),
            "this pattern was chosen so that split cuts puts"
        );
        assert!(writes_from_plan(&p, whole(&sizes)).unwrap().len() > sizes.len());
    }

    #[test]
    fn unknown_puts_and_bad_pieces_are_named() {
        let sizes = [4096u64, 4096];
        let p = plan(&pattern(&sizes, 2), "bl:2".parse().unwrap()).unwrap();
        let e = writes_from_plan(&p, |id| (id == 0).then(|| whole(&sizes)(0)).flatten())
            .unwrap_err()
            .to_string();
        assert!(e.contains("put 1"), "{e}");
        let mut bad = p.clone();
        bad.engines[0][0].offset = Some(4000);
        bad.engines[0][0].bytes = Some(200);
        let e = writes_from_plan(&bad, whole(&sizes))
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside its 4096 bytes"), "{e}");
    }
}
