//! The one error type of `sode-scheduler`.

use thiserror::Error;

/// Everything that can go wrong while describing, planning or simulating an
/// exchange. Each variant names what was wrong and what to do about it.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum SchedError {
    /// A machine parameter is out of range.
    #[error("machine parameter `{field}` = {value} is invalid: {reason}")]
    InvalidMachine {
        /// The JSON field name of the parameter.
        field: &'static str,
        /// The value that was given.
        value: f64,
        /// Why it is rejected and what is expected.
        reason: &'static str,
    },
    /// The pattern has no requests.
    #[error("the pattern has no requests: give at least one RDMA put")]
    EmptyPattern,
    /// A request is malformed.
    #[error("request {id}: {reason}")]
    InvalidRequest {
        /// The request's id.
        id: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// A direction name that is not one of the known compass/axis names.
    #[error("unknown direction `{0}`: use E, W, N, S, NE, NW, SE, SW (2-D) or a 3-D offset such as `x+y-z0`")]
    UnknownDirection(String),
    /// An algorithm name that is not known.
    #[error("unknown algorithm `{0}`: use round-robin:K, bl:K, bl-overhead, bl-share, greedy, split, exact or auto")]
    UnknownAlgorithm(String),
    /// An algorithm asked for more engines than the machine has.
    #[error("algorithm `{algorithm}` wants {wanted} engines but the machine has {available}: use K <= {available}")]
    TooManyEngines {
        /// The algorithm as named.
        algorithm: String,
        /// Engines the algorithm wants.
        wanted: usize,
        /// Engines the machine has.
        available: usize,
    },
    /// The exact solver refuses instances it cannot finish.
    #[error("the exact solver handles at most {limit} requests, this pattern has {requests}: use a heuristic (auto)")]
    TooLargeForExact {
        /// Requests in the pattern.
        requests: usize,
        /// The largest size accepted.
        limit: usize,
    },
    /// A heuristic whose work grows with the square of the pattern refuses
    /// a pattern it would take minutes over.
    #[error("{algorithm} plans at most {limit} requests, this pattern has {requests}: use auto, split or round-robin:K")]
    TooLargeForHeuristic {
        /// The heuristic.
        algorithm: String,
        /// Requests in the pattern.
        requests: usize,
        /// The largest size accepted.
        limit: usize,
    },
    /// The exact solver ran out of its node budget before proving optimality.
    #[error("the exact solver explored {nodes} nodes without finishing: use a heuristic (auto) or a smaller pattern")]
    ExactBudgetExhausted {
        /// Search nodes explored.
        nodes: u64,
    },
    /// A plan does not fit its pattern or breaks a constraint.
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// JSON input could not be parsed.
    #[error("malformed {what} JSON: {detail}")]
    Json {
        /// Which document (pattern, plan).
        what: &'static str,
        /// The parser's message, with line and column.
        detail: String,
    },
    /// A topology or all-to-all schedule was given parameters it cannot take.
    #[error("invalid topology: {0}")]
    InvalidTopology(String),
    /// A traffic or distance matrix is malformed.
    #[error("invalid matrix: {0}")]
    InvalidMatrix(String),
    /// A pattern generator was given out-of-range parameters.
    #[error("invalid pattern parameter `{field}`: {reason}")]
    InvalidPatternParameter {
        /// The parameter.
        field: &'static str,
        /// Why it is rejected.
        reason: String,
    },
}

/// Shorthand for results in this crate.
pub type Result<T, E = SchedError> = std::result::Result<T, E>;
