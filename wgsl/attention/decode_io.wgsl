// What both decode attention kernels (`attention/decode.wgsl` and
// `attention/decode_portable.wgsl`) take and write, in the same bindings, so one
// dispatch shape serves both. Each kernel names the element types it reads and writes
// them in (QRead, KvRead, OutWord: pairs, or 16-byte words); HD is the host's.
//
// A dispatch serves the rows of a step: row r (its q at r * q_stride of `q`, its output
// at r * out_stride of `out`, its partials after the r rows before it) attends to its
// sequence's cache rows as its entry of the row table says (`attention/rows.wgsl`). A
// lone sequence's step is the one-row case of the same shader, so its bits are the same
// whatever other rows share a step. The grid is (the most chunks of any row, KV heads,
// head groups * rows); a workgroup past its row's chunks does nothing.

#include "attention/rows.wgsl"

struct Params {
    n_kv_heads: u32,
    group: u32,   // query heads per KV head
    scale: f32,
    part_stride: u32, // partial slots per query head: the most chunks, rounded up to 32
    q_stride: u32,    // elements from one row's q to the next's
    out_stride: u32,  // elements from one row's output to the next's
    _pad1: u32,
    _pad2: u32,
}

// Where workgroup (c, kvh, row * head groups + hg) works: its row, that row's table
// entry, its chunk, KV head and head group, its first query head h0 and query heads (of
// the row), the query heads of the rows before, and its positions p0..p1 as cache rows
// (the sequence's region starts at cache_first). Past the row's chunks (`live` false)
// the workgroup leaves at once; the grid has the most chunks of any row.
struct Place {
    r: u32,
    row: AttRow,
    c: u32,
    kvh: u32,
    hg: u32,
    // Head groups per KV head.
    groups: u32,
    h0: u32,
    heads: u32,
    row_heads: u32,
    p0: u32,
    p1: u32,
    live: bool,
}

fn place_of(wid: vec3<u32>) -> Place {
    let groups = (params.group + G - 1u) / G;
    let r = wid.z / groups;
    let row = att_rows[r];
    let c = wid.x;
    let hg = wid.z % groups;
    let g0 = hg * G;
    let p0 = row.cache_first + row.window_first + c * row.chunk;
    let p1 = min(p0 + row.chunk, row.cache_first + row.pos + 1u);
    return Place(r, row, c, wid.y, hg, groups, wid.y * params.group + g0,
                 min(G, params.group - g0), r * params.n_kv_heads * params.group, p0, p1,
                 c < row.n_chunks);
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<QRead>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvRead>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvRead>;
// Per row r, query head h and chunk c, at (r * heads + h) * part_stride + c: (m, l). A
// head's slots start 256 bytes apart, so no cache line holds two heads' partials (see
// decode_merge).
// Elements of PartMl and PartAcc, the kernel's: pairs or words, or u32 atomics where the
// kernel merges in the dispatch itself (`decode_merge.wgsl`).
@group(0) @binding(4) var<storage, read_write> part_ml: array<PartMl>;
// Per row, query head and chunk (a slot, as in part_ml), HD values at slot * HD.
@group(0) @binding(5) var<storage, read_write> part_acc: array<PartAcc>;
@group(0) @binding(6) var<storage, read_write> out: array<OutWord>;
@group(0) @binding(7) var<storage, read> att_rows: array<AttRow>;

const HALF: u32 = HD / 2u;
