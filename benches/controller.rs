//! Controller benchmarks (filled in with the controller issue).
fn main() {}
