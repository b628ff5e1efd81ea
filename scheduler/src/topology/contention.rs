//! The route-level contention simulator: the paper's throughput ratio.

/// One flow of a phase and the links it crosses (at most four: server up,
/// leaf to spine, spine to leaf, server down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Sending server.
    pub src: u32,
    /// Receiving server.
    pub dst: u32,
    links: [u32; 4],
    len: u8,
}

impl Route {
    /// A route over `links` (at most four).
    pub fn new(src: usize, dst: usize, links: &[usize]) -> Route {
        assert!(
            links.len() <= 4,
            "a two-level route crosses at most four links"
        );
        let mut l = [0u32; 4];
        for (slot, &link) in l.iter_mut().zip(links) {
            *slot = link as u32;
        }
        Route {
            src: src as u32,
            dst: dst as u32,
            links: l,
            len: links.len() as u8,
        }
    }
    /// The links crossed.
    pub fn links(&self) -> &[u32] {
        &self.links[..self.len as usize]
    }
}

/// Mean, over every flow of every phase, of 1 / (the most flows sharing one
/// link of its route in that phase). 1.0 means no link is ever shared.
pub fn throughput_ratio(link_count: usize, phases: impl IntoIterator<Item = Vec<Route>>) -> f64 {
    let mut load = vec![0u32; link_count];
    let (mut sum, mut flows) = (0.0f64, 0u64);
    for phase in phases {
        for r in &phase {
            for &l in r.links() {
                load[l as usize] += 1;
            }
        }
        for r in &phase {
            let worst = r
                .links()
                .iter()
                .map(|&l| load[l as usize])
                .max()
                .unwrap_or(1)
                .max(1);
            sum += 1.0 / worst as f64;
            flows += 1;
        }
        for r in &phase {
            for &l in r.links() {
                load[l as usize] = 0;
            }
        }
    }
    if flows == 0 {
        1.0
    } else {
        sum / flows as f64
    }
}

/// The largest number of flows on one link in any phase.
pub fn peak_link_load(link_count: usize, phases: impl IntoIterator<Item = Vec<Route>>) -> u32 {
    let mut load = vec![0u32; link_count];
    let mut peak = 0;
    for phase in phases {
        for r in &phase {
            for &l in r.links() {
                load[l as usize] += 1;
                peak = peak.max(load[l as usize]);
            }
        }
        for r in &phase {
            for &l in r.links() {
                load[l as usize] = 0;
            }
        }
    }
    peak
}
