//! The one error type of sode-job.

use std::time::Duration;

/// What can go wrong while finding, joining or launching the job. Each
/// variant names the operation and the rank or address concerned; causes are
/// chained as `source`, not repeated in the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A launcher variable or setting is unusable.
    #[error("invalid setting {name}={value:?}: {why}")]
    InvalidSetting {
        /// The variable or option.
        name: String,
        /// The value given.
        value: String,
        /// What is wrong and what is expected.
        why: String,
    },
    /// The environment does not say where this process stands in a job.
    #[error("launch: {why}")]
    Launch {
        /// What is missing and what to do.
        why: String,
    },
    /// A bootstrap step (listen, connect, send, receive) failed.
    #[error("bootstrap: {step} with {whom}")]
    Bootstrap {
        /// The step, with its arguments.
        step: String,
        /// The rank or address on the other side.
        whom: String,
        /// The system error.
        source: std::io::Error,
    },
    /// A bootstrap step did not finish by its deadline.
    #[error("bootstrap: {step} with {whom} did not finish within {:.1} s: {hint}", .waited.as_secs_f64())]
    BootstrapTimeout {
        /// The step.
        step: String,
        /// The ranks that did not answer.
        whom: String,
        /// How long it waited.
        waited: Duration,
        /// The likely cause.
        hint: String,
    },
    /// Another process sent a setup message that does not fit the job.
    #[error("bootstrap: {whom} sent an invalid message: {why}")]
    Protocol {
        /// The sender.
        whom: String,
        /// What is wrong with it.
        why: String,
    },
    /// A connection that could not prove it belongs to this job (a wrong
    /// or missing job secret): dropped.
    #[error("{whom} does not belong to this job: it could not prove it holds the job's secret (SODE_JOB_SECRET)")]
    Unauthenticated {
        /// The other side.
        whom: String,
    },
    /// The other side refused this rank's proof: the two were given
    /// different job secrets.
    #[error("{whom} refused this rank: the two hold different job secrets (SODE_JOB_SECRET); give every rank of the job the same one, or none and let the launcher choose")]
    SecretRefused {
        /// The side that refused.
        whom: String,
    },
    /// A rank named as a peer does not exist or is this rank.
    #[error("rank {peer} cannot be a peer: {why}")]
    UnknownPeer {
        /// The rank named.
        peer: usize,
        /// Why not.
        why: String,
    },
    /// The collective sode joined the job through (the program's MPI
    /// communicator, or the launcher's PMIx or PMI server) failed.
    #[error("the job's allgather (through the program's MPI or the launcher's PMIx or PMI) failed during {step}: {why}")]
    External {
        /// What sode was doing.
        step: String,
        /// What the program's collective reported.
        why: String,
    },
    /// The launcher could not start the job.
    #[error("cannot start the job: {why}")]
    Start {
        /// What failed.
        why: String,
        /// The system error, if one.
        source: Option<std::io::Error>,
    },
    /// A renumbering of the ranks that is not a permutation.
    #[error("cannot renumber the ranks: {why}")]
    Renumbering {
        /// What is wrong with it.
        why: String,
    },
    /// A rank gave up the collective steps it was taking with the others
    /// (a commit that failed on it): it took the step this rank was taking
    /// with its reason in place of its data ([`crate::World::give_up`]),
    /// and takes no further step of that operation.
    #[error("rank {rank} gave up: {message}")]
    GaveUp {
        /// The lowest rank that gave up in that step.
        rank: usize,
        /// Its code (what the caller of `give_up` passed: a status).
        code: i32,
        /// Its reason.
        message: String,
    },
    /// Ranks did not take a collective step within its timeout. Rank 0,
    /// which gathers the steps over the job's own links, names them, to
    /// the ranks that took the step too.
    #[error("{missing} did not take a collective step within {:.1} s: failed, stopped, or not making the same call (every rank of the communicator makes each collective call, as sode_exchange_commit, in the same order: an exchange among some ranks takes a communicator of those ranks)", .waited.as_secs_f64())]
    StepMissed {
        /// The ranks, as "rank 2" or "ranks 2, 5 and 3 more".
        missing: String,
        /// How long rank 0 waited for them.
        waited: Duration,
    },
    /// A rank took a collective step other than this rank's: one came
    /// late to a step the others had given up at its deadline, or skipped
    /// a collective call. The ranks stay out of step: make a new world
    /// (communicator).
    #[error("rank {rank} is at collective step {theirs}, this rank at step {ours}: the ranks are out of step (a step timed out earlier, or a rank skipped a collective call); make a new communicator")]
    OutOfStep {
        /// The lowest rank found at another step.
        rank: usize,
        /// Its step's number.
        theirs: u32,
        /// This rank's.
        ours: u32,
    },
    /// A rank of the job was found dead ([`crate::World::failure`]) before
    /// this collective step: no step completes without it, so none is
    /// taken.
    #[error("the job failed: {failure}")]
    JobFailed {
        /// The dead rank, its host and how it was found dead.
        failure: crate::Failure,
    },
    /// The job's health watcher could not be started.
    #[error("starting the job's health watcher: {step}")]
    Health {
        /// What failed.
        step: &'static str,
        /// The system error.
        source: std::io::Error,
    },
}

impl JobError {
    /// The give-up ([`JobError::GaveUp`]) that `e` is, or stems from: a
    /// collective step this rank took ended there, another rank having
    /// given up in it; the operation takes no further step.
    pub fn gave_up_in<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e JobError> {
        let mut at = Some(e);
        while let Some(err) = at {
            let job = err
                .downcast_ref::<JobError>()
                .or_else(|| err.downcast_ref::<Box<JobError>>().map(|b| &**b));
            if let Some(g @ JobError::GaveUp { .. }) = job {
                return Some(g);
            }
            at = err.source();
        }
        None
    }
}

/// `Result` with [`JobError`].
pub type Result<T, E = JobError> = std::result::Result<T, E>;
