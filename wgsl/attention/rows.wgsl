// The row table of a decode step over many sequences (`AttentionRow` on the host): one
// entry per row of the step, written by the host each step. Row r's q, k and v are row r
// of the qkv rows; its sequence's cache rows are `cache_first + position`, and it attends
// to positions window_first..=pos in `n_chunks` chunks of `chunk` (the split a step of
// this row alone takes, so a row's reduction order never depends on the other rows).

struct AttRow {
    pos: u32,
    cache_first: u32,
    window_first: u32,
    chunk: u32,
    n_chunks: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
