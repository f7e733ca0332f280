//! hwqos-loadgen agent (thin binary over its library crate).
fn main() {}
