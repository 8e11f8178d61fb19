const WG: u32 = 256u;
const HD: u32 = 128u;
const KV_ROW: u32 = 36u;
const G: u32 = 4u;
const TILE: u32 = 64u;
const ACC: u32 = 1u;

// KV cache in q8_0: each block of 32 values of a head's row is 32 int8 values q and a
// scale d = max|x| / 127, the values d * q (q = x / d rounded half away from zero, as
// ggml's quantize_row_q8_0). A cache row (one position's KV head of head_dim values) is
// head_dim / 4 words of four int8 values, then head_dim / 32 f32 scales, then padding
// to a multiple of four words (16 bytes): 36 words for a head of 128, where f16 takes 64.
// ggml keeps d as f16; here it is f32 in the same padded row, so d adds no error.

alias KvWord = u32;
// A head's value pairs in a q8_0 KV cache (`attention/kv_q8_0.wgsl`), for the kernels
// that read the cache a pair at a time: cache row `row` (position * n_kv_heads + KV
// head) is KV_ROW words, pair p in the half of word p / 2 that p % 2 says, its scale
// the f32 at word HD / 4 + p / 16. The includer declares `k_cache` and `v_cache` and
// sets HD and KV_ROW.
//
// As kv_rows.wgsl, a pair can be read in two steps: its raw words (the word holding it,
// the bits of its scale; zeros where there is no pair) then its values.

alias KvRaw = vec2<u32>;

fn q8_pair(word: u32, p: u32, d: f32) -> vec2<f32> {
    let q = vec4<f32>(unpack4xI8(word));
    return select(q.xy, q.zw, p % 2u == 1u) * d;
}

fn k_raw(row: u32, p: u32) -> KvRaw {
    let first = row * KV_ROW;
    return vec2<u32>(k_cache[first + p / 2u], k_cache[first + HD / 4u + p / 16u]);
}

fn v_raw(row: u32, p: u32) -> KvRaw {
    let first = row * KV_ROW;
    return vec2<u32>(v_cache[first + p / 2u], v_cache[first + HD / 4u + p / 16u]);
}

fn raw_pair(raw: KvRaw, p: u32) -> vec2<f32> {
    return q8_pair(raw.x, p, bitcast<f32>(raw.y));
}

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(k_raw(row, p), p);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(v_raw(row, p), p);
}
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
// Split-K decode attention without subgroups, for devices that have none: the same
// chunks, head groups, outputs and combine as `attention/decode.wgsl`.
//
// Positions go in tiles of TILE: the scores of a tile (query heads x positions) sit in
// workgroup memory, one invocation per query head folds them into its running max and
// sum (an online softmax), and the accumulators (query head x value pairs, ACC per
// invocation) are rescaled by exp(m_old - m_new) before the tile's weighted V rows are
// added.
//
// The host sets WG (invocations), TILE, HD (head_dim), G (query heads per workgroup;
// G <= WG), ACC (G * HD / 2 over WG, rounded up) and KV_ROW. The format includes give
// KvWord, k_pair and v_pair; the bindings are `attention/decode_io.wgsl`'s, a pair
// per element.

alias QRead = vec2<f32>;
alias KvRead = KvWord;
alias OutWord = vec2<f32>;
alias PartMl = vec2<f32>;
alias PartAcc = vec2<f32>;


var<workgroup> scores: array<f32, G * TILE>;
var<workgroup> run_max: array<f32, G>;
var<workgroup> run_sum: array<f32, G>;
var<workgroup> rescale: array<f32, G>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let pl = place_of(wid);
    if (!pl.live) {
        return;
    }
    let row = pl.row;
    let c = pl.c;
    let kvh = pl.kvh;
    let h0 = pl.h0;
    let heads = pl.heads;
    let row_heads = pl.row_heads;
    let p0 = pl.p0;
    let p1 = pl.p1;

    var acc: array<vec2<f32>, ACC>;
    for (var j = 0u; j < ACC; j++) {
        acc[j] = vec2<f32>(0.0);
    }
    if (lid < heads) {
        run_max[lid] = -3.0e38;
        run_sum[lid] = 0.0;
    }
    workgroupBarrier();

    for (var t0 = p0; t0 < p1; t0 += TILE) {
        let nt = min(TILE, p1 - t0);
        // One (head, position) dot product per invocation.
        for (var i = lid; i < heads * nt; i += WG) {
            let g = i / nt;
            let t = i % nt;
            let q_base = (pl.r * params.q_stride) / 2u + (h0 + g) * HALF;
            let row = (t0 + t) * params.n_kv_heads + kvh;
            var s = 0.0;
            for (var p = 0u; p < HALF; p++) {
                s += dot(q[q_base + p], k_pair(row, p));
            }
            scores[g * TILE + t] = s * params.scale;
        }
        workgroupBarrier();
        if (lid < heads) {
            let row = lid * TILE;
            var m = run_max[lid];
            for (var t = 0u; t < nt; t++) {
                m = max(m, scores[row + t]);
            }
            let r = exp(run_max[lid] - m);
            var tile_sum = 0.0;
            for (var t = 0u; t < nt; t++) {
                let e = exp(scores[row + t] - m);
                scores[row + t] = e;
                tile_sum += e;
            }
            run_sum[lid] = run_sum[lid] * r + tile_sum;
            run_max[lid] = m;
            rescale[lid] = r;
        }
        workgroupBarrier();
        // Invocation lid owns (head, pair) lid, lid + WG, ...
        for (var j = 0u; j < ACC; j++) {
            let i = lid + j * WG;
            if (i < heads * HALF) {
                let g = i / HALF;
                let p = i % HALF;
                var a = acc[j] * rescale[g];
                for (var t = 0u; t < nt; t++) {
                    a += scores[g * TILE + t] * v_pair((t0 + t) * params.n_kv_heads + kvh, p);
                }
                acc[j] = a;
            }
        }
        workgroupBarrier();
    }

    let one_chunk = row.n_chunks == 1u;
    let out_at = (pl.r * params.out_stride) / 2u;
    for (var j = 0u; j < ACC; j++) {
        let i = lid + j * WG;
        if (i < heads * HALF) {
            let g = i / HALF;
            let h = h0 + g;
            let p = i % HALF;
            if (one_chunk) {
                out[out_at + h * HALF + p] = acc[j] / run_sum[g];
            } else {
                part_acc[((row_heads + h) * params.part_stride + c) * HALF + p] = acc[j];
            }
        }
    }
    if (!one_chunk && lid < heads) {
        part_ml[(row_heads + h0 + lid) * params.part_stride + c] = vec2<f32>(run_max[lid], run_sum[lid]);
    }
}

// attention/decode_portable over a q8_0 KV cache.
