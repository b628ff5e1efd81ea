//! Where a peer runs, so that the thresholds for messages from it can be
//! measured from where it is.
//!
//! The threshold probe is a ping-pong between this process's thread and a
//! responder thread. Measured from anywhere, the responder lands where the
//! scheduler puts it; with ranks bound one to a core (Open MPI's default
//! for two ranks), it shares this process's core, and every hand-over is
//! a context switch: such a probe found get worth it from 64 KiB and read
//! in place from 64-512 KiB, against 8 B and 16 KiB between two cores
//! here. Placed on the peer's NUMA
//! node, and off this thread's own CPUs where the node has others, the
//! responder crosses the same distance the peer's data does.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPUs a process or thread may run on (`None` if it cannot be read:
/// the process is gone or belongs to another user).
pub(crate) fn affinity(pid: i32) -> Option<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(pid)).ok()?;
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Restricts the calling thread to `cpus`. False if the kernel refused
/// (a cgroup may confine the process to fewer CPUs).
pub(crate) fn run_on(cpus: &[usize]) -> bool {
    let mut set = CpuSet::new();
    for &c in cpus {
        if set.set(c).is_err() {
            return false;
        }
    }
    sched_setaffinity(Pid::from_raw(0), &set).is_ok()
}

/// The CPU the calling thread is on now.
pub(crate) fn current_cpu() -> Option<usize> {
    nix::sched::sched_getcpu().ok()
}

/// The NUMA nodes' CPUs, from sysfs (empty when the kernel reports none).
pub(crate) fn numa_nodes() -> Vec<Vec<usize>> {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return Vec::new();
    };
    let mut nodes: Vec<(usize, Vec<usize>)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let index: usize = name.strip_prefix("node")?.parse().ok()?;
            let list = std::fs::read_to_string(e.path().join("cpulist")).ok()?;
            Some((index, parse_cpu_list(&list)?))
        })
        .collect();
    nodes.sort();
    nodes.into_iter().map(|(_, cpus)| cpus).collect()
}

/// A kernel CPU list such as `0-3,8,10-11` (`None` if malformed).
pub(crate) fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Where the probe's responder runs to stand in for a peer allowed on
/// `peer`: every CPU of the NUMA nodes the peer may run on, less the
/// calling thread's own CPUs (`own`) where that leaves any. A peer on no
/// known node is stood in for on its own CPUs.
pub(crate) fn responder_cpus(peer: &[usize], own: &[usize], nodes: &[Vec<usize>]) -> Vec<usize> {
    let mut near: Vec<usize> = nodes
        .iter()
        .filter(|node| node.iter().any(|c| peer.contains(c)))
        .flatten()
        .copied()
        .collect();
    if near.is_empty() {
        near = peer.to_vec();
    }
    near.sort_unstable();
    near.dedup();
    let elsewhere: Vec<usize> = near.iter().copied().filter(|c| !own.contains(c)).collect();
    if elsewhere.is_empty() {
        near
    } else {
        elsewhere
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
    }

    #[test]
    fn the_responder_stands_on_the_peers_node_off_our_own_cpus() {
        let two_nodes = [vec![0, 1, 2, 3], vec![4, 5, 6, 7]];
        // Bound one to a core, on one node: the node's other cores.
        assert_eq!(responder_cpus(&[1], &[0], &two_nodes), vec![1, 2, 3]);
        // A peer on the other node: that node, whole.
        assert_eq!(responder_cpus(&[5], &[0], &two_nodes), vec![4, 5, 6, 7]);
        // A peer anywhere, ourselves anywhere: anywhere.
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(responder_cpus(&all, &all, &two_nodes), all);
        // Our node has no other CPU: the peer's node as it is.
        assert_eq!(responder_cpus(&[1], &[0, 1], &[vec![0, 1]]), vec![0, 1]);
        // No NUMA information: the peer's own CPUs.
        assert_eq!(responder_cpus(&[3, 2], &[0], &[]), vec![2, 3]);
    }

    #[test]
    fn this_thread_has_an_affinity_and_a_cpu_in_it() {
        let own = affinity(0).expect("own affinity");
        let cpu = current_cpu().expect("current cpu");
        assert!(own.contains(&cpu), "{cpu} not in {own:?}");
    }
}
