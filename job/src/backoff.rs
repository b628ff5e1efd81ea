//! The one way sode waits: spin, then yield, then sleep.
//!
//! Every waiting loop of the job layer and the channels goes through
//! [`Backoff`], so the policy (how long to burn a core for latency before
//! letting an oversubscribed node's other ranks run) is written once.

use std::time::Duration;

/// Escalating waits for a polling loop: call [`snooze`](Backoff::snooze)
/// after each pass that made no progress and [`reset`](Backoff::reset) after
/// one that did.
#[derive(Debug, Clone)]
pub struct Backoff {
    idle: u32,
    spins: u32,
    yields: u32,
    /// The first sleep; each further one doubles, up to `max_sleep`.
    sleep: Duration,
    max_sleep: Duration,
    first_sleep: Duration,
}

impl Backoff {
    /// For a data path: spins for latency (a few microseconds), then yields
    /// (other ranks may share this core), then sleeps 10 us per pass once a
    /// wait has lasted long enough that the peer is evidently late.
    pub fn exchange() -> Backoff {
        Backoff {
            idle: 0,
            spins: 200,
            yields: 20_000,
            sleep: Duration::from_micros(10),
            max_sleep: Duration::from_micros(10),
            first_sleep: Duration::from_micros(10),
        }
    }

    /// For setup and supervision (accepting connections, watching child
    /// processes, waiting for a peer's segment): sleeps from the start,
    /// 20 us at first (setup steps often finish at once), doubling up to
    /// `period`.
    pub fn setup(period: Duration) -> Backoff {
        let first = period.min(Duration::from_micros(20));
        Backoff {
            idle: 0,
            spins: 0,
            yields: 0,
            sleep: first,
            max_sleep: period,
            first_sleep: first,
        }
    }

    /// Waits a little, more the longer nothing has happened.
    pub fn snooze(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= self.spins {
            std::hint::spin_loop();
        } else if self.idle <= self.spins.saturating_add(self.yields) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep);
            self.sleep = (self.sleep * 2).min(self.max_sleep);
        }
    }

    /// Something happened: the next wait starts with spinning again.
    pub fn reset(&mut self) {
        self.idle = 0;
        self.sleep = self.first_sleep;
    }

    /// Passes without progress since the last reset.
    pub fn idle_passes(&self) -> u32 {
        self.idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spins_then_yields_then_sleeps() {
        let mut b = Backoff::exchange();
        let t = Instant::now();
        for _ in 0..200 {
            b.snooze();
        }
        assert!(t.elapsed() < Duration::from_millis(50), "spinning is quick");
        assert_eq!(b.idle_passes(), 200);
        b.reset();
        assert_eq!(b.idle_passes(), 0);
        let mut s = Backoff::setup(Duration::from_millis(2));
        let t = Instant::now();
        for _ in 0..10 {
            s.snooze();
        }
        // 20 + 40 + ... + 1280 us, then 2 ms: at least 4.5 ms in all.
        assert!(
            t.elapsed() >= Duration::from_micros(4500),
            "setup waits sleep and grow"
        );
    }
}
