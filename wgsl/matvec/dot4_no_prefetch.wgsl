// Included after dot4.wgsl by the per-type files that do not split their slices (see
// dot4_prefetch.wgsl): the driver's call to `rows_prefetched` is dead code for them,
// and a route asking them for PREFETCH fails to compile rather than compute nothing.
const_assert !PREFETCH;

fn rows_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {}
