//! What sode keeps per job, in the [`World`]'s memo: what every exchange
//! would measure alike, measured once (the shared-memory thresholds, a
//! probe per place of milliseconds each, and this node's RDMA model), so
//! that only the first commit on a job pays for it; and the count of
//! exchanges made, which names each one's shared-memory segments.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sode_job::World;

/// What sode keeps per job, shared by every exchange built on it.
#[derive(Debug, Default)]
pub(crate) struct JobMemo {
    /// Exchange builders made so far (collectively: each rank counts
    /// alike, so the count names an exchange the same on every rank).
    builds: AtomicU64,
    /// The shared-memory threshold probes, per place.
    pub(crate) shm_probes: sode_shm::ProbeCache,
    /// This node's calibrated RDMA model, per engine count (`None`: the
    /// device did not calibrate; not tried again).
    #[cfg(feature = "rdma")]
    node_models: std::sync::Mutex<Vec<(usize, Option<sode_scheduler::Machine>)>>,
}

impl JobMemo {
    /// What is kept for `world`'s job.
    pub(crate) fn of(world: &World) -> Arc<JobMemo> {
        world.memo(JobMemo::default)
    }

    /// A name for the exchange being described, the same on every rank
    /// (its place in the job's sequence of builders) and never one an exchange
    /// still alive holds: a rank ahead of its peer cannot meet the peer's
    /// previous exchange under the same name.
    pub(crate) fn next_exchange_name(&self) -> String {
        format!("h{}", self.builds.fetch_add(1, Ordering::Relaxed))
    }

    /// This node's model for `engines` queue pairs: kept, or measured by
    /// `calibrate` and kept.
    #[cfg(feature = "rdma")]
    pub(crate) fn node_model(
        &self,
        engines: usize,
        calibrate: impl FnOnce() -> Option<sode_scheduler::Machine>,
    ) -> Option<sode_scheduler::Machine> {
        let lock = || {
            self.node_models
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((_, m)) = lock().iter().find(|(e, _)| *e == engines) {
            return *m;
        }
        // Not locked while the device is measured.
        let measured = calibrate();
        lock().push((engines, measured));
        measured
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_job_keeps_one_memo() {
        let world = World::single();
        let a = JobMemo::of(&world);
        let b = JobMemo::of(&world.clone());
        assert!(Arc::ptr_eq(&a, &b), "clones of a world share its memo");
        let other = JobMemo::of(&World::single());
        assert!(!Arc::ptr_eq(&a, &other), "another job keeps its own");
        assert_eq!(a.next_exchange_name(), "h0");
        assert_eq!(b.next_exchange_name(), "h1");
        assert_eq!(other.next_exchange_name(), "h0");
    }

    #[cfg(feature = "rdma")]
    #[test]
    fn the_node_model_is_measured_once_per_engine_count() {
        let m = JobMemo::default();
        let mut calls = 0;
        let machine = sode_scheduler::Machine::K_COMPUTER;
        for _ in 0..3 {
            m.node_model(2, || {
                calls += 1;
                Some(machine)
            });
        }
        m.node_model(4, || {
            calls += 1;
            None
        });
        assert_eq!(m.node_model(4, || unreachable!("kept")), None);
        assert_eq!(calls, 2);
    }
}
