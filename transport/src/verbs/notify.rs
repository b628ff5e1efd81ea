//! Sleeping until a completion queue has work: a completion channel that
//! the exchange's queues report to, armed with `ibv_req_notify_cq` before
//! a last poll, then waited on with `ppoll` on its descriptor; each event
//! is taken with `ibv_get_cq_event` and acknowledged at once (a queue with
//! unacknowledged events cannot be destroyed).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rdma_mummy_sys::{ibv_ack_cq_events, ibv_cq, ibv_get_cq_event, ibv_req_notify_cq};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue};
use sideway::ibverbs::device_context::DeviceContext;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Peers' links one sleep watches at most.
pub(crate) const WATCH_MAX: usize = 32;

/// A completion channel, its descriptor non-blocking.
#[derive(Debug)]
pub(crate) struct CqEvents {
    channel: Arc<CompletionChannel>,
}

impl CqEvents {
    pub(crate) fn new(ctx: &Arc<DeviceContext>) -> io::Result<CqEvents> {
        let channel = CompletionChannel::new(ctx).map_err(io::Error::other)?;
        channel.set_nonblocking(true)?;
        Ok(CqEvents { channel })
    }

    /// The channel, for queues to be created reporting to it.
    pub(crate) fn channel(&self) -> &Arc<CompletionChannel> {
        &self.channel
    }

    /// Asks for an event at `cq`'s next completion (poll it once more
    /// afterwards: one that came before is not reported).
    pub(crate) fn arm(&self, cq: &BasicCompletionQueue) -> io::Result<()> {
        // SAFETY: the queue is live for the borrow of `cq`.
        let rc = unsafe { ibv_req_notify_cq(cq.cq().as_ptr(), 0) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    /// Sleeps until an armed queue reports, one of `links` reports its
    /// peer gone (`POLLRDHUP`, `POLLHUP`, `POLLERR`), `verdict` turns
    /// readable (the job found a rank dead) or `timeout` passes, then takes
    /// and acknowledges every event waiting. Watches the first
    /// [`WATCH_MAX`] links. Returns whether a link or the verdict reported;
    /// returns early, without error, on a signal.
    pub(crate) fn sleep<'a>(
        &self,
        timeout: Duration,
        verdict: Option<BorrowedFd<'a>>,
        links: impl Iterator<Item = BorrowedFd<'a>>,
    ) -> io::Result<bool> {
        let watch = |fd: i32, events: i16| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // Unused slots hold -1, which poll skips.
        let mut fds = [watch(-1, 0); 2 + WATCH_MAX];
        fds[0] = watch(self.channel.as_raw_fd(), libc::POLLIN);
        if let Some(v) = verdict {
            fds[1] = watch(v.as_raw_fd(), libc::POLLIN);
        }
        for (slot, link) in fds[2..].iter_mut().zip(links) {
            *slot = watch(link.as_raw_fd(), libc::POLLRDHUP);
        }
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits every c_long.
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of its length, `ts` a valid
        // timespec, no signal mask.
        let rc = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        let link_reported = fds[1..].iter().any(|f| f.revents != 0);
        self.take_events()?;
        Ok(link_reported)
    }

    /// Takes and acknowledges every event waiting on the channel.
    fn take_events(&self) -> io::Result<()> {
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut cq_context = std::ptr::null_mut();
            // SAFETY: the channel is live for `&self`; both out-pointers
            // are valid. Non-blocking: -1 (EAGAIN) when no event waits.
            let rc = unsafe {
                ibv_get_cq_event(
                    self.channel.comp_channel().as_ptr(),
                    &mut cq,
                    &mut cq_context,
                )
            };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
                    _ => Err(e),
                };
            }
            // SAFETY: `cq` is the live queue the event came from (ours,
            // alive while this channel's exchange is).
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
    }
}
