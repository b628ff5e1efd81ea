//! A conventional 2-level fat-tree of degree d: d leaves with d servers
//! each, d spines, every leaf linked to every spine; destination-mod-d
//! routing (the usual static routing for the shift pattern).

use super::contention::Route;
use crate::error::{Result, SchedError};

/// The topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatTree {
    degree: usize,
}

impl FatTree {
    /// A fat-tree of switch degree `degree` (half the ports).
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidTopology`](crate::SchedError::InvalidTopology) for a degree outside 2 to 1024.
    pub fn new(degree: usize) -> Result<Self> {
        if !(2..=1024).contains(&degree) {
            return Err(SchedError::InvalidTopology(format!(
                "fat-tree degree {degree}: use 2 to 1024"
            )));
        }
        Ok(FatTree { degree })
    }
    /// Servers: d^2.
    pub fn server_count(&self) -> usize {
        self.degree * self.degree
    }
    /// Links: servers up and down, leaf-to-spine, spine-to-leaf.
    pub fn link_count(&self) -> usize {
        4 * self.server_count()
    }
    /// The route from server `src` to server `dst`.
    pub fn route(&self, src: usize, dst: usize) -> Route {
        let d = self.degree;
        let n = self.server_count();
        let (a, b) = (src / d, dst / d);
        if a == b {
            return Route::new(src, dst, &[src, n + dst]);
        }
        let spine = dst % d;
        Route::new(
            src,
            dst,
            &[src, 2 * n + a * d + spine, 3 * n + spine * d + b, n + dst],
        )
    }
}
