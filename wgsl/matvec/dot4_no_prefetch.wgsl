// Appended to dot4.wgsl for a route without PREFETCH: the driver's call to
// `rows_prefetched` is then dead code, and this keeps the kernels whose per-type file
// does not split its slices (dot4_prefetch.wgsl) compiling as they were.
fn rows_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {}
