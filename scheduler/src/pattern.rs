//! Requests and patterns: the RDMA puts of one exchange, as given by the user.

use crate::error::{Result, SchedError};
use crate::machine::Machine;
use serde::{Deserialize, Serialize};

/// Most puts one pattern may hold.
pub const MAX_REQUESTS: usize = 100_000;
/// Most bytes one put may carry.
pub const MAX_PUT_BYTES: u64 = 1 << 40;

/// One RDMA put of the exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Unique id within the pattern; plans refer to requests by it.
    pub id: u32,
    /// Destination rank.
    pub dest: u32,
    /// Direction name: a compass point (`E`, `NE`, ...) or a 3-D offset
    /// (`x+`, `x+y-`, `x-y+z+`, ...). Diagonal directions (more than one axis)
    /// are the ones `bl:K` limits.
    pub direction: String,
    /// The network links the put occupies (a routed put crosses several).
    pub links: Vec<String>,
    /// Bytes to write.
    pub bytes: u64,
}

/// A whole exchange: the machine it runs on and all of its puts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pattern {
    /// The node the exchange runs on.
    pub machine: Machine,
    /// Every put of the exchange, in the order the application gave them.
    pub requests: Vec<Request>,
}

/// A direction's axis components, e.g. `NE` = [(x, +1), (y, +1)].
pub(crate) fn direction_axes(direction: &str) -> Result<Vec<(u8, i8)>> {
    let compass = match direction {
        "E" => Some(vec![(0, 1)]),
        "W" => Some(vec![(0, -1)]),
        "N" => Some(vec![(1, 1)]),
        "S" => Some(vec![(1, -1)]),
        "NE" => Some(vec![(0, 1), (1, 1)]),
        "NW" => Some(vec![(0, -1), (1, 1)]),
        "SE" => Some(vec![(0, 1), (1, -1)]),
        "SW" => Some(vec![(0, -1), (1, -1)]),
        _ => None,
    };
    if let Some(axes) = compass {
        return Ok(axes);
    }
    let unknown = || SchedError::UnknownDirection(direction.to_string());
    let bytes = direction.as_bytes();
    if bytes.is_empty() || bytes.len() % 2 != 0 {
        return Err(unknown());
    }
    let mut axes = Vec::new();
    for pair in bytes.chunks(2) {
        let axis = match pair[0] {
            b'x' => 0,
            b'y' => 1,
            b'z' => 2,
            _ => return Err(unknown()),
        };
        let sign = match pair[1] {
            b'+' => 1,
            b'-' => -1,
            b'0' => 0,
            _ => return Err(unknown()),
        };
        if axes.iter().any(|&(a, _)| a == axis) {
            return Err(unknown());
        }
        if sign != 0 {
            axes.push((axis, sign));
        }
    }
    if axes.is_empty() {
        return Err(unknown());
    }
    Ok(axes)
}

impl Pattern {
    /// Parses a pattern from its JSON form and validates it.
    ///
    /// # Errors
    ///
    /// [`SchedError::Json`](crate::SchedError::Json) when `text` is not a pattern; the errors of
    /// [`Pattern::validate`](crate::Pattern::validate).
    pub fn from_json(text: &str) -> Result<Pattern> {
        let pattern: Pattern = serde_json::from_str(text).map_err(|e| SchedError::Json {
            what: "pattern",
            detail: e.to_string(),
        })?;
        pattern.validate()?;
        Ok(pattern)
    }

    /// The pattern as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a pattern always serialises")
    }

    /// Checks the machine and every request.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidMachine`](crate::SchedError::InvalidMachine), [`SchedError::EmptyPattern`](crate::SchedError::EmptyPattern), or
    /// [`SchedError::InvalidRequest`](crate::SchedError::InvalidRequest) naming the first bad request.
    pub fn validate(&self) -> Result<()> {
        self.machine.validate()?;
        if self.requests.is_empty() {
            return Err(SchedError::EmptyPattern);
        }
        if self.requests.len() > MAX_REQUESTS {
            return Err(SchedError::InvalidPatternParameter {
                field: "requests",
                reason: format!(
                    "{} puts in one exchange; the scheduler takes at most {MAX_REQUESTS}",
                    self.requests.len()
                ),
            });
        }
        let mut ids: Vec<u32> = self.requests.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(SchedError::InvalidRequest {
                id: w[0],
                reason: "the id is used twice: ids must be unique".into(),
            });
        }
        for r in &self.requests {
            direction_axes(&r.direction)?;
            if r.bytes == 0 {
                return Err(SchedError::InvalidRequest {
                    id: r.id,
                    reason: "bytes is 0: leave empty puts out of the pattern".into(),
                });
            }
            if r.bytes > MAX_PUT_BYTES {
                return Err(SchedError::InvalidRequest {
                    id: r.id,
                    reason: format!(
                        "{} bytes in one put; a put carries at most {MAX_PUT_BYTES} (1 TiB)",
                        r.bytes
                    ),
                });
            }
            if r.links.is_empty() {
                return Err(SchedError::InvalidRequest {
                    id: r.id,
                    reason: "no links: name at least the link the put leaves the node on".into(),
                });
            }
            if let Some(l) = r.links.iter().find(|l| l.is_empty()) {
                return Err(SchedError::InvalidRequest {
                    id: r.id,
                    reason: format!("empty link name {l:?}"),
                });
            }
        }
        Ok(())
    }

    /// Total bytes of all requests (saturating; validated patterns do not
    /// come near).
    pub fn total_bytes(&self) -> u64 {
        self.requests
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.bytes))
    }
}
