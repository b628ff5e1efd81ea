//! The bootstrap under a PMIx server (Open MPI's `mpirun`, Slurm's `srun
//! --mpi=pmix`): rank and size from the server, collectives through
//! put/commit/fence/get, peer links over [`ExternalOob`]'s authenticated TCP
//! mesh (the shares its secret is made from travel through PMIx, which the
//! launcher trusts).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{JobError, Result};
use crate::external::{AllgatherFn, ExternalOob};
use crate::sys::pmix::{Pmix, RANK_WILDCARD};

pub use crate::launch::pmix_available as available;

fn failed(step: &str) -> impl Fn(String) -> JobError + '_ {
    move |why| JobError::External {
        step: format!("PMIx {step}"),
        why,
    }
}

/// Connects to the PMIx server: this rank, the job's size and namespace,
/// and an out-of-band exchange over it.
/// Each fence and get is given up by this rank at its step's deadline (the
/// first at `deadline`), moved on by the time the process was stopped.
///
/// # Errors
///
/// [`JobError::External`] naming the step (connect, the job size, an
/// allgather) and PMIx's error: a fence's timeout among them.
pub fn join(deadline: std::time::Instant) -> Result<(ExternalOob, String)> {
    let pmix = Pmix::connect().map_err(failed("connect"))?;
    let rank = pmix.rank() as usize;
    let size = pmix
        .get_number(RANK_WILDCARD, "pmix.job.size", deadline)
        .map_err(failed("job size"))? as usize;
    let namespace = pmix.namespace();
    // Each world of the process (the same on every rank: they are made
    // collectively) puts keys of its own: a key put again by a later world
    // may be read as the value a get of the earlier one left in this
    // process's PMIx cache (a peer's old card, naming a listener closed).
    static WORLDS: AtomicU64 = AtomicU64::new(0);
    let world = WORLDS.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(rank, size, namespace, world, "joined through PMIx");
    let mut round = 0u64;
    let gather: AllgatherFn = Box::new(move |mine: &[u8], all: &mut [u8], deadline| {
        round += 1;
        let key = format!("sode.gather.{world}.{round}");
        pmix.put_bytes(&key, mine)?;
        pmix.fence(deadline)?;
        for (r, block) in all.chunks_mut(mine.len().max(1)).enumerate().take(size) {
            let theirs = pmix.get_bytes(r as u32, &key, deadline)?;
            if theirs.len() != mine.len() {
                return Err(format!(
                    "rank {r} put {} bytes under {key}, this rank {}",
                    theirs.len(),
                    mine.len()
                ));
            }
            block[..theirs.len()].copy_from_slice(&theirs);
        }
        Ok(())
    });
    let oob = ExternalOob::new(rank, size, gather, deadline)?;
    Ok((oob, namespace))
}
