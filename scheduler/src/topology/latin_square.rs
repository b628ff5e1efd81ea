//! The Latin-square fat-tree of prime order n: a leaf switch per point, a
//! spine switch per line, a link between a leaf and a spine when the point is
//! on the line, and n + 1 servers per leaf.

use super::contention::Route;
use super::plane::{Point, ProjectivePlane};
use crate::error::Result;

/// A server: its leaf switch (a point) and its index under that leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Server {
    /// The leaf switch.
    pub leaf: Point,
    /// Index under the leaf, 0..=n.
    pub id: usize,
}

/// The topology, with links numbered for the contention simulator.
#[derive(Debug, Clone)]
pub struct LatinSquareFatTree {
    plane: ProjectivePlane,
    /// `port_of[p * size + l]`: the port of line l at leaf p (and of point p at spine l).
    leaf_port: Vec<u8>,
    spine_port: Vec<u8>,
}

impl LatinSquareFatTree {
    /// The fat-tree of prime order `n` (switch degree n + 1).
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidTopology`](crate::SchedError::InvalidTopology) when `n` is not a prime up to 251.
    pub fn new(n: usize) -> Result<Self> {
        let plane = ProjectivePlane::new(n)?;
        let size = plane.size();
        let mut leaf_port = vec![u8::MAX; size * size];
        let mut spine_port = vec![u8::MAX; size * size];
        for p in 0..size {
            for (port, &l) in plane.lines_through(p).iter().enumerate() {
                leaf_port[p * size + l] = port as u8;
            }
        }
        for l in 0..size {
            for (port, &p) in plane.points_on(l).iter().enumerate() {
                spine_port[p * size + l] = port as u8;
            }
        }
        Ok(LatinSquareFatTree {
            plane,
            leaf_port,
            spine_port,
        })
    }

    /// The plane it is built on.
    pub fn plane(&self) -> &ProjectivePlane {
        &self.plane
    }
    /// Servers per leaf: n + 1.
    pub fn servers_per_leaf(&self) -> usize {
        self.plane.order() + 1
    }
    /// All servers: (n + 1)(n^2 + n + 1).
    pub fn server_count(&self) -> usize {
        self.servers_per_leaf() * self.plane.size()
    }
    /// The global number of a server (leaf-major).
    pub fn server_index(&self, s: Server) -> usize {
        self.plane.point_index(s.leaf) * self.servers_per_leaf() + s.id
    }
    /// The server of a global number.
    pub fn server(&self, index: usize) -> Server {
        let d = self.servers_per_leaf();
        Server {
            leaf: self.plane.point(index / d),
            id: index % d,
        }
    }
    /// Links: servers up, servers down, leaf-to-spine, spine-to-leaf.
    pub fn link_count(&self) -> usize {
        2 * self.server_count() + 2 * self.plane.size() * self.servers_per_leaf()
    }

    fn server_up(&self, s: usize) -> usize {
        s
    }
    fn server_down(&self, s: usize) -> usize {
        self.server_count() + s
    }
    /// Leaf p's up-link on its port `port`.
    fn leaf_up(&self, p: usize, port: usize) -> usize {
        2 * self.server_count() + p * self.servers_per_leaf() + port
    }
    /// Spine l's down-link on its port `port`.
    fn spine_down(&self, l: usize, port: usize) -> usize {
        2 * self.server_count()
            + self.plane.size() * self.servers_per_leaf()
            + l * self.servers_per_leaf()
            + port
    }

    /// The port of line `l` at leaf `p`.
    pub fn leaf_port(&self, p: usize, l: usize) -> usize {
        self.leaf_port[p * self.plane.size() + l] as usize
    }
    /// The port of point `p` at spine `l`.
    pub fn spine_port(&self, p: usize, l: usize) -> usize {
        self.spine_port[p * self.plane.size() + l] as usize
    }

    /// The minimal route: inside the leaf when both servers share it,
    /// otherwise over the one spine whose line joins the two leaves.
    pub fn route(&self, src: usize, dst: usize) -> Route {
        let d = self.servers_per_leaf();
        let (a, b) = (src / d, dst / d);
        match self.plane.line_through(a, b) {
            None => Route::new(src, dst, &[self.server_up(src), self.server_down(dst)]),
            Some(l) => self.route_via(src, dst, l),
        }
    }

    /// The route up to spine `l` and down to the destination's leaf.
    pub fn route_via(&self, src: usize, dst: usize, l: usize) -> Route {
        let d = self.servers_per_leaf();
        let (a, b) = (src / d, dst / d);
        Route::new(
            src,
            dst,
            &[
                self.server_up(src),
                self.leaf_up(a, self.leaf_port(a, l)),
                self.spine_down(l, self.spine_port(b, l)),
                self.server_down(dst),
            ],
        )
    }
}
