//! Sleeping on a word of shared memory until another process changes it
//! (Linux futexes, the shared — not process-private — kind, so a word in a
//! segment mapped by several processes works across them).

use std::io;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The futex word: the low 32 bits of `word`.
fn low_half(word: &AtomicU64) -> *const u32 {
    let base = word as *const AtomicU64 as *const u32;
    if cfg!(target_endian = "big") {
        base.wrapping_add(1)
    } else {
        base
    }
}

/// Sleeps while the low 32 bits of `word` equal those of `seen`, at most
/// `timeout`, or until a [`wake`]. Returns early, without error, on a
/// wake, a changed word, a signal or the timeout: callers re-check their
/// condition.
pub(crate) fn wait(word: &AtomicU64, seen: u64, timeout: Duration) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits every c_long.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the word is a live, 4-aligned u32 inside `word`; the kernel
    // only reads it and compares. `ts` outlives the call; the unused
    // arguments of FUTEX_WAIT are ignored.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAIT,
            seen as u32,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Wakes every process sleeping in [`wait`] on `word`.
pub(crate) fn wake(word: &AtomicU64) -> io::Result<()> {
    // SAFETY: as in `wait`; FUTEX_WAKE does not even read the word.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_sleeper_wakes_on_a_wake_and_not_before_its_timeout_otherwise() {
        let word = Arc::new(AtomicU64::new(7));
        let t = Instant::now();
        wait(&word, 7, Duration::from_millis(30)).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(25),
            "slept to its timeout"
        );
        // A changed word: no sleep at all.
        let t = Instant::now();
        wait(&word, 8, Duration::from_secs(5)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(1));
        let w2 = word.clone();
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            while w2.load(Ordering::Acquire) == 7 {
                wait(&w2, 7, Duration::from_secs(10)).unwrap();
            }
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(20));
        word.fetch_add(1, Ordering::AcqRel);
        wake(&word).unwrap();
        let slept = sleeper.join().unwrap();
        assert!(
            slept < Duration::from_secs(5),
            "woken, not timed out: {slept:?}"
        );
    }
}
