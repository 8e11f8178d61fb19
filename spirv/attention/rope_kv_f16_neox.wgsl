const NEOX: bool = true;

// KV cache in f16: a u32 per pair of values (no SHADER_F16 needed). Rounding to f16
// costs about 2^-11 of each value relative; a value past 65504 becomes infinite, and
// the logits' non-finite check reports it.

alias KvWord = u32;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return unpack2x16float(w);
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return pack2x16float(v);
}
// RoPE's arithmetic for one token, shared by the KV-cache writers
// (`attention/rope_kv_pair.wgsl` for plain caches, `attention/rope_kv_block.wgsl` for
// q8_0) so every format rotates q and k with the same bits, and by `attention/rope_kv.wgsl`
// (one token) and `attention/rope_kv_batch.wgsl` (many).
//
// A token at position `pos` has its q, k and v at elements `q_first`, `k_first` and
// `v_first` of `qkv`. `bias` (laid out as a token's q, k and v in `qkv`, zeros for
// models without) is added first: qwen2's projections have biases. The includer
// declares `cs`, `qkv` and `bias`; the host sets NEOX.
//
// Which values a rotation pairs is llama.cpp's rope mode: NEOX false is its "normal"
// mode, adjacent values (2i, 2i + 1), for llama files (whose Q/K weights the converter
// permuted to match); NEOX true pairs value i with i + rope_dim / 2 (qwen2, gemma3).

struct RopeHeads {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    // KvWords from one cache row (a position's KV head) to the next.
    kv_row: u32,
}

// The two values of a head that rotated pair i takes.
fn rope_pair(i: u32, half: u32) -> vec2<u32> {
    if (NEOX) {
        return vec2<u32>(i, i + half);
    }
    return vec2<u32>(2u * i, 2u * i + 1u);
}

// The pair (x0, x1) at pair i of a head, rotated for position `pos`. The fused
// multiply-adds are written out: left to the compiler, a - b * c contracts either way,
// and on the H200 one kernel's did so differently from another's (rope_kv_batch's keys
// then differed from rope_kv's in the last bit).
fn rope_rotate(x0: f32, x1: f32, i: u32, pos: u32, rope_dim: u32) -> vec2<f32> {
    let c = cs[pos * (rope_dim / 2u) + i];
    return vec2<f32>(fma(x0, c.x, -(x1 * c.y)), fma(x0, c.y, x1 * c.x));
}

fn biased(j: u32, q_first: u32) -> f32 {
    return qkv[j] + bias[j - q_first];
}

// Value d of the head at element `head` of `qkv`, rotated: each value of a pair alone,
// by the same expression rope_rotate gives it, so that a cache word's two values can
// belong to different pairs (NEOX).
fn rope_value(head: u32, d: u32, pos: u32, q_first: u32, h: RopeHeads) -> f32 {
    let x = biased(head + d, q_first);
    if (d >= h.rope_dim) {
        return x;
    }
    let half = h.rope_dim / 2u;
    var i = d / 2u;
    if (NEOX) {
        i = d % half;
    }
    let pair = rope_pair(i, half);
    let c = cs[pos * half + i];
    if (d == pair.x) {
        return fma(x, c.x, -(biased(head + pair.y, q_first) * c.y));
    }
    return fma(biased(head + pair.x, q_first), c.y, x * c.x);
}

// Pair t (< n_heads * head_dim / 2) of q: rotated in place (rope_dim / 2 pairs per
// head; the rest of a head's values only take their bias).
fn rope_q_pair(t: u32, pos: u32, q_first: u32, h: RopeHeads) {
    let half = h.rope_dim / 2u;
    let per_head = h.head_dim / 2u;
    let i = t % per_head;
    let head = q_first + (t / per_head) * h.head_dim;
    if (i < half) {
        let pair = rope_pair(i, half);
        let r = rope_rotate(biased(head + pair.x, q_first), biased(head + pair.y, q_first),
                            i, pos, h.rope_dim);
        qkv[head + pair.x] = r.x;
        qkv[head + pair.y] = r.y;
    } else {
        // Past rope_dim: only the bias.
        let d = h.rope_dim + 2u * (i - half);
        qkv[head + d] = biased(head + d, q_first);
        qkv[head + d + 1u] = biased(head + d + 1u, q_first);
    }
}

// The plain (f32, f16) cache writer of `attention/rope_kv.wgsl` and
// `attention/rope_kv_batch.wgsl`: one unit of work per pair of values, the first
// n_heads * head_dim / 2 rotating q, the next n_kv_heads * head_dim / 2 rotating k into
// the key cache (one cache word, two adjacent values, each; values at or beyond
// rope_dim unrotated), the last as many copying v (plus its bias) into the value
// cache. The includer declares `k_cache` and `v_cache`; the format include gives
// KvWord and kv_word.

fn rope_kv_units(h: RopeHeads) -> u32 {
    return (h.n_heads + 2u * h.n_kv_heads) * (h.head_dim / 2u);
}

// `at` is the cache position the row is written at (`pos` for a lone sequence; its
// region's first row plus `pos` where sequences share the cache).
fn rope_kv_unit(t: u32, pos: u32, at: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let per_head = h.head_dim / 2u;
    let q_pairs = h.n_heads * per_head;
    let kv_pairs = h.n_kv_heads * per_head;
    if (t < q_pairs) {
        rope_q_pair(t, pos, q_first, h);
    } else if (t < q_pairs + kv_pairs) {
        let e = t - q_pairs;
        let kvh = e / per_head;
        let d = 2u * (e % per_head);
        let head = k_first + kvh * h.head_dim;
        let value = vec2<f32>(rope_value(head, d, pos, q_first, h),
                              rope_value(head, d + 1u, pos, q_first, h));
        k_cache[(at * h.n_kv_heads + kvh) * h.kv_row + d / 2u] = kv_word(value);
    } else {
        let e = t - q_pairs - kv_pairs;
        let kvh = e / per_head;
        let d = 2u * (e % per_head);
        let first = v_first + kvh * h.head_dim + d;
        v_cache[(at * h.n_kv_heads + kvh) * h.kv_row + d / 2u] =
            kv_word(vec2<f32>(biased(first, q_first), biased(first + 1u, q_first)));
    }
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
// RoPE and the KV-cache append for the rows of a decode step, in one dispatch because a
// step always needs them together: row r of the qkv rows (`row_stride` elements apart)
// is one token of some sequence, at the position its entry of the row table gives
// (`attention/rows.wgsl`); its q is rotated in place, its k rotated into cache row
// cache_first + pos of the key cache, its v copied into that row of the value cache
// (layout [row][kv_head][kv_row words], in the format the writer include gives:
// `attention/rope_kv_pair.wgsl` for plain caches, `attention/rope_kv_block.wgsl` for
// q8_0). A lone sequence's step is the one-row case of this same shader, so its bits are
// the same whatever other rows share a step. As two dispatches (rope, then the append)
// they cost the H200 about 5 µs each, nearly all of it a dispatch's fixed cost.
//
// RoPE: within each head, pair i of values (adjacent, or halves apart: the rope mode,
// `attention/rope_math.wgsl`) is rotated by theta = pos * base^(-2i / rope_dim).
// Values at or beyond rope_dim stay as they are. The projections' biases (qwen2) are
// added first.
//
// cos/sin come from a table the host computed in f64 at load (cs[pos][i] = (cos, sin)):
// GPU sin/cos are only loosely specified for large arguments, and a table lookup is
// exact. Positions are in the row table, which the host writes before each step.
//
// x walks a row's units of work (a pair of values of q, then a unit of k, then of v: a
// pair, or a q8_0 block), y the rows (each loop strided by the grid, so any count fits
// the dispatch limits).


struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    n_rows: u32,
    // Elements from one row's q (k, v) to the next row's.
    row_stride: u32,
    // Where a row's k and v start, in elements after its q.
    k_first: u32,
    v_first: u32,
    // KvWords from one cache row (a position's KV head) to the next.
    kv_row: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<KvWord>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<KvWord>;
@group(0) @binding(6) var<storage, read> att_rows: array<AttRow>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let h = RopeHeads(params.n_heads, params.n_kv_heads, params.head_dim, params.rope_dim,
                      params.kv_row);
    let units = rope_kv_units(h);
    for (var r = gid.y; r < params.n_rows; r += groups.y) {
        let row = att_rows[r];
        let q_first = r * params.row_stride;
        let k_first = q_first + params.k_first;
        let v_first = q_first + params.v_first;
        for (var t = gid.x; t < units; t += groups.x * WG) {
            rope_kv_unit(t, row.pos, row.cache_first + row.pos, q_first, k_first, v_first, h);
        }
    }
}

// attention/rope_kv appending to an f16 KV cache.
