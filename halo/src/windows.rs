//! Where an RDMA sender writes: each receiver numbers its windows (one per
//! message it receives over RDMA, or one per run of a message received in
//! place, then one staging window for the starts that name other arrays,
//! then one per run again in each further lent set) and tells each
//! sender, over a setup link to that sender alone, the windows of that
//! sender's messages. What a rank receives grows with
//! its neighbours and their messages, not with the job.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sode_job::World;

use crate::error::{HaloError, Result};

/// A receiver's windows for one message from one sender: its tag, the
/// receiver's number for the first window, the bytes of each window in
/// stream order, the number of the window a staged start receives the
/// whole message in, and the first window of each lent set beyond the
/// first (for a message received in place).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct WindowList {
    pub(crate) tag: u32,
    pub(crate) first: usize,
    pub(crate) runs: Vec<usize>,
    pub(crate) staging: Option<usize>,
    pub(crate) twins: Vec<usize>,
}

/// One message this rank receives over RDMA: from whom, its tag, the
/// bytes of each of its windows, and the lent sets it is received in
/// place in (0: unpacked; otherwise a staging window follows the first
/// set's windows, then each further set's).
#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    pub(crate) from: usize,
    pub(crate) tag: u32,
    pub(crate) runs: Vec<usize>,
    pub(crate) sets: usize,
}

/// Where a sender writes one message: the receiver's number of its first
/// window, the bytes of each, its staging window if it has one, and the
/// first window of each further lent set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) first: usize,
    pub(crate) runs: Vec<usize>,
    pub(crate) staging: Option<usize>,
    pub(crate) twins: Vec<usize>,
}

/// This rank's windows, numbered in the order of `incoming`, grouped by
/// the sender they are for.
pub(crate) fn number(incoming: &[Incoming]) -> BTreeMap<usize, Vec<WindowList>> {
    let mut by_sender: BTreeMap<usize, Vec<WindowList>> = BTreeMap::new();
    let mut first = 0;
    for m in incoming {
        let runs = m.runs.len();
        let staging = (m.sets > 0).then_some(first + runs);
        let twins = (1..m.sets).map(|k| first + k * runs + 1).collect();
        by_sender.entry(m.from).or_default().push(WindowList {
            tag: m.tag,
            first,
            runs: m.runs.clone(),
            staging,
            twins,
        });
        first += runs * m.sets.max(1) + usize::from(m.sets > 0);
    }
    by_sender
}

/// Gives each of `peers` the windows of its messages to this rank (`mine`,
/// by sender) and returns theirs for this rank's messages, by peer.
/// Collective among `peers`: each must name this rank too.
///
/// Each pair swaps in rank order (the lower rank sends first), and every
/// rank takes its peers in ascending order, so no two ranks wait on each
/// other whatever the lists' sizes.
pub(crate) fn swap(
    world: &World,
    peers: &BTreeSet<usize>,
    mine: &BTreeMap<usize, Vec<WindowList>>,
    timeout: Duration,
) -> Result<BTreeMap<usize, Vec<WindowList>>> {
    let deadline = Instant::now() + timeout;
    let setup = |source| HaloError::Barrier {
        source: Box::new(source),
    };
    let mut links = world.connect_peers(peers, timeout).map_err(setup)?;
    let me = world.rank();
    let none = Vec::new();
    let mut theirs = BTreeMap::new();
    for &p in peers {
        let link = links.get_mut(&p).ok_or_else(|| HaloError::Usage {
            op: "build",
            why: format!("no setup link to rank {p} to learn its RDMA windows"),
        })?;
        let ours = mine.get(&p).unwrap_or(&none);
        let lists: Vec<WindowList> = if p < me {
            let lists = link.recv(deadline).map_err(setup)?;
            link.send(ours).map_err(setup)?;
            lists
        } else {
            link.send(ours).map_err(setup)?;
            link.recv(deadline).map_err(setup)?
        };
        theirs.insert(p, lists);
    }
    Ok(theirs)
}

/// The windows `peer` made for rank `me`'s message of `len` bytes with
/// `tag` (on the link `name`).
///
/// # Errors
///
/// [`HaloError::Usage`] when `peer` expects no message with that tag from
/// `me`, or windows that do not add up to the message's bytes.
pub(crate) fn target(
    theirs: &[WindowList],
    me: usize,
    peer: usize,
    (tag, len): (u32, usize),
    name: &str,
) -> Result<Target> {
    let disagree = |why: String| HaloError::Usage {
        op: "build",
        why: format!("{why} ({name}): the two ranks' links disagree"),
    };
    let Some(w) = theirs.iter().find(|w| w.tag == tag) else {
        return Err(disagree(format!(
            "rank {peer} does not expect a message with tag {tag} from rank {me}"
        )));
    };
    let total = w.runs.iter().try_fold(0usize, |a, &r| a.checked_add(r));
    if total != Some(len) || w.runs.contains(&0) {
        return Err(disagree(format!(
            "rank {peer} expects {total:?} bytes with tag {tag} from rank {me}, which sends {len}"
        )));
    }
    Ok(Target {
        first: w.first,
        runs: w.runs.clone(),
        staging: w.staging,
        twins: w.twins.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(from: usize, tag: u32, runs: &[usize]) -> Incoming {
        Incoming {
            from,
            tag,
            runs: runs.to_vec(),
            sets: usize::from(runs.len() > 1),
        }
    }

    #[test]
    fn a_message_in_place_in_three_lent_sets_has_a_window_per_run_in_each() {
        let mut in_sets = incoming(4, 3, &[6, 6]);
        in_sets.sets = 3;
        let by = number(&[incoming(2, 1, &[5]), in_sets, incoming(2, 2, &[7])]);
        // Window 0: the first message; 1-2 set 0's runs, 3 staging, 4-5
        // set 1's, 6-7 set 2's; 8 the last message.
        let w = &by[&4][0];
        assert_eq!(
            (w.first, w.staging, &w.twins[..]),
            (1, Some(3), &[4, 6][..])
        );
        assert_eq!(by[&2][1].first, 8);
        assert_eq!(target(&by[&4], 4, 0, (3, 12), "x").unwrap().twins, [4, 6]);
    }

    #[test]
    fn windows_are_numbered_across_senders_and_given_to_each_its_own() {
        let by = number(&[
            incoming(3, 7, &[10]),
            incoming(1, 2, &[4, 4, 4]),
            incoming(3, 9, &[8, 8]),
            incoming(2, 1, &[5]),
        ]);
        assert_eq!(by.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(
            by[&3],
            vec![
                WindowList {
                    tag: 7,
                    first: 0,
                    runs: vec![10],
                    staging: None,
                    twins: Vec::new(),
                },
                WindowList {
                    tag: 9,
                    first: 5,
                    runs: vec![8, 8],
                    staging: Some(7),
                    twins: Vec::new(),
                },
            ]
        );
        // Three runs and their staging window.
        assert_eq!((by[&1][0].first, by[&1][0].staging), (1, Some(4)));
        assert_eq!(by[&2][0].first, 8);
        assert_eq!(
            target(&by[&3], 3, 0, (9, 16), "x").unwrap(),
            Target {
                first: 5,
                runs: vec![8, 8],
                staging: Some(7),
                twins: Vec::new(),
            }
        );
        let wrong_len = target(&by[&3], 3, 0, (9, 15), "x").unwrap_err();
        assert!(
            wrong_len.to_string().contains("expects Some(16) bytes"),
            "{wrong_len}"
        );
        let no_tag = target(&by[&1], 1, 0, (7, 10), "x").unwrap_err();
        assert!(
            no_tag
                .to_string()
                .contains("does not expect a message with tag 7"),
            "{no_tag}"
        );
    }
}
