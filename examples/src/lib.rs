//! Examples of sode; see `examples/`.
