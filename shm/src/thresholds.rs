//! The message sizes at which the data paths cross over, measured at start-up
//! on this machine (in this process, with the channel's own ring and copy
//! code), overridable by the environment or the builder.

use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::caps::cma_read;
use crate::error::{Result, ShmError};
use crate::ring::{Kind, Record, RingLayout, RingRx, RingTx};
use crate::sys::shared::SharedMap;

/// Crossover sizes used by the automatic path choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Messages up to this many bytes go eager when the receive buffer can be
    /// a window; larger ones are window puts.
    pub eager_max: usize,
    /// Messages of at least this many bytes use the get path when the
    /// receiver keeps its buffer private; smaller ones go eager.
    pub get_min: usize,
    /// True when measured, false when set by hand.
    pub measured: bool,
}

const SIZES: [usize; 12] = [
    64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072,
];

/// Best-of-`trials` time per operation in nanoseconds.
fn time_ns(trials: usize, reps: usize, mut op: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..trials {
        let t = Instant::now();
        for _ in 0..reps {
            op();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / reps as f64);
    }
    best
}

fn reps_for(size: usize) -> usize {
    (2_000_000 / (size + 256)).clamp(4, 2000)
}

impl Thresholds {
    /// Measures the crossovers in this process: an eager transfer (push
    /// through a ring in fragments, then copy out), a window put (one copy
    /// plus the credit and arrival flags), and a get (cross-memory-attach
    /// read plus the request and done records). Takes a few milliseconds.
    pub fn measure() -> Thresholds {
        let cap = 64 * 1024u64;
        let layout = RingLayout {
            base: 0,
            capacity: cap,
        };
        let max_frag = layout.max_payload() as usize;
        let largest = *SIZES.last().unwrap_or(&65536);
        let (Ok(ring_map), Ok(window)) = (
            SharedMap::anonymous(RingLayout::footprint(cap) as usize),
            SharedMap::anonymous(largest + 256),
        ) else {
            return Thresholds::fallback();
        };
        let src: Vec<u8> = (0..largest).map(|i| i as u8).collect();
        let mut dst = vec![0u8; largest];
        let mut tx = RingTx::new(layout);
        let mut rx = RingRx::new(layout);
        let pid = std::process::id() as i32;
        let cma_ok = cma_read(pid, src.as_ptr() as u64, &mut dst[..8]).is_ok();
        let mut eager_ns = Vec::new();
        let mut window_ns = Vec::new();
        let mut get_ns = Vec::new();
        for &size in &SIZES {
            let reps = reps_for(size);
            let eager = time_ns(3, reps, || {
                let mut off = 0;
                while off < size {
                    let n = (size - off).min(max_frag);
                    let rec = Record {
                        kind: Kind::Eager,
                        tag: 0,
                        seq: 0,
                        a: off as u64,
                        b: n as u64,
                    };
                    let pushed = tx.try_push(&ring_map, &rec, &src[off..off + n]);
                    if let Ok(Some(p)) = rx.peek(&ring_map) {
                        let _ = ring_map.read(p.payload_at, &mut dst[off..off + n]);
                        let _ = rx.consume(&ring_map, &p);
                    }
                    if !matches!(pushed, Ok(true)) {
                        break;
                    }
                    off += n;
                }
                black_box(&dst);
            });
            let flags = window.atomic(largest as u64 + 128);
            let window_t = time_ns(3, reps, || {
                if let Ok(f) = &flags {
                    black_box(f.load(Ordering::Acquire));
                    let _ = window.write(0, &src[..size]);
                    f.store(1, Ordering::Release);
                    black_box(f.load(Ordering::Acquire));
                }
            });
            let control = Record {
                kind: Kind::ReceiveDone,
                tag: 0,
                seq: 0,
                a: 0,
                b: 0,
            };
            let get = if cma_ok {
                time_ns(3, reps, || {
                    for _ in 0..2 {
                        let _ = tx.try_push(&ring_map, &control, &[]);
                        if let Ok(Some(p)) = rx.peek(&ring_map) {
                            let _ = rx.consume(&ring_map, &p);
                        }
                    }
                    let _ = cma_read(pid, src.as_ptr() as u64, &mut dst[..size]);
                    black_box(&dst);
                })
            } else {
                f64::INFINITY
            };
            eager_ns.push(eager);
            window_ns.push(window_t);
            get_ns.push(get);
        }
        // The largest size up to which eager is no slower than a window put
        // (0 if never), and the smallest from which get beats eager for good.
        let mut eager_max = 0;
        for (i, &s) in SIZES.iter().enumerate() {
            if eager_ns[i] <= window_ns[i] {
                eager_max = s;
            } else {
                break;
            }
        }
        let mut get_min = usize::MAX;
        for i in (0..SIZES.len()).rev() {
            if get_ns[i] < eager_ns[i] {
                get_min = SIZES[i];
            } else {
                break;
            }
        }
        if get_min == usize::MAX {
            get_min = largest * 2;
        }
        Thresholds {
            eager_max,
            get_min,
            measured: true,
        }
    }

    fn fallback() -> Thresholds {
        Thresholds {
            eager_max: 256,
            get_min: 32 * 1024,
            measured: false,
        }
    }

    /// Measured thresholds with `SODE_SHM_EAGER_MAX` / `SODE_SHM_GET_MIN`
    /// (bytes) applied on top.
    pub fn from_env_or_measure() -> Result<Thresholds> {
        let parse = |name: &str| -> Result<Option<usize>> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| ShmError::InvalidSetting {
                        name: name.into(),
                        value: v,
                        why: "expected a size in bytes".into(),
                    }),
                Err(_) => Ok(None),
            }
        };
        let eager = parse("SODE_SHM_EAGER_MAX")?;
        let get = parse("SODE_SHM_GET_MIN")?;
        let mut t = if eager.is_some() && get.is_some() {
            Thresholds {
                eager_max: 0,
                get_min: 0,
                measured: false,
            }
        } else {
            Thresholds::measure()
        };
        if let Some(e) = eager {
            t.eager_max = e;
            t.measured = false;
        }
        if let Some(g) = get {
            t.get_min = g;
            t.measured = false;
        }
        Ok(t)
    }
}
