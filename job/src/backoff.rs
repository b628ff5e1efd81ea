//! The one way sode waits: spin, then yield, then sleep.
//!
//! Every waiting loop of the job layer and the channels goes through
//! [`Backoff`], so the policy (how long to burn a core for latency before
//! letting an oversubscribed node's other ranks run) is written once.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// How the data path waits, for the whole process (`SODE_WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Spin briefly for latency, then yield, then sleep: for a node with a
    /// core per rank.
    Spin,
    /// Yield at once, then sleep: for a node with more ranks than cores,
    /// where a spinning rank only delays the peer it waits for (measured:
    /// 4 ranks on 2 cores, 59 us an exchange spinning first, 14 us
    /// yielding at once).
    Yield,
    /// Yield a few times, then sleep in the kernel until a peer signals
    /// (a futex in the shared-memory segment) where the channel can; for
    /// ranks that wait long and should leave their core to other work.
    Block,
}

/// The process's policy: 0 spin (the default), 1 yield, 2 block.
static POLICY: AtomicU8 = AtomicU8::new(0);

/// The variable that chooses the policy: `auto` (or unset), `spin`,
/// `yield`, `block`.
pub const WAIT_VAR: &str = "SODE_WAIT";

impl WaitPolicy {
    /// The policy in force for this process.
    pub fn current() -> WaitPolicy {
        match POLICY.load(Ordering::Relaxed) {
            1 => WaitPolicy::Yield,
            2 => WaitPolicy::Block,
            _ => WaitPolicy::Spin,
        }
    }

    /// Puts `self` in force for every later [`Backoff::exchange`].
    pub fn adopt(self) {
        let code = match self {
            WaitPolicy::Spin => 0,
            WaitPolicy::Yield => 1,
            WaitPolicy::Block => 2,
        };
        POLICY.store(code, Ordering::Relaxed);
    }

    /// What `SODE_WAIT` (`value`, unset: auto) asks for, with `local_ranks`
    /// ranks of the job on a node that may run on `cores` CPUs between
    /// them (the union of their CPU affinities, at most the whole CPUs
    /// their cgroup grants): auto blocks when the
    /// ranks outnumber the cores (measured with `bench2d`, 4 ranks on 2
    /// cores: at least as fast as yielding, and an idle rank leaves its
    /// core to the others). An unknown value is an error naming the
    /// choices.
    ///
    /// # Errors
    ///
    /// An unknown value, as text naming the choices.
    pub fn choose(
        value: Option<&str>,
        local_ranks: usize,
        cores: usize,
    ) -> Result<WaitPolicy, String> {
        match value.map(str::trim) {
            None | Some("") | Some("auto") => Ok(if local_ranks > cores.max(1) {
                WaitPolicy::Block
            } else {
                WaitPolicy::Spin
            }),
            Some("spin") => Ok(WaitPolicy::Spin),
            Some("yield") => Ok(WaitPolicy::Yield),
            Some("block") => Ok(WaitPolicy::Block),
            Some(other) => Err(format!(
                "'{other}': use auto (block when a node has more ranks than cores), spin, yield or block"
            )),
        }
    }
}

/// CPUs online on this node (`/sys/devices/system/cpu/online`, `0-3,8`),
/// whatever this process's own affinity: what the wait policy counts when
/// the node's ranks' affinities cannot be read. Falls back to the CPUs
/// this process may use.
pub fn node_cores() -> usize {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| {
            s.trim().split(',').try_fold(0usize, |n, part| {
                let (lo, hi) = part.split_once('-').unwrap_or((part, part));
                let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
                Some(n + hi.checked_sub(lo)? + 1)
            })
        });
    parsed
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Escalating waits for a polling loop: call [`snooze`](Backoff::snooze)
/// after each pass that made no progress and [`reset`](Backoff::reset) after
/// one that did.
#[derive(Debug, Clone)]
pub struct Backoff {
    idle: u32,
    /// Passes after which a caller that can should block on its channel's
    /// signal ([`Backoff::blocks`]); `None`: never.
    block_after: Option<u32>,
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
    /// Under [`WaitPolicy::Yield`] it does not spin; under
    /// [`WaitPolicy::Block`] it does not spin either, and after 20 yields
    /// a caller that can block [`blocks`](Self::blocks) (one that cannot
    /// goes on as under `Yield`).
    pub fn exchange() -> Backoff {
        let policy = WaitPolicy::current();
        Backoff {
            idle: 0,
            block_after: (policy == WaitPolicy::Block).then_some(20),
            spins: match policy {
                WaitPolicy::Spin => 200,
                WaitPolicy::Yield | WaitPolicy::Block => 0,
            },
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
            block_after: None,
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

    /// Whether the caller should now sleep on its channel's signal rather
    /// than [`snooze`](Self::snooze) (under [`WaitPolicy::Block`], after
    /// 20 yields). A caller that cannot block snoozes on.
    pub fn blocks(&self) -> bool {
        self.block_after.is_some_and(|after| self.idle >= after)
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
    fn the_wait_policy_follows_ranks_per_core_unless_told() {
        assert_eq!(WaitPolicy::choose(None, 4, 2), Ok(WaitPolicy::Block));
        assert_eq!(WaitPolicy::choose(Some("auto"), 2, 2), Ok(WaitPolicy::Spin));
        assert_eq!(WaitPolicy::choose(Some("spin"), 8, 2), Ok(WaitPolicy::Spin));
        assert_eq!(
            WaitPolicy::choose(Some(" yield "), 1, 64),
            Ok(WaitPolicy::Yield)
        );
        assert_eq!(
            WaitPolicy::choose(Some("block"), 1, 1),
            Ok(WaitPolicy::Block)
        );
        let e = WaitPolicy::choose(Some("sleep"), 1, 1).unwrap_err();
        assert!(e.contains("'sleep'") && e.contains("yield or block"), "{e}");
        assert!(node_cores() >= 1);
    }

    #[test]
    fn a_blocking_backoff_yields_twenty_times_then_blocks() {
        // (Built by hand: the policy is process-wide, and tests run in
        // parallel.)
        let mut b = Backoff {
            block_after: Some(20),
            spins: 0,
            ..Backoff::exchange()
        };
        for _ in 0..20 {
            assert!(!b.blocks());
            b.snooze();
        }
        assert!(b.blocks());
        b.reset();
        assert!(!b.blocks());
        assert!(!Backoff::setup(Duration::from_millis(1)).blocks());
    }

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
