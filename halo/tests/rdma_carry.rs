//! Shortened RDMA writes on a real device (rxe0 in the SoftRoCE guest):
//! `PersistentWrites::carry` makes a write put only its first bytes on the
//! wire, so an exchange of some fields or fewer layers moves only those.
//! The bytes past the carried length must keep what an earlier iteration
//! left in the receiver's window (had they travelled, they would hold this
//! iteration's pattern), and a write cut to nothing must still deliver its
//! chain's immediate. And since a shortened message no longer tells its
//! receiver how long it is, each write carries the shape of its start
//! (which fields, what depth): ranks that started different parts of an
//! exchange are told, not handed data laid out otherwise. Two ranks as
//! two threads of this process, over loopback. Without an RDMA device it
//! says so (and fails under `SODE_REQUIRE_RDMA`).

use std::time::Duration;

use sode::Transport;
use sode_job::World;
use sode_transport::{
    BufferId, Device, DeviceSelector, PersistentWrites, RdmaExchangeBuilder, TransportError,
    WindowId, Write,
};

mod common;
use common::{free_port, rdma_available, thread_world, told_apart};

const LEN: usize = 8192;
const HALF: usize = LEN / 2;

/// Rank 0 writes `LEN` bytes into rank 1's one-slot window as two writes
/// on one engine (commands 0 and 1: the first and the second half).
fn exchange(w: &World) -> (PersistentWrites, BufferId, WindowId) {
    let dev = Device::open(&DeviceSelector::from_env().unwrap()).unwrap();
    let mut b = RdmaExchangeBuilder::new(&dev).engines(1);
    let src = b.buffer(LEN).unwrap();
    let home = b.buffer(LEN).unwrap();
    let window = if w.rank() == 1 {
        b.window_in_slots(home, 0, LEN, 1, &[0]).unwrap()
    } else {
        WindowId(0)
    };
    if w.rank() == 0 {
        for half in 0..2 {
            b.write(Write {
                peer: 1,
                engine: 0,
                src,
                src_offset: half * HALF,
                window,
                dst_offset: half * HALF,
                len: HALF,
            });
        }
    }
    (b.build(w, Duration::from_secs(30)).unwrap(), src, window)
}

/// Per iteration: the bytes each of the two writes carries.
const STEPS: [[usize; 2]; 5] = [[HALF, HALF], [100, 0], [HALF, 10], [0, 0], [HALF, HALF]];

/// What rank 1's window holds after each step: per byte, the iteration
/// (counted from 1) that last wrote it.
fn expected() -> Vec<Vec<u8>> {
    let mut window = vec![0u8; LEN];
    STEPS
        .iter()
        .enumerate()
        .map(|(i, carried)| {
            for (half, &n) in carried.iter().enumerate() {
                window[half * HALF..half * HALF + n].fill(i as u8 + 1);
            }
            window.clone()
        })
        .collect()
}

#[test]
fn shortened_writes_leave_the_rest_of_the_window_untouched() {
    if !rdma_available() {
        return;
    }
    let port = free_port();
    let writer = std::thread::spawn(move || {
        let w = thread_world(0, 2, port, "carry-test");
        let (mut x, src, _) = exchange(&w);
        // More than a write was planned with, or a command that does not
        // exist: refused, naming the command.
        let err = x.carry(0, HALF + 1).unwrap_err();
        assert!(
            matches!(err, TransportError::InvalidCommand { command: 0, .. }),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("{HALF} bytes")), "{err}");
        let err = x.carry(2, 1).unwrap_err();
        assert!(
            matches!(err, TransportError::InvalidCommand { command: 2, .. }),
            "{err}"
        );
        for (i, carried) in STEPS.iter().enumerate() {
            x.carry(0, carried[0]).unwrap();
            x.carry(1, carried[1]).unwrap();
            x.buffer_mut(src).unwrap().fill(i as u8 + 1);
            x.start().unwrap();
            // Not while the exchange is in flight.
            assert!(matches!(x.carry(0, 1), Err(TransportError::State { .. })));
            x.wait_for(Duration::from_secs(30)).unwrap();
        }
        w.barrier(Duration::from_secs(30)).unwrap();
    });
    let w = thread_world(1, 2, port, "carry-test");
    let (mut x, _, window) = exchange(&w);
    for (i, want) in expected().iter().enumerate() {
        x.start().unwrap();
        x.wait_for(Duration::from_secs(30)).unwrap();
        let got = x.window(window).unwrap();
        if let Some(at) = (0..LEN).find(|&k| got[k] != want[k]) {
            panic!(
                "step {i} ({:?} bytes carried): byte {at} holds {}, not {}",
                STEPS[i], got[at], want[at]
            );
        }
    }
    w.barrier(Duration::from_secs(30)).unwrap();
    writer.join().unwrap();
}

#[test]
fn ranks_that_start_other_fields_or_depths_are_told() {
    if !rdma_available() {
        return;
    }
    told_apart(Transport::Rdma);
}
