//! An out-of-band exchange over a collective the program already runs: an
//! MPI communicator's allgather (lent by the C library `libsode_mpi`), or
//! any other fixed-size allgather. Collectives go through it; the
//! point-to-point setup links sode needs between peers are direct TCP
//! connections, authenticated with a secret the ranks derive from a share
//! each adds to the program's first allgather (which the launcher already
//! trusts).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::time::Instant;

use crate::auth::{Secret, SHARE};
use crate::error::{JobError, Result};
use crate::nets::Directory;
use crate::node::NodeId;
use crate::oob::{OutOfBand, PeerLink};
use crate::tcp::Mesh;
use crate::tree::{Place, Tree, FANOUT};
use crate::wire::{unreadable, Reader, Writer};

/// A fixed-size allgather: given this rank's block, fills `all` (ranks'
/// blocks of the same size, in rank order); collective over the job. The
/// instant is when sode's step must be over: a collective that can be
/// given up gives up then, counting only the time its process runs (see
/// [`Deadline`](crate::Deadline)). An error is the collective's own
/// message.
pub type AllgatherFn =
    Box<dyn FnMut(&[u8], &mut [u8], Instant) -> std::result::Result<(), String> + Send>;

/// Largest block one rank may contribute to an allgather.
const MAX_BLOCK: usize = 64 << 20;

/// Most ranks a job may have: far beyond any machine, and a bound on what
/// a wrong size from the program makes sode allocate.
pub const MAX_RANKS: usize = 1 << 22;

/// `n` zeroed bytes for `what`, or an error when the memory is not there
/// (the size comes from the job: a failed allocation must not abort).
fn zeroed(n: Option<usize>, what: &str) -> Result<Vec<u8>> {
    let fail = |why: String| JobError::Protocol {
        whom: "this rank".into(),
        why: format!("{what} cannot be allocated: {why}"),
    };
    let n = n.ok_or_else(|| fail("its size overflows the address space".into()))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|e| fail(format!("{n} bytes ({e})")))?;
    v.resize(n, 0);
    Ok(v)
}

/// What every rank tells the others when the exchange is set up, in the
/// few bytes of [`Card::encode`]: every rank receives every card.
#[derive(Debug, PartialEq, Eq)]
struct Card {
    /// This rank's share of the job's secret ([`Secret::from_shares`]).
    share: [u8; SHARE],
    /// A digest of its [`NodeId`]: equal cards share a machine.
    node: [u8; 8],
    /// Where this rank accepts peer links: `port` on each of `addrs`, then
    /// on its loopback.
    port: u16,
    addrs: Vec<Ipv4Addr>,
}

/// The card's format byte.
const CARD_FORMAT: u8 = 1;

impl Card {
    /// Format, share, node, port, the addresses' count (two bytes) and
    /// each address.
    fn encode(&self) -> Result<Vec<u8>> {
        let mut w = Writer::new(CARD_FORMAT);
        w.bytes(&self.share).bytes(&self.node).u16(self.port);
        w.count(self.addrs.len(), "network addresses")?;
        for a in &self.addrs {
            w.bytes(&a.octets());
        }
        Ok(w.finish())
    }

    fn decode(record: &[u8], whom: &str) -> Result<Card> {
        let read = || {
            let mut r = Reader::new(record, CARD_FORMAT)?;
            let (share, node, port) = (r.array()?, r.array()?, r.u16()?);
            let addrs = (0..r.count()?)
                .map(|_| r.array::<4>().map(Ipv4Addr::from))
                .collect::<Option<_>>()?;
            r.end(Card {
                share,
                node,
                port,
                addrs,
            })
        };
        read().ok_or_else(|| unreadable(whom, "card", record))
    }

    /// Where this card's rank listens, seen from a rank on `my_node`:
    /// loopback first when they share the machine (then its addresses,
    /// for a rank that listens on one only: `SODE_TCP_ADDR`), loopback
    /// last otherwise.
    fn listen(&self, my_node: [u8; 8]) -> Vec<SocketAddr> {
        let loopback = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port);
        let mut addrs: Vec<SocketAddr> = self
            .addrs
            .iter()
            .map(|&ip| SocketAddr::new(IpAddr::V4(ip), self.port))
            .collect();
        if self.node == my_node {
            addrs.insert(0, loopback);
        } else {
            addrs.push(loopback);
        }
        addrs
    }
}

/// The out-of-band exchange over a program's allgather.
pub struct ExternalOob {
    gather: AllgatherFn,
    mesh: Mesh,
    /// The tree of links its collective steps take once the world is
    /// made ([`OutOfBand::link_steps`]): not the allgather lent, which
    /// brings every rank every rank's block (and through a launcher's
    /// key-value space, whose server keeps every round, slows as steps
    /// add up).
    tree: Option<Tree>,
}

impl std::fmt::Debug for ExternalOob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalOob")
            .field("rank", &self.mesh.rank)
            .field("size", &self.mesh.size)
            .finish_non_exhaustive()
    }
}

impl ExternalOob {
    /// Sets up the exchange for `rank` of `size` over `gather`; collective.
    /// `deadline` bounds the first allgather (the ranks' cards) where
    /// `gather` can be given up; a program's collective returns when its
    /// runtime lets it.
    ///
    /// # Errors
    ///
    /// [`JobError::InvalidSetting`] for a size above 2^22 ranks or a
    /// rank not below it; [`JobError::Bootstrap`] when it cannot listen
    /// for peer links; [`JobError::External`] when the program's allgather
    /// fails; [`JobError::Protocol`] when the ranks' contributions do not
    /// agree.
    pub fn new(
        rank: usize,
        size: usize,
        mut gather: AllgatherFn,
        deadline: Instant,
    ) -> Result<ExternalOob> {
        if size > MAX_RANKS {
            return Err(JobError::InvalidSetting {
                name: "size".into(),
                value: size.to_string(),
                why: format!("a job of {size} ranks: sode takes at most {MAX_RANKS}; is the size the communicator's?"),
            });
        }
        if size == 0 || rank >= size {
            return Err(JobError::InvalidSetting {
                name: "rank".into(),
                value: format!("{rank} of {size}"),
                why: "the rank must be below the job's size, which must be at least 1".into(),
            });
        }
        // What can fail on this rank alone fails before the cards travel,
        // and then fails their allgather on every rank (a refusal in its
        // place), rather than leave the others waiting in it.
        let own = own_card().and_then(|(listener, card)| {
            Ok((listener, card.encode()?, card.node, Secret::random()?))
        });
        let (listener, mine, node, placeholder) = match own {
            Ok(own) => own,
            Err(e) => {
                return Err(crate::refusal::refused_after(e, |refusal| {
                    gather_blocks(&mut gather, rank, size, refusal, deadline).map(|_| ())
                }))
            }
        };
        // A placeholder mesh until the cards are in: only the allgather runs.
        let mut oob = ExternalOob {
            gather,
            tree: None,
            mesh: Mesh {
                rank,
                size,
                secret: placeholder,
                listener,
                listen: Directory::default(),
                routes: None,
            },
        };
        let all = oob.allgather(&mine, deadline)?;
        if let Some(refused) = crate::refusal::first_in(&all) {
            return Err(refused);
        }
        let cards: Vec<Card> = all
            .iter()
            .enumerate()
            .map(|(r, b)| Card::decode(b, &format!("rank {r}")))
            .collect::<Result<_>>()?;
        let shares: Vec<[u8; SHARE]> = cards.iter().map(|c| c.share).collect();
        oob.mesh.secret = Secret::from_shares(&shares);
        oob.mesh.listen = Directory::new(cards.iter().map(|c| c.listen(node)));
        Ok(oob)
    }
}

/// This rank's listener for peer links and its card.
fn own_card() -> Result<(TcpListener, Card)> {
    let chosen = match crate::tcp_addr::chosen()? {
        None => None,
        Some(IpAddr::V4(ip)) => Some(ip),
        Some(IpAddr::V6(ip)) => {
            return Err(JobError::InvalidSetting {
                name: crate::TCP_ADDR_VAR.into(),
                value: std::env::var(crate::TCP_ADDR_VAR).unwrap_or_default(),
                why: format!("it names {ip}, but the peer links of a communicator made over the program's allgather take IPv4 only: name an IPv4 address, subnet or interface"),
            })
        }
    };
    let listener =
        crate::ports::listen(chosen.unwrap_or(Ipv4Addr::UNSPECIFIED).into(), "peer links")?;
    let port = listener
        .local_addr()
        .map_err(|e| JobError::Bootstrap {
            step: "local_addr".into(),
            whom: "this rank".into(),
            source: e,
        })?
        .port();
    let card = Card {
        share: crate::auth::random_bytes("a share of the job's secret")?,
        node: NodeId::local().digest(),
        port,
        addrs: chosen.map_or_else(interface_addrs, |ip| vec![ip]),
    };
    Ok((listener, card))
}

/// One call of the program's allgather, its error named by `step`.
fn call(
    gather: &mut AllgatherFn,
    step: &str,
    mine: &[u8],
    all: &mut [u8],
    deadline: Instant,
) -> Result<()> {
    gather(mine, all, deadline).map_err(|why| JobError::External {
        step: step.into(),
        why,
    })
}

/// Every rank's `mine` through the program's fixed-size allgather, as
/// rank `rank` of `size`: two calls, the lengths, then the blocks padded
/// to the longest.
fn gather_blocks(
    gather: &mut AllgatherFn,
    rank: usize,
    size: usize,
    mine: &[u8],
    deadline: Instant,
) -> Result<Vec<Vec<u8>>> {
    if mine.len() > MAX_BLOCK {
        return Err(JobError::Protocol {
            whom: "this rank".into(),
            why: format!(
                "an allgather block of {} bytes (at most {MAX_BLOCK})",
                mine.len()
            ),
        });
    }
    // Four bytes a length: every block is at most MAX_BLOCK.
    let mut lens = zeroed(size.checked_mul(4), "the allgather's lengths")?;
    call(
        gather,
        "an allgather of lengths",
        &(mine.len() as u32).to_le_bytes(),
        &mut lens,
        deadline,
    )?;
    let lens: Vec<usize> = lens
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0xff; 4])) as usize)
        .collect();
    let longest = lens.iter().copied().max().unwrap_or(0);
    if longest > MAX_BLOCK || lens[rank] != mine.len() {
        return Err(JobError::Protocol {
            whom: "the program's allgather".into(),
            why: format!("it returned block lengths {lens:?}"),
        });
    }
    let mut block = mine.to_vec();
    block.resize(longest, 0);
    let mut all = zeroed(longest.checked_mul(size), "the allgather's blocks")?;
    if longest > 0 {
        call(gather, "an allgather", &block, &mut all, deadline)?;
    }
    Ok(lens
        .iter()
        .enumerate()
        .map(|(r, &len)| all[r * longest..r * longest + len].to_vec())
        .collect())
}

/// This machine's IPv4 addresses but loopback, where a peer on another
/// machine tries to reach this rank (loopback after them).
fn interface_addrs() -> Vec<Ipv4Addr> {
    let mut addrs: Vec<Ipv4Addr> = nix::ifaddrs::getifaddrs()
        .map(|ifs| {
            ifs.filter_map(|i| i.address)
                .filter_map(|a| a.as_sockaddr_in().map(|s| s.ip()))
                .filter(|ip| !ip.is_loopback())
                .collect()
        })
        .unwrap_or_default();
    // In the interfaces' order, each once.
    let mut seen = std::collections::HashSet::new();
    addrs.retain(|ip| seen.insert(*ip));
    addrs
}

impl ExternalOob {
    /// The tree of links its collective steps take, once linked
    /// ([`OutOfBand::link_steps`]); `None` while they go through the
    /// allgather lent.
    fn tree(&mut self) -> Option<&mut Tree> {
        self.tree.as_mut()
    }
}

impl OutOfBand for ExternalOob {
    fn rank(&self) -> usize {
        self.mesh.rank
    }

    fn size(&self) -> usize {
        self.mesh.size
    }

    /// Two fixed-size allgathers: the lengths, then the blocks padded to
    /// the longest.
    fn allgather(&mut self, mine: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        if let Some(tree) = self.tree() {
            return tree.allgather(mine, deadline);
        }
        gather_blocks(
            &mut self.gather,
            self.mesh.rank,
            self.mesh.size,
            mine,
            deadline,
        )
    }

    fn step(
        &mut self,
        mine: &[u8],
        deadline: Instant,
        combine: crate::oob::Combine<'_>,
    ) -> Result<crate::oob::Stepped> {
        if let Some(tree) = self.tree() {
            return tree.step(mine, deadline, combine);
        }
        let all = self.allgather(mine, deadline)?;
        Ok(crate::oob::Stepped::gathered(all, mine.len(), combine))
    }

    fn connect(
        &mut self,
        peers: &BTreeSet<usize>,
        deadline: Instant,
    ) -> Result<BTreeMap<usize, PeerLink>> {
        self.mesh.connect(peers, deadline)
    }

    fn link_steps(&mut self, deadline: Instant) -> Result<()> {
        if self.tree.is_none() {
            let place = Place::new(self.mesh.rank, self.mesh.size, FANOUT);
            let mesh = &mut self.mesh;
            self.tree = Some(Tree::link(place, |peers| mesh.connect(peers, deadline))?);
        }
        Ok(())
    }

    fn route_through(&mut self, routes: std::sync::Arc<crate::Routes>) {
        self.mesh.routes = Some(routes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, Mutex};
    use std::time::Duration;

    /// An allgather across threads, standing in for MPI's.
    fn thread_gathers(size: usize) -> Vec<AllgatherFn> {
        let slots = Arc::new(Mutex::new(vec![Vec::new(); size]));
        let barrier = Arc::new(Barrier::new(size));
        (0..size)
            .map(|r| {
                let (slots, barrier) = (slots.clone(), barrier.clone());
                Box::new(move |mine: &[u8], all: &mut [u8], _: Instant| {
                    slots.lock().unwrap()[r] = mine.to_vec();
                    barrier.wait();
                    let got: Vec<u8> = slots.lock().unwrap().concat();
                    barrier.wait();
                    if got.len() != all.len() {
                        return Err(format!(
                            "blocks of unequal size ({} vs {})",
                            got.len(),
                            all.len()
                        ));
                    }
                    all.copy_from_slice(&got);
                    Ok(())
                }) as AllgatherFn
            })
            .collect()
    }

    #[test]
    fn ranks_gather_blocks_of_any_length_and_link_up() {
        let size = 3;
        let handles: Vec<_> = thread_gathers(size)
            .into_iter()
            .enumerate()
            .map(|(r, g)| {
                std::thread::spawn(move || {
                    let mut oob =
                        ExternalOob::new(r, size, g, Instant::now() + Duration::from_secs(20))
                            .unwrap();
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let all = oob.allgather(&vec![r as u8; r * 5], deadline).unwrap();
                    for (q, b) in all.iter().enumerate() {
                        assert_eq!(b, &vec![q as u8; q * 5]);
                    }
                    let peers: BTreeSet<usize> = (0..size).filter(|&q| q != r).collect();
                    let mut links = oob.connect(&peers, deadline).unwrap();
                    for (&q, l) in links.iter_mut() {
                        l.send(&(r, q)).unwrap();
                    }
                    for (&q, l) in links.iter_mut() {
                        let got: (usize, usize) = l.recv(deadline).unwrap();
                        assert_eq!(got, (q, r));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_rank_that_cannot_make_its_card_fails_every_ranks_creation_at_once() {
        let mut gathers = thread_gathers(3);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut refuser = gathers.remove(1);
        let others: Vec<_> = gathers
            .into_iter()
            .zip([0, 2])
            .map(|(g, r)| std::thread::spawn(move || ExternalOob::new(r, 3, g, deadline)))
            .collect();
        // What `new` sends when its listener or card cannot be made.
        let refusal = crate::refusal::record(crate::refusal::NO_STATUS, "no descriptor left");
        gather_blocks(&mut refuser, 1, 3, &refusal, deadline).unwrap();
        for t in others {
            match t.join().unwrap() {
                Err(JobError::GaveUp {
                    rank: 1,
                    code: crate::refusal::NO_STATUS,
                    message,
                }) => assert_eq!(message, "no descriptor left"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_job_too_large_is_refused_before_anything_is_allocated() {
        let g: AllgatherFn = Box::new(|_, _, _| panic!("not called"));
        let e = ExternalOob::new(0, i32::MAX as usize, g, Instant::now())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a job of 2147483647 ranks") && e.contains("at most"),
            "{e}"
        );
        assert!(zeroed(None, "x")
            .unwrap_err()
            .to_string()
            .contains("overflows"));
        assert!(zeroed(Some(usize::MAX / 2), "the blocks")
            .unwrap_err()
            .to_string()
            .contains("the blocks cannot be allocated"));
    }

    #[test]
    fn a_failing_collective_is_named() {
        let g: AllgatherFn = Box::new(|_, _, _| Err("MPI_ERR_COMM: invalid communicator".into()));
        let e = ExternalOob::new(0, 2, g, Instant::now())
            .unwrap_err()
            .to_string();
        assert!(e.contains("MPI_ERR_COMM"), "{e}");
        let g: AllgatherFn = Box::new(|_, _, _| Ok(()));
        let e = ExternalOob::new(2, 2, g, Instant::now())
            .unwrap_err()
            .to_string();
        assert!(e.contains("below the job's size"), "{e}");
    }

    fn far_first(card: &Card) -> Vec<SocketAddr> {
        card.addrs
            .iter()
            .map(|&ip| SocketAddr::new(IpAddr::V4(ip), card.port))
            .collect()
    }

    #[test]
    fn a_card_reads_back_and_points_at_loopback_on_its_own_machine() {
        let card = Card {
            share: [7; SHARE],
            node: [1; 8],
            port: 4321,
            addrs: vec![Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(192, 168, 1, 2)],
        };
        let rec = card.encode().unwrap();
        assert_eq!(
            rec.len(),
            1 + SHARE + 8 + 2 + 2 + 2 * 4,
            "the card's few bytes"
        );
        assert_eq!(Card::decode(&rec, "rank 1").unwrap(), card);
        let lo: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        let near = card.listen([1; 8]);
        assert_eq!(near[0], lo, "the same machine: loopback first");
        assert_eq!(
            near[1..],
            far_first(&card),
            "then its addresses, for a rank that listens on one only"
        );
        let far = card.listen([2; 8]);
        assert_eq!(far.len(), 3, "each address, then loopback: {far:?}");
        assert_eq!(far[0], "10.0.0.5:4321".parse().unwrap());
        assert_eq!(far[2], lo);
        let e = Card::decode(&rec[..rec.len() - 1], "rank 3").unwrap_err();
        assert!(e.to_string().contains("rank 3"), "{e}");
        assert!(e.to_string().contains("same sode"), "{e}");
    }

    #[test]
    fn every_rank_makes_the_same_secret_from_the_shares_and_each_share_counts() {
        let shares = [[1u8; SHARE], [2; SHARE], [3; SHARE]];
        let s = Secret::from_shares(&shares);
        assert_eq!(s, Secret::from_shares(&shares));
        let mut other = shares;
        other[2][0] ^= 1;
        assert_ne!(s, Secret::from_shares(&other), "the last share changed");
        other = shares;
        other.swap(0, 1);
        assert_ne!(s, Secret::from_shares(&other), "the order of ranks counts");
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_a_card_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
            let _ = Card::decode(&bytes, "rank 1");
            let mut with_format = vec![CARD_FORMAT];
            with_format.extend_from_slice(&bytes);
            let _ = Card::decode(&with_format, "rank 1");
        }
    }
}
