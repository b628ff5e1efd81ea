//! RoundRobin(K): request i on engine i mod K, in input order.

use crate::instance::{Instance, Piece};
use crate::plan::Timed;

/// Each engine's list, with the paper's picture as the prediction: each
/// command back to back on its engine, as long as the put alone on its link.
pub(crate) fn round_robin(instance: &Instance, k: usize) -> Vec<Vec<Timed>> {
    let mut columns: Vec<Vec<Timed>> = vec![Vec::new(); k];
    let mut top = vec![0.0f64; k];
    for i in 0..instance.puts.len() {
        let e = i % k;
        let d = instance.alone_us(instance.puts[i].bytes);
        columns[e].push((Piece::whole(instance, i, e), top[e], top[e] + d));
        top[e] += d;
    }
    columns
}
