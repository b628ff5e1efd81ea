//! The one error type of sode.

/// What went wrong, from any layer, with the neighbour and direction where
/// one is concerned. Causes are chained as `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HaloError {
    /// The decomposition cannot be used.
    #[error("decomposition: {why}")]
    Decomposition {
        /// What is wrong and what to do.
        why: String,
    },
    /// A call with the wrong arguments.
    #[error("{op}: {why}")]
    Usage {
        /// The method.
        op: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A field's layout does not fit its array or the exchange
    /// ([`FieldLayout::check`](crate::field::FieldLayout::check)).
    #[error("{why}")]
    Layout {
        /// What does not fit, by axis.
        why: String,
    },
    /// A call in the wrong state (start twice, wait without start), or
    /// after an error failed the exchange.
    #[error(transparent)]
    State(#[from] sode_job::StateError),
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
    /// The ranks set up the same exchange differently (each rank's part is
    /// fine alone): every rank fails alike.
    #[error("the ranks disagree: {why}")]
    Disagree {
        /// What differs, and between which ranks.
        why: String,
    },
    /// A neighbour cannot be reached on the channel its locality calls for.
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
    #[error("shared memory with {neighbours}")]
    Shm {
        /// The neighbours on that channel (`rank 1 (E), rank 3 (N)`).
        neighbours: String,
        /// What failed.
        source: Box<sode_shm::ShmError>,
    },
    /// The RDMA channel failed, for these neighbours.
    #[cfg(feature = "rdma")]
    #[error("RDMA with {neighbours}")]
    Rdma {
        /// The neighbours on that channel.
        neighbours: String,
        /// What failed.
        source: Box<sode_transport::TransportError>,
    },
    /// The TCP channel could not connect to these neighbours.
    #[error("connecting over TCP to {neighbours}")]
    TcpSetup {
        /// The neighbours on that channel.
        neighbours: String,
        /// What failed.
        source: Box<sode_job::JobError>,
    },
    /// The TCP channel failed with one peer.
    #[error("TCP with {neighbours}: {op} with rank {rank}")]
    Tcp {
        /// The neighbours on that channel.
        neighbours: String,
        /// The peer whose stream failed.
        rank: usize,
        /// What the channel was doing.
        op: String,
        /// The system error, or what the peer sent that is not valid.
        source: std::io::Error,
    },
    /// A rank gave up setting up this exchange (told through the job,
    /// `World::give_up_setup`) while this one set up its channels.
    #[error("rank {rank} gave up setting up this exchange: {why}")]
    PeerGaveUp {
        /// The lowest rank that gave up.
        rank: usize,
        /// Why, in its words.
        why: String,
    },
    /// A barrier of the job (pseudo-collective mode) failed.
    #[error("job barrier")]
    Barrier {
        /// What failed (a rank that did not arrive in time, or died).
        source: Box<sode_job::JobError>,
    },
    /// The scheduler could not plan the RDMA writes.
    #[error("scheduling the RDMA writes")]
    Schedule(#[from] Box<sode_scheduler::SchedError>),
    /// A plan does not match the exchange's puts.
    #[error("invalid plan: {why}")]
    Plan {
        /// What does not match.
        why: String,
    },
    /// `wait` reached its deadline.
    #[error("halo exchange not complete by the deadline: {outstanding}")]
    Timeout {
        /// What is outstanding, per channel and neighbour.
        outstanding: String,
    },
    /// A round of a bounded exchange (connections capped, messages
    /// forwarded) failed; when a rank died, the routes it broke that
    /// concern this rank.
    #[error("round {round} of {rounds} of the bounded exchange failed{broken}")]
    Forwarding {
        /// The round, from 1.
        round: usize,
        /// Rounds per exchange.
        rounds: usize,
        /// `: rank 5 died on the routes 3 -> 5 -> 7 (tag 1)`, or empty.
        broken: String,
        /// What failed.
        #[source]
        source: Box<HaloError>,
    },
    /// A rank of the job died (found by the job's health watcher, which may
    /// be far from here): nothing this rank waits for can be trusted to
    /// come.
    #[error("the job failed: {failure}; outstanding here: {outstanding}")]
    JobFailed {
        /// The dead rank, its host and how it was found dead.
        failure: sode_job::Failure,
        /// What this rank still waited for, per channel and neighbour.
        outstanding: String,
    },
}

impl HaloError {
    /// Whether the failure is another rank's, learnt from the job: a rank
    /// that gave up (in a collective step, or its part of a setup this
    /// rank waited for) or died. Every rank hears of it without this one
    /// telling the job.
    pub fn from_the_job(&self) -> bool {
        matches!(
            self,
            HaloError::PeerGaveUp { .. } | HaloError::JobFailed { .. }
        ) || sode_job::JobError::gave_up_in(self).is_some()
    }
}

/// `Result` with [`HaloError`].
pub type Result<T, E = HaloError> = std::result::Result<T, E>;
