//! The one error type of sode.

/// What went wrong, from any layer, with the neighbour and direction where
/// one is concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HaloError {
    /// The decomposition cannot be used.
    #[error("decomposition: {why}")]
    Decomposition {
        /// What is wrong and what to do.
        why: String,
    },
    /// A call with the wrong arguments or in the wrong state.
    #[error("{op}: {why}")]
    Usage {
        /// The method.
        op: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The job's launch does not match the decomposition.
    #[error("the job has {job} ranks but the decomposition {grid:?} needs {needed}: start it with -n {needed}")]
    JobSize {
        /// Ranks in the job.
        job: usize,
        /// The process grid.
        grid: Vec<usize>,
        /// Ranks it needs.
        needed: usize,
    },
    /// A neighbour is on another node but RDMA was ruled out, or the other way round.
    #[error("neighbour rank {rank} ({direction}): {why}")]
    Locality {
        /// The neighbour.
        rank: usize,
        /// Its direction.
        direction: String,
        /// Why it cannot be reached.
        why: String,
    },
    /// The shared-memory channel failed, for these neighbours.
    #[error("shared memory with {neighbours}: {source}")]
    Shm {
        /// The neighbours on that channel (`rank 1 (E), rank 3 (N)`).
        neighbours: String,
        /// What failed.
        #[source]
        source: Box<sode_shm::ShmError>,
    },
    /// The RDMA transport failed, for these neighbours.
    #[error("RDMA with {neighbours}: {source}")]
    Rdma {
        /// The neighbours on that transport.
        neighbours: String,
        /// What failed.
        #[source]
        source: Box<sode_transport::TransportError>,
    },
    /// A barrier of the job (pseudo-collective mode) failed.
    #[error("job barrier: {source}")]
    Barrier {
        /// What failed (a rank that did not arrive in time, or died).
        #[source]
        source: Box<sode_transport::TransportError>,
    },
    /// The scheduler could not plan the RDMA writes.
    #[error("scheduling the RDMA writes: {0}")]
    Schedule(#[from] Box<sode_scheduler::SchedError>),
    /// `wait` reached its deadline.
    #[error("halo exchange not complete by the deadline: {outstanding}")]
    Timeout {
        /// What is outstanding, per transport and neighbour.
        outstanding: String,
    },
}

/// `Result` with [`HaloError`].
pub type Result<T, E = HaloError> = std::result::Result<T, E>;
