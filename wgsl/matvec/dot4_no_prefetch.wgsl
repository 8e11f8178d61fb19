// Included after dot4.wgsl by the per-type files that do not split their slices (see
// dot4_prefetch.wgsl): the driver's calls to `rows_prefetched` and `columns_at_once`
// are dead code for them, and a route asking them for PREFETCH or for columns at once
// fails to compile rather than compute nothing.
const_assert !PREFETCH;
const_assert COLUMNS_AT_ONCE == 1u;

fn rows_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {}

fn columns_at_once(rb: u32, ok: bool, c0: u32, n: u32, row: u32, tl: u32, lanes: u32) {}

fn staged_columns(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {}
