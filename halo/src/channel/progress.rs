//! Exchanges in flight progress each other. A channel may need its own
//! rank to act after `start` (a TCP send larger than the socket buffers, a
//! shared-memory window not yet free, an RDMA write waiting for its
//! credit); were it moved only in its own exchange's `test` and `wait`, two
//! ranks that wait for two exchanges in opposite orders would each sit in
//! one while the other waits for it in the other. So every exchange
//! started in the process enlists its channels here until it completes,
//! and a rank polling one exchange also passes over the others' channels:
//! MPI's progress rule, without a thread of its own unless
//! `SODE_PROGRESS` asks for one (which makes the same passes).
//!
//! One list for the process, each channel behind its own lock: a C or
//! Fortran code may start an exchange on one thread and wait for it on
//! another (one at a time, as `MPI_THREAD_SERIALIZED` allows), and a pass
//! skips a channel another thread is using.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use super::Channel;
use crate::error::{HaloError, Result};

/// A channel, with what passes made by other exchanges found.
#[derive(Debug)]
struct Slot {
    channel: Box<dyn Channel>,
    /// Complete this iteration.
    done: bool,
    /// An error a pass made for another exchange met: the owner's next
    /// poll reports it.
    failed: Option<HaloError>,
}

/// An enlisted channel: its exchange, the thread that started it, and the
/// slot while it lives.
struct Enlisted {
    owner: u64,
    thread: ThreadId,
    slot: Weak<Mutex<Slot>>,
}

/// The channels enlisted, and room for every live exchange's: an
/// exchange reserves its share when it is built, so that enlisting it
/// never grows the list (the hot path allocates nothing, whatever other
/// threads start).
struct List {
    entries: Vec<Enlisted>,
    /// Channels of the live exchanges.
    reserved: usize,
}

static IN_FLIGHT: Mutex<List> = Mutex::new(List {
    entries: Vec::new(),
    reserved: 0,
});

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// Exchanges enlisted: while it is 1 (the caller's own), a pass over the
/// others costs one atomic load, and no lock.
static ENLISTED: AtomicUsize = AtomicUsize::new(0);

/// The list, whatever a thread that panicked while holding it left: its
/// entries are plain values, valid in any state.
fn in_flight() -> MutexGuard<'static, List> {
    IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner())
}

/// A slot's lock, whatever a panicking holder left.
fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// A slot's lock unless another thread holds it.
fn try_lock(slot: &Mutex<Slot>) -> Option<MutexGuard<'_, Slot>> {
    match slot.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Two channels of an exchange borrowed at once: the one lending the
/// shared sets and another.
pub(crate) struct Pair<'a> {
    pub lender: &'a mut Box<dyn Channel>,
    pub other: &'a mut Box<dyn Channel>,
}

/// One exchange's channels, numbered as its routes number them.
#[derive(Debug)]
pub(crate) struct Channels {
    owner: u64,
    /// Whether its channels are in the list (counted in [`ENLISTED`]).
    enlisted: AtomicBool,
    slots: Vec<Arc<Mutex<Slot>>>,
}

impl Channels {
    pub(crate) fn new(channels: Vec<Box<dyn Channel>>) -> Self {
        let mut list = in_flight();
        list.reserved += channels.len();
        let room = list.reserved.saturating_sub(list.entries.len());
        list.entries.reserve(room);
        drop(list);
        Channels {
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            enlisted: AtomicBool::new(false),
            slots: channels
                .into_iter()
                .map(|channel| {
                    Arc::new(Mutex::new(Slot {
                        channel,
                        done: false,
                        failed: None,
                    }))
                })
                .collect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Channel `c`, to read.
    pub(crate) fn with<R>(&self, c: usize, read: impl FnOnce(&dyn Channel) -> R) -> Option<R> {
        let slot = lock(self.slots.get(c)?);
        Some(read(slot.channel.as_ref()))
    }

    /// Each channel, read in turn.
    pub(crate) fn each<R>(&self, read: impl Fn(&dyn Channel) -> R) -> Vec<R> {
        (0..self.len())
            .filter_map(|c| self.with(c, &read))
            .collect()
    }

    /// Channel `c`, for as long as `self` is borrowed: with no pass of
    /// another exchange able to reach it (it leaves the list).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] naming `op` for a channel that is not there.
    pub(crate) fn get_mut(&mut self, op: &'static str, c: usize) -> Result<&mut Box<dyn Channel>> {
        let n = self.len();
        self.slots
            .get_mut(c)
            .and_then(slot_mut)
            .ok_or_else(|| HaloError::Usage {
                op,
                why: format!("channel {c} of {n} is out of reach"),
            })
    }

    /// Channel `lender` and channel `other` (another one) at once.
    pub(crate) fn pair_mut(&mut self, lender: usize, other: usize) -> Option<Pair<'_>> {
        if lender == other || lender.max(other) >= self.len() {
            return None;
        }
        let (low, high) = self.slots.split_at_mut(lender.max(other));
        let (first, second) = (
            slot_mut(&mut low[lender.min(other)])?,
            slot_mut(&mut high[0])?,
        );
        Some(if lender < other {
            Pair {
                lender: first,
                other: second,
            }
        } else {
            Pair {
                lender: second,
                other: first,
            }
        })
    }

    /// Every channel, in turn, to change.
    pub(crate) fn for_each_mut(
        &mut self,
        op: &'static str,
        mut change: impl FnMut(&mut Box<dyn Channel>) -> Result<()>,
    ) -> Result<()> {
        for c in 0..self.len() {
            change(self.get_mut(op, c)?)?;
        }
        Ok(())
    }

    /// After every channel started: none complete, each enlisted for the
    /// passes of the process's other exchanges until
    /// [`withdraw`](Self::withdraw). Allocates nothing once the list has
    /// grown to the most channels in flight at once.
    pub(crate) fn enlist(&mut self) {
        for s in &mut self.slots {
            // Not enlisted yet: the exchange holds its slots alone, and
            // resets them without a lock.
            let mut locked;
            let slot = match Arc::get_mut(s) {
                Some(m) => m.get_mut().unwrap_or_else(|p| p.into_inner()),
                None => {
                    locked = lock(s);
                    &mut *locked
                }
            };
            slot.done = false;
            slot.failed = None;
        }
        let (owner, thread) = (self.owner, std::thread::current().id());
        let mut list = in_flight();
        list.drop_entries(owner);
        if !self.enlisted.swap(true, Ordering::AcqRel) {
            // SeqCst against the progress thread's going to sleep.
            ENLISTED.fetch_add(1, Ordering::SeqCst);
            wake_progress_thread();
        }
        list.entries.extend(self.slots.iter().map(|s| Enlisted {
            owner,
            thread,
            slot: Arc::downgrade(s),
        }));
    }

    /// Leaves the list (at completion or failure).
    pub(crate) fn withdraw(&self) {
        if self.enlisted.swap(false, Ordering::AcqRel) {
            withdraw(self.owner);
            ENLISTED.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether channel `c` completed this iteration.
    pub(crate) fn done(&self, c: usize) -> bool {
        self.slots.get(c).is_some_and(|s| lock(s).done)
    }

    /// Channels not complete this iteration.
    pub(crate) fn pending(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter(|&c| !self.done(c))
    }

    /// A pass over channel `c` unless complete: whether it is now, or the
    /// error a pass (this one or another exchange's) met.
    pub(crate) fn test(&self, c: usize) -> Result<bool> {
        let Some(s) = self.slots.get(c) else {
            return Ok(true);
        };
        let mut slot = lock(s);
        if let Some(e) = slot.failed.take() {
            return Err(e);
        }
        if !slot.done {
            slot.done = slot.channel.test()?;
        }
        Ok(slot.done)
    }

    /// Channel `c`'s park (see [`Channel::park`]), recording completion.
    /// A channel another thread's pass completed (or failed) since the
    /// caller looked is not parked: a complete channel has nothing left to
    /// sleep for, and RDMA's refuses a park once complete.
    pub(crate) fn park(&self, c: usize, until: std::time::Instant) -> Option<Result<bool>> {
        let mut slot = lock(self.slots.get(c)?);
        if let Some(e) = slot.failed.take() {
            return Some(Err(e));
        }
        if slot.done {
            return Some(Ok(true));
        }
        let parked = slot.channel.park(until)?;
        if let Ok(done) = parked {
            slot.done = done;
        }
        Some(parked)
    }

    /// One pass over the channels the process's other exchanges have in
    /// flight (but those another thread is using just then): whether one
    /// this thread started is still incomplete, so that it must not sleep
    /// on a channel of its own. Errors are kept for their owners.
    pub(crate) fn progress_others(&self) -> bool {
        let mine = usize::from(self.enlisted.load(Ordering::Acquire));
        if ENLISTED.load(Ordering::Acquire) <= mine {
            return false;
        }
        let (owner, thread) = (self.owner, std::thread::current().id());
        // Passes of several threads take turns; a thread that finds the
        // list busy makes none this time round.
        let Some(list) = try_list() else {
            return false;
        };
        let mut pending = false;
        for e in list.entries.iter().filter(|e| e.owner != owner) {
            pending |= pass(e) && e.thread == thread;
        }
        pending
    }
}

impl Drop for Channels {
    fn drop(&mut self) {
        self.withdraw();
        let mut list = in_flight();
        list.reserved = list.reserved.saturating_sub(self.slots.len());
    }
}

/// The list, unless another thread holds it.
fn try_list() -> Option<MutexGuard<'static, List>> {
    match IN_FLIGHT.try_lock() {
        Ok(list) => Some(list),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// One pass over an enlisted channel, unless another thread is using it
/// or it is complete: whether it is still incomplete. Its error is kept
/// for its owner. Called with the list held: the slot is upgraded and
/// dropped under it, so that once its owner has withdrawn, no pass holds
/// it.
fn pass(e: &Enlisted) -> bool {
    let Some(slot) = e.slot.upgrade() else {
        return false;
    };
    let Some(mut slot) = try_lock(&slot) else {
        return false;
    };
    if slot.done || slot.failed.is_some() {
        return false;
    }
    match slot.channel.test() {
        Ok(done) => slot.done = done,
        Err(e) => slot.failed = Some(e),
    }
    !slot.done
}

/// What `SODE_PROGRESS` asks for: `thread` (a pass every 50 us) or
/// `thread:MICROSECONDS` runs a thread that passes over every exchange in
/// flight in the process, so that data moves while the ranks compute or
/// sit in MPI between `start` and `wait`; unset or `off`, exchanges move
/// in the ranks' own sode calls only.
pub const PROGRESS_VAR: &str = "SODE_PROGRESS";

/// The progress thread, once started (to wake).
static PROGRESS_THREAD: Mutex<Option<std::thread::Thread>> = Mutex::new(None);
/// Whether the progress thread sleeps until an exchange is enlisted.
static PROGRESS_ASLEEP: AtomicBool = AtomicBool::new(false);
/// Nothing in flight for this long, the progress thread sleeps until an
/// exchange is enlisted: a process between exchanges (computing, writing
/// output) pays nothing for it. Looking every 50 us instead took 17 % of
/// a core (`halo/tests/progress_thread.rs`).
const PARK_AFTER: Duration = Duration::from_millis(1);

/// Wakes the progress thread if it sleeps; one load when it does not.
fn wake_progress_thread() {
    if PROGRESS_ASLEEP.load(Ordering::SeqCst) && PROGRESS_ASLEEP.swap(false, Ordering::SeqCst) {
        // Set before the thread could first sleep: it was stored under
        // this lock as the thread was spawned.
        let thread = PROGRESS_THREAD.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = thread.as_ref() {
            t.unpark();
        }
    }
}

/// The progress thread: a pass over every exchange in flight each
/// `interval`, asleep while there is none (after [`PARK_AFTER`]).
fn progress_loop(interval: Duration) {
    let mut idle = Duration::ZERO;
    loop {
        if ENLISTED.load(Ordering::SeqCst) > 0 {
            idle = Duration::ZERO;
            if let Some(list) = try_list() {
                list.entries.iter().for_each(|e| {
                    pass(e);
                });
            }
        } else if idle >= PARK_AFTER {
            idle = Duration::ZERO;
            PROGRESS_ASLEEP.store(true, Ordering::SeqCst);
            // An exchange enlisted before the flag was raised is seen
            // here; one enlisted after it finds the flag and wakes us.
            if ENLISTED.load(Ordering::SeqCst) == 0 {
                std::thread::park();
            }
            PROGRESS_ASLEEP.store(false, Ordering::SeqCst);
            continue;
        } else {
            idle += interval;
        }
        std::thread::sleep(interval);
    }
}

/// Starts the process's progress thread (once) if `SODE_PROGRESS` asks
/// for it.
///
/// # Errors
/// A value `SODE_PROGRESS` does not take, or a thread that cannot be
/// started, in words.
pub(crate) fn progress_from_env() -> std::result::Result<(), String> {
    let Some(value) = std::env::var_os(PROGRESS_VAR) else {
        return Ok(());
    };
    let Some(us) = progress_interval(&value.to_string_lossy())? else {
        return Ok(());
    };
    let mut thread = PROGRESS_THREAD.lock().unwrap_or_else(|p| p.into_inner());
    if thread.is_none() {
        let interval = Duration::from_micros(us);
        let spawned = std::thread::Builder::new()
            .name("sode-progress".into())
            .spawn(move || progress_loop(interval))
            .map_err(|e| format!("{PROGRESS_VAR}: the progress thread cannot start: {e}"))?;
        *thread = Some(spawned.thread().clone());
    }
    Ok(())
}

/// The interval in microseconds a `SODE_PROGRESS` value asks for
/// (`None`: no thread).
fn progress_interval(value: &str) -> std::result::Result<Option<u64>, String> {
    match value.trim() {
        "" | "off" => Ok(None),
        "thread" => Ok(Some(50)),
        v => v
            .strip_prefix("thread:")
            .and_then(|us| us.parse::<u64>().ok())
            .filter(|us| (1..=1_000_000).contains(us))
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "{PROGRESS_VAR}={value}: use off, thread or thread:MICROSECONDS (1 to 1000000)"
                )
            }),
    }
}

/// Removes `owner`'s channels (and any whose exchange is gone) from the
/// list.
fn withdraw(owner: u64) {
    in_flight().drop_entries(owner);
}

impl List {
    /// Drops `owner`'s entries, and any whose exchange is gone.
    fn drop_entries(&mut self, owner: u64) {
        self.entries
            .retain(|e| e.owner != owner && e.slot.strong_count() > 0);
    }
}

/// The slot's channel, once no pass of another exchange can reach it.
fn slot_mut(slot: &mut Arc<Mutex<Slot>>) -> Option<&mut Box<dyn Channel>> {
    if Arc::weak_count(slot) > 0 {
        let gone = Arc::as_ptr(slot);
        in_flight().entries.retain(|e| e.slot.as_ptr() != gone);
    }
    let slot = Arc::get_mut(slot)?.get_mut();
    Some(&mut slot.unwrap_or_else(|p| p.into_inner()).channel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Locality;
    use std::time::{Duration, Instant};

    /// A channel complete at its first pass, whose park fails once it is
    /// complete, as RDMA's does.
    #[derive(Debug, Default)]
    struct OnePass {
        complete: bool,
    }

    impl Channel for OnePass {
        fn locality(&self) -> Locality {
            Locality::Tcp
        }
        fn send_buf(&mut self, _: usize) -> Result<&mut [u8]> {
            Ok(&mut [])
        }
        fn recv_buf(&self, _: usize) -> Result<&[u8]> {
            Ok(&[])
        }
        fn start(&mut self) -> Result<()> {
            self.complete = false;
            Ok(())
        }
        fn test(&mut self) -> Result<bool> {
            self.complete = true;
            Ok(true)
        }
        fn outstanding(&self) -> String {
            String::new()
        }
        fn park(&mut self, _: Instant) -> Option<Result<bool>> {
            Some(if self.complete {
                Err(HaloError::Usage {
                    op: "park",
                    why: "parked after completion".into(),
                })
            } else {
                Ok(true)
            })
        }
    }

    #[test]
    fn a_channel_another_pass_completed_is_not_parked() {
        let mut owner = Channels::new(vec![Box::new(OnePass::default())]);
        let mut other = Channels::new(vec![Box::new(OnePass::default())]);
        owner.get_mut("start", 0).unwrap().start().unwrap();
        owner.enlist();
        other.enlist();
        // The owner saw channel 0 pending; another exchange's pass (as on
        // another thread) completes it before the owner parks.
        assert_eq!(owner.pending().collect::<Vec<_>>(), vec![0]);
        // Other tests' passes may hold the list a moment.
        for _ in 0..1000 {
            other.progress_others();
            if owner.done(0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(owner.done(0), "the pass completed the owner's channel");
        let parked = owner.park(0, Instant::now() + Duration::from_secs(1));
        assert!(matches!(parked, Some(Ok(true))), "{parked:?}");
        owner.withdraw();
        other.withdraw();
    }

    #[test]
    fn progress_takes_off_thread_and_an_interval_and_names_what_it_refuses() {
        assert_eq!(progress_interval("off"), Ok(None));
        assert_eq!(progress_interval(""), Ok(None));
        assert_eq!(progress_interval("thread"), Ok(Some(50)));
        assert_eq!(progress_interval(" thread:200 "), Ok(Some(200)));
        for bad in ["on", "thread:0", "thread:2000000", "thread:x", "threads"] {
            let e = progress_interval(bad).unwrap_err();
            assert!(
                e.contains(bad) && e.contains("use off, thread"),
                "{bad}: {e}"
            );
        }
    }
}
