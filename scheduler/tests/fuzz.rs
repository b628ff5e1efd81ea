//! Fuzzing the parsers that read outside input: patterns, plans and QAPLIB
//! files. Each case mutates a seed from `tests/corpus/` (flips, inserts,
//! deletes and truncates bytes) or makes text from nothing, and feeds it to
//! the parser; whatever parses is planned, validated and simulated. Nothing
//! may panic, and each case must finish within a second. A case proptest
//! finds failing is kept in `proptest-regressions/` and replayed first.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use sode_scheduler::placement::parse_qaplib;
use sode_scheduler::{plan, simulate, Algorithm, Pattern, Plan};

const CORPUS: &[(&str, &str)] = &[
    (
        "pattern",
        include_str!("corpus/scale-les3-60-all8.pattern.json"),
    ),
    ("pattern", include_str!("corpus/halo3d-26.pattern.json")),
    (
        "plan",
        include_str!("corpus/scale-les3-60-all8.bl4.plan.json"),
    ),
    ("qaplib", include_str!("corpus/tiny3.qaplib")),
];

/// One edit of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    Flip {
        at: usize,
        bit: u8,
    },
    Insert {
        at: usize,
        byte: u8,
    },
    Delete {
        at: usize,
    },
    Truncate {
        at: usize,
    },
    /// Replaces a run of ASCII digits starting at `at` with `text`.
    Number {
        at: usize,
        text: String,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Edit::Insert { at, byte }),
        any::<usize>().prop_map(|at| Edit::Delete { at }),
        any::<usize>().prop_map(|at| Edit::Truncate { at }),
        (
            any::<usize>(),
            prop_oneof![
                Just("0".to_string()),
                Just("-1".to_string()),
                Just("1e308".to_string()),
                Just("18446744073709551615".to_string()),
                Just("NaN".to_string()),
                Just("4294967296".to_string()),
                "[0-9]{1,25}",
            ]
        )
            .prop_map(|(at, text)| Edit::Number { at, text }),
    ]
}

fn apply(seed: &str, edits: &[Edit]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for e in edits {
        let n = b.len().max(1);
        match e {
            Edit::Flip { at, bit } if !b.is_empty() => b[at % n] ^= 1 << bit,
            Edit::Insert { at, byte } => b.insert(at % (b.len() + 1), *byte),
            Edit::Delete { at } if !b.is_empty() => {
                b.remove(at % n);
            }
            Edit::Truncate { at } => b.truncate(at % (b.len() + 1)),
            Edit::Number { at, text } => {
                let start = (at % n..b.len()).find(|&i| b[i].is_ascii_digit());
                if let Some(s) = start {
                    let end = (s..b.len())
                        .find(|&i| !b[i].is_ascii_digit())
                        .unwrap_or(b.len());
                    b.splice(s..end, text.bytes());
                }
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Everything a user's file can reach: parse, and for what parses, plan,
/// validate and simulate.
fn exercise(kind: &str, text: &str) {
    let base = Pattern::from_json(CORPUS[0].1).expect("the corpus parses");
    match kind {
        "pattern" => {
            if let Ok(p) = Pattern::from_json(text) {
                // Large patterns are valid but slow to plan `auto`: the
                // quick algorithms still run on them.
                let alg = if p.requests.len() <= 32 {
                    Algorithm::Auto
                } else {
                    Algorithm::BottomLeft(1)
                };
                if let Ok(pl) = plan(&p, alg) {
                    pl.validate(&p).expect("a plan the scheduler made is valid");
                    simulate(&p, &pl).expect("a plan the scheduler made simulates");
                }
            }
        }
        "plan" => {
            if let Ok(pl) = Plan::from_json(text) {
                if pl.validate(&base).is_ok() {
                    let _ = simulate(&base, &pl);
                }
            }
        }
        _ => {
            if let Ok(q) = parse_qaplib(text) {
                let identity: Vec<usize> = (0..q.size()).collect();
                assert!(q.cost(&identity).is_finite() || q.size() > 0);
            }
        }
    }
}

fn timed(kind: &str, text: &str) {
    let t0 = Instant::now();
    exercise(kind, text);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "{kind} input took {:?}: {text:?}",
        t0.elapsed()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn mutated_corpus_inputs_never_panic_or_hang(
        seed in 0..CORPUS.len(),
        edits in prop::collection::vec(edit(), 1..8),
    ) {
        let (kind, text) = CORPUS[seed];
        timed(kind, &apply(text, &edits));
    }

    #[test]
    fn arbitrary_text_never_panics(kind in 0..3usize, text in "\\PC{0,200}") {
        timed(["pattern", "plan", "qaplib"][kind], &text);
    }
}

#[test]
fn the_corpus_itself_parses() {
    for (kind, text) in CORPUS {
        match *kind {
            "pattern" => drop(Pattern::from_json(text).unwrap()),
            "plan" => drop(Plan::from_json(text).unwrap()),
            _ => drop(parse_qaplib(text).unwrap()),
        }
        timed(kind, text);
    }
}
