//! Where the scheduler meets the transport: a plan becomes the writes of a
//! persistent exchange, and a calibration of the device becomes the
//! scheduler's machine model.

use std::ops::Range;

use sode_scheduler::{Machine, Plan};
use sode_transport::{BufferId, Calibration, WindowId, Write};

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

/// One piece of the plan: bytes `range` of put `put`, on `engine`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanPiece {
    /// The put (the pattern's request id).
    pub put: u32,
    /// The engine the plan put it on.
    pub engine: usize,
    /// Its bytes within the put.
    pub range: Range<usize>,
}

/// The pieces of `plan`, engine by engine in the plan's order, each checked
/// to lie within its put's bytes (`len(id)`, `None` for a put the exchange
/// does not have).
///
/// # Errors
///
/// [`HaloError::Plan`] for a command naming a put the exchange does not
/// have, or a piece beyond its put's bytes.
pub fn plan_pieces(plan: &Plan, len: impl Fn(u32) -> Option<usize>) -> Result<Vec<PlanPiece>> {
    let mut pieces = Vec::new();
    for (engine, commands) in plan.engines.iter().enumerate() {
        for c in commands {
            let Some(whole) = len(c.id) else {
                return Err(HaloError::Plan {
                    why: format!(
                        "engine {engine} names put {}, which the exchange does not have",
                        c.id
                    ),
                });
            };
            let offset = c.offset.unwrap_or(0) as usize;
            let n = c.bytes.map_or(whole.saturating_sub(offset), |b| b as usize);
            if offset.checked_add(n).is_none_or(|end| end > whole) {
                return Err(HaloError::Plan {
                    why: format!(
                        "a piece {offset}..{} of put {} lies outside its {whole} bytes",
                        offset + n,
                        c.id,
                    ),
                });
            }
            pieces.push(PlanPiece {
                put: c.id,
                engine,
                range: offset..offset + n,
            });
        }
    }
    Ok(pieces)
}

/// The writes that carry out `plan`: every piece of every put goes on the
/// engine the plan put it on, and each engine's writes keep the plan's order
/// (so each (peer, engine) chain is posted in that order). `put(id)` gives
/// put `id` as one whole write (its peer, source and target; its engine is
/// ignored); a split put becomes one write per piece, at the piece's offset.
///
/// # Errors
///
/// As [`plan_pieces`].
pub fn writes_from_plan(plan: &Plan, put: impl Fn(u32) -> Option<Write>) -> Result<Vec<Write>> {
    let pieces = plan_pieces(plan, |id| put(id).map(|w| w.len))?;
    Ok(pieces
        .into_iter()
        .filter_map(|p| {
            let whole = put(p.put)?;
            Some(Write {
                engine: p.engine,
                src_offset: whole.src_offset + p.range.start,
                dst_offset: whole.dst_offset + p.range.start,
                len: p.range.len(),
                ..whole
            })
        })
        .collect())
}

/// `len` bytes at `offset` of `buffer`: the next piece of a message's byte
/// stream on the sending side (a packed send region, or a run of the
/// caller's field read in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePiece {
    /// The buffer.
    pub buffer: BufferId,
    /// Where the piece starts in it.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// A receiving window holding the next `len` bytes of a message's stream
/// (the whole message when the receiver unpacks it, a run of its field
/// when it receives in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetWindow {
    /// The receiver's window.
    pub window: WindowId,
    /// Bytes.
    pub len: usize,
}

/// One RDMA write of a message: `write` (contiguous at its target), read
/// from `gather` pieces (offset, bytes) of `write.src` when there is more
/// than one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamWrite {
    /// Peer, engine, source buffer, target window and offset, bytes.
    pub write: Write,
    /// The source pieces in order (empty: contiguous from `src_offset`).
    pub gather: Vec<(usize, usize)>,
    /// Where its first byte is in the message's stream (its place in the
    /// packed message).
    pub at: usize,
}

/// The writes that carry bytes `range` of a message whose stream is
/// `sources` on this side and `targets` on the receiver's, towards `peer`
/// on `engine`. Each write lands inside one target window and reads from
/// one buffer in at most `max_sge` pieces (adjacent pieces merged), so a
/// run-by-run receiver costs one write per run, and a sender reading in
/// place costs one gather entry per run. `None` when the range reaches past
/// either side's stream.
pub fn stream_writes(
    peer: usize,
    engine: usize,
    sources: &[SourcePiece],
    targets: &[TargetWindow],
    range: Range<usize>,
    max_sge: usize,
) -> Option<Vec<StreamWrite>> {
    let max_sge = max_sge.max(1);
    let mut out = Vec::new();
    // Stream positions where the current source piece and window start.
    let (mut s, mut s_start) = (0usize, 0usize);
    let (mut t, mut t_start) = (0usize, 0usize);
    let mut at = range.start;
    while at < range.end {
        while s_start + sources.get(s)?.len <= at {
            s_start += sources[s].len;
            s += 1;
        }
        while t_start + targets.get(t)?.len <= at {
            t_start += targets[t].len;
            t += 1;
        }
        let limit = range.end.min(t_start + targets[t].len);
        let buffer = sources[s].buffer;
        let dst_offset = at - t_start;
        let first = at;
        let mut gather: Vec<(usize, usize)> = Vec::new();
        while at < limit && sources[s].buffer == buffer {
            let piece = sources[s];
            let n = limit.min(s_start + piece.len) - at;
            let off = piece.offset + (at - s_start);
            let full = gather.len() == max_sge;
            match gather.last_mut() {
                Some(last) if last.0 + last.1 == off => last.1 += n,
                _ if full => break,
                _ => gather.push((off, n)),
            }
            at += n;
            if at == s_start + piece.len {
                s_start += piece.len;
                s += 1;
                if at < limit && s >= sources.len() {
                    return None;
                }
            }
        }
        let len = gather.iter().map(|p| p.1).sum();
        out.push(StreamWrite {
            write: Write {
                peer,
                engine,
                src: buffer,
                src_offset: gather[0].0,
                window: targets[t].window,
                dst_offset,
                len,
            },
            gather: if gather.len() > 1 { gather } else { Vec::new() },
            at: first,
        });
    }
    Some(out)
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

    /// A stream of `pieces` source lengths (alternating buffers 0 and 1
    /// every `per_buffer` pieces, with gaps between pieces) and `runs`
    /// window lengths: every stream byte arrives exactly once, at its place.
    fn check_stream(pieces: &[usize], runs: &[usize], per_buffer: usize, max_sge: usize) {
        let total: usize = pieces.iter().sum();
        assert_eq!(total, runs.iter().sum::<usize>());
        // Source byte k of the stream lives at (buffer, offset); fill both
        // buffers with the stream index of each byte.
        let mut bufs = vec![vec![usize::MAX; 4 * total + 64]; 2];
        let mut sources = Vec::new();
        let (mut at, mut next) = (0usize, [3usize, 5]);
        for (i, &len) in pieces.iter().enumerate() {
            let b = (i / per_buffer.max(1)) % 2;
            for k in 0..len {
                bufs[b][next[b] + k] = at + k;
            }
            sources.push(SourcePiece {
                buffer: BufferId(b),
                offset: next[b],
                len,
            });
            next[b] += len + 2;
            at += len;
        }
        let targets: Vec<TargetWindow> = runs
            .iter()
            .enumerate()
            .map(|(i, &len)| TargetWindow {
                window: WindowId(10 + i),
                len,
            })
            .collect();
        // Two plan pieces, as a split plan would cut the message.
        let cut = total / 3;
        let mut writes = stream_writes(7, 1, &sources, &targets, 0..cut, max_sge).unwrap();
        writes.extend(stream_writes(7, 0, &sources, &targets, cut..total, max_sge).unwrap());
        let mut windows: Vec<Vec<usize>> = runs.iter().map(|&n| vec![usize::MAX; n]).collect();
        for w in &writes {
            let gather = if w.gather.is_empty() {
                vec![(w.write.src_offset, w.write.len)]
            } else {
                w.gather.clone()
            };
            assert!(gather.len() <= max_sge.max(1), "{gather:?}");
            assert_eq!(gather.iter().map(|p| p.1).sum::<usize>(), w.write.len);
            let win = &mut windows[w.write.window.0 - 10];
            let mut d = w.write.dst_offset;
            for (off, len) in gather {
                for k in 0..len {
                    assert_eq!(win[d], usize::MAX, "a byte written twice");
                    win[d] = bufs[w.write.src.0][off + k];
                    d += 1;
                }
            }
            assert_eq!(w.write.peer, 7);
        }
        let arrived: Vec<usize> = windows.concat();
        assert_eq!(arrived, (0..total).collect::<Vec<_>>());
    }

    #[test]
    fn streams_arrive_whole_whatever_the_pieces_and_runs() {
        // Packed to packed: one write (per plan piece).
        check_stream(&[100], &[100], 1, 4);
        // In place to packed: a gather per buffer, split at max_sge.
        check_stream(&[8; 20], &[160], 5, 3);
        // Packed to in place: a write per run.
        check_stream(&[90], &[30, 30, 30], 1, 1);
        // In place both sides, runs that do not line up.
        check_stream(&[7, 13, 1, 29, 50], &[25, 25, 25, 25], 2, 2);
        check_stream(&[1; 64], &[3, 61], 64, 30);
    }

    #[test]
    fn a_range_past_either_stream_is_refused() {
        let sources = [SourcePiece {
            buffer: BufferId(0),
            offset: 0,
            len: 10,
        }];
        let targets = [TargetWindow {
            window: WindowId(0),
            len: 12,
        }];
        assert!(stream_writes(1, 0, &sources, &targets, 0..10, 4).is_some());
        assert!(stream_writes(1, 0, &sources, &targets, 0..12, 4).is_none());
        assert!(stream_writes(1, 0, &sources, &targets[..0], 0..1, 4).is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_pieces_and_runs(
            pieces in proptest::collection::vec(1usize..40, 1..30),
            split in proptest::collection::vec(1usize..50, 1..30),
            per_buffer in 1usize..5,
            max_sge in 1usize..6,
        ) {
            let total: usize = pieces.iter().sum();
            // Runs: cut the same total at the proposed lengths.
            let mut runs = Vec::new();
            let mut left = total;
            for s in split {
                if left == 0 { break; }
                let n = s.min(left);
                runs.push(n);
                left -= n;
            }
            if left > 0 { runs.push(left); }
            check_stream(&pieces, &runs, per_buffer, max_sge);
        }
    }
}
