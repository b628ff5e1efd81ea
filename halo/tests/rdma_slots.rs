//! Two-slot RDMA windows on a real device (rxe0 in the SoftRoCE guest):
//! with the credit a step ahead, a writer's data of iteration n + 1 is
//! already in the receiver's window when the receiver starts n + 1, and a
//! fast writer never overwrites the slot a slow receiver is still reading.
//! Two ranks as two threads of this process, over loopback. Without an
//! RDMA device it says so (and fails under `SODE_REQUIRE_RDMA`).

use std::time::Duration;

use sode_job::World;
use sode_transport::{Device, DeviceSelector, PersistentWrites, RdmaExchangeBuilder, Write};

mod common;
use common::{free_port, rdma_available, thread_world};

const LEN: usize = 4096;
const ITERS: u8 = 30;

/// Rank 0 writes `LEN` bytes into rank 1's window of `slots` slots.
fn exchange(
    w: &World,
    slots: usize,
) -> (
    PersistentWrites,
    sode_transport::BufferId,
    sode_transport::WindowId,
) {
    let dev = Device::open(&DeviceSelector::from_env().unwrap()).unwrap();
    let mut b = RdmaExchangeBuilder::new(&dev).engines(1);
    let src = b.buffer(LEN).unwrap();
    let home = b.buffer(LEN * slots).unwrap();
    let window = if w.rank() == 1 {
        b.window_in_slots(home, 0, LEN, slots, &[0]).unwrap()
    } else {
        sode_transport::WindowId(0)
    };
    if w.rank() == 0 {
        b.write(Write {
            peer: 1,
            engine: 0,
            src,
            src_offset: 0,
            window,
            dst_offset: 0,
            len: LEN,
        });
    }
    (b.build(w, Duration::from_secs(30)).unwrap(), src, window)
}

/// Iterations whose data was in place the moment the receiver started
/// them; panics if the slow receiver's data changed under it.
fn run(slots: usize) -> u32 {
    let port = free_port();
    let writer = std::thread::spawn(move || {
        let w = thread_world(0, 2, port, "slots-test");
        let (mut x, src, _) = exchange(&w, slots);
        for it in 1..=ITERS {
            x.buffer_mut(src).unwrap().fill(it);
            x.start().unwrap();
            x.wait_for(Duration::from_secs(30)).unwrap();
        }
        // Keep the queue pairs until the receiver is done too: with one
        // slot its last credit (for the last iteration) still needs this
        // side's acknowledgement, and a one-way exchange has no data back
        // to order it before the end. (A credit a step ahead is not waited
        // for.)
        w.barrier(Duration::from_secs(30)).unwrap();
    });
    let w = thread_world(1, 2, port, "slots-test");
    let (mut x, _, window) = exchange(&w, slots);
    let mut early = 0;
    for it in 1..=ITERS {
        x.start().unwrap();
        if x.test().unwrap() {
            early += 1;
        } else {
            x.wait_for(Duration::from_secs(30)).unwrap();
        }
        assert!(
            x.window(window).unwrap().iter().all(|&b| b == it),
            "iteration {it} arrived"
        );
        // Slow: meanwhile the writer may write it + 1, never over it.
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            x.window(window).unwrap().iter().all(|&b| b == it),
            "iteration {it} was overwritten while the receiver still read it ({slots} slots)"
        );
    }
    w.barrier(Duration::from_secs(30)).unwrap();
    writer.join().unwrap();
    early
}

#[test]
fn two_slots_let_the_data_arrive_before_the_receiver_starts() {
    if !rdma_available() {
        return;
    }
    let one = run(1);
    let two = run(2);
    println!(
        "data in place at the receiver's start: {one} of {ITERS} with one slot, {two} with two"
    );
    assert!(
        two >= u32::from(ITERS) / 2,
        "two slots: only {two} of {ITERS} early"
    );
    // With one slot the credit goes out at the receiver's start: the data
    // can beat the first poll only by chance.
    assert!(
        two >= one + u32::from(ITERS) / 3,
        "two slots ({two} early) no better than one ({one})"
    );
}
