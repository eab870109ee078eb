//! Informer benchmarks (placeholder).

fn main() {}
