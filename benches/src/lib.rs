//! Criterion benchmarks of sode; see `benches/`.
