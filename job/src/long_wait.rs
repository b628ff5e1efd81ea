//! A wait that goes on and on says so: a warning once it has waited
//! `SODE_WAIT_WARN` (60 s by default), and again each time it has waited
//! twice as long, naming what is outstanding. A neighbour that is
//! stopped, blocked in another call (a collective waiting for this rank,
//! say) or that skipped an exchange or a collective step never sends, and
//! a wait without deadline would otherwise hang without a word.

use std::time::{Duration, Instant};

use crate::timeout::{Deadline, WAIT_WARN_VAR};

/// When a wait next warns: exchanges' waits for their halos, and
/// collective steps over the job's own links.
#[derive(Debug)]
pub struct LongWait {
    began: Instant,
    /// Time this process was found stopped before `next` was set: it is
    /// not time waited.
    stopped: Duration,
    next: Deadline,
}

impl LongWait {
    /// For a wait beginning now, first warning `after` (running time);
    /// `None` when waits never warn (`after` from [`crate::wait_warning`]).
    pub fn new(after: Option<Duration>) -> Option<LongWait> {
        let began = Instant::now();
        after.map(|after| LongWait {
            began,
            stopped: Duration::ZERO,
            next: Deadline::new(began + after),
        })
    }

    /// When it next warns (moved on by time this process was stopped).
    pub fn at(&self) -> Instant {
        self.next.at()
    }

    /// When a wait that sleeps should look at [`due`](Self::due) next: at
    /// its warning, and at least every 100 ms, since a longer time between
    /// two looks is taken for time this process was stopped, which does
    /// not count.
    pub fn next_look(&self) -> Instant {
        self.at().min(Instant::now() + Duration::from_millis(100))
    }

    /// How long it has waited, when it is time to warn: the next warning
    /// comes once it has waited twice as long.
    pub fn due(&mut self) -> Option<Duration> {
        if !self.next.passed() {
            return None;
        }
        self.stopped += self.next.stopped();
        let waited = self.began.elapsed().saturating_sub(self.stopped);
        self.next = Deadline::new(Instant::now() + waited.max(Duration::from_millis(1)));
        Some(waited)
    }
}

/// Rank 0's warning that a collective step it gathers has waited `waited`
/// for the ranks `missing`.
pub(crate) fn step_waits_for(waited: Duration, missing: &[usize]) -> String {
    format!(
        "a collective step has waited {:.0} s and goes on waiting; not taken yet by {}: failed, stopped, or not making the same call (every rank of the communicator makes each collective call, as sode_exchange_commit, in the same order; {WAIT_WARN_VAR} sets when this warns)",
        waited.as_secs_f64(),
        name_ranks(missing)
    )
}

/// Another rank's warning that a collective step it took has waited
/// `waited` for rank 0's answer.
pub(crate) fn step_waits_for_root(waited: Duration) -> String {
    format!(
        "a collective step has waited {:.0} s for rank 0's answer and goes on waiting: this rank took it, and rank 0, which gathers each step, names the ranks that have not ({WAIT_WARN_VAR} sets when this warns)",
        waited.as_secs_f64()
    )
}

/// "rank 2", or "ranks 2, 5, 7 and 3 more" (at most 16 named).
pub(crate) fn name_ranks(ranks: &[usize]) -> String {
    const NAMED: usize = 16;
    let listed: Vec<String> = ranks.iter().take(NAMED).map(ToString::to_string).collect();
    let more = ranks.len().saturating_sub(NAMED);
    match (ranks.len(), more) {
        (1, _) => format!("rank {}", listed[0]),
        (_, 0) => format!("ranks {}", listed.join(", ")),
        _ => format!("ranks {} and {more} more", listed.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_warns_after_its_delay_then_each_time_the_wait_doubles() {
        assert!(LongWait::new(None).is_none());
        let ms = Duration::from_millis;
        let mut w = LongWait::new(Some(ms(40))).unwrap();
        assert_eq!(w.due(), None);
        let mut warned = Vec::new();
        let began = Instant::now();
        while warned.len() < 3 && began.elapsed() < Duration::from_secs(10) {
            if let Some(waited) = w.due() {
                warned.push(waited);
            }
            std::thread::sleep(ms(1));
        }
        // At 40 ms or a little later, then at twice each wait or later.
        assert_eq!(warned.len(), 3, "{warned:?}");
        assert!(warned[0] >= ms(40), "{warned:?}");
        assert!(
            warned[1] >= 2 * warned[0] && warned[2] >= 2 * warned[1],
            "{warned:?}"
        );
        assert!(warned[2] < Duration::from_secs(5), "{warned:?}");
    }
}
