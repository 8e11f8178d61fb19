const NEOX: bool = false;

// KV cache in q8_0: each block of 32 values of a head's row is 32 int8 values q and a
// scale d = max|x| / 127, the values d * q (q = x / d rounded half away from zero, as
// ggml's quantize_row_q8_0). A cache row (one position's KV head of head_dim values) is
// head_dim / 4 words of four int8 values, then head_dim / 32 f32 scales, then padding
// to a multiple of four words (16 bytes): 36 words for a head of 128, where f16 takes 64.
// ggml keeps d as f16; here it is f32 in the same padded row, so d adds no error.

alias KvWord = u32;
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

// The q8_0 cache writer of `attention/rope_kv.wgsl` and `attention/rope_kv_batch.wgsl`
// (`attention/kv_q8_0.wgsl`): one unit of work per pair of q, as the plain writer's,
// then one per block of 32 values of k (rotated by the same arithmetic) and of v (plus
// its bias): the block's values, their scale, and the int8 words. The includer declares
// `k_cache` and `v_cache` (arrays of u32). Heads are whole blocks (head_dim % 32 == 0:
// the host checks).

fn rope_kv_units(h: RopeHeads) -> u32 {
    return h.n_heads * (h.head_dim / 2u) + 2u * h.n_kv_heads * (h.head_dim / 32u);
}

// x rounded half away from zero (C's roundf, which ggml's quantizer uses), within the
// int8 range: x * (1 / d) at max|x| may land a hair past 127.
fn round_away(x: f32) -> f32 {
    return clamp(sign(x) * floor(abs(x) + 0.5), -127.0, 127.0);
}

// `at` is the cache position the row is written at (`pos` for a lone sequence; its
// region's first row plus `pos` where sequences share the cache).
fn rope_kv_unit(t: u32, pos: u32, at: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let q_pairs = h.n_heads * (h.head_dim / 2u);
    if (t < q_pairs) {
        rope_q_pair(t, pos, q_first, h);
        return;
    }
    let blocks = h.head_dim / 32u;
    let kv_blocks = h.n_kv_heads * blocks;
    let is_v = t - q_pairs >= kv_blocks;
    let b = (t - q_pairs) % kv_blocks;
    let kvh = b / blocks;
    let d0 = (b % blocks) * 32u;
    var x: array<f32, 32>;
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        var v: f32;
        if (is_v) {
            v = biased(v_first + kvh * h.head_dim + d0 + i, q_first);
        } else {
            v = rope_value(k_first + kvh * h.head_dim, d0 + i, pos, q_first, h);
        }
        x[i] = v;
        amax = max(amax, abs(v));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    let row = (at * h.n_kv_heads + kvh) * h.kv_row;
    for (var w = 0u; w < 8u; w++) {
        let q = vec4<i32>(vec4<f32>(round_away(x[4u * w] * id), round_away(x[4u * w + 1u] * id),
                                    round_away(x[4u * w + 2u] * id), round_away(x[4u * w + 3u] * id)));
        let packed = pack4xI8(q);
        if (is_v) {
            v_cache[row + d0 / 4u + w] = packed;
        } else {
            k_cache[row + d0 / 4u + w] = packed;
        }
    }
    let scale_at = row + h.head_dim / 4u + d0 / 32u;
    if (is_v) {
        v_cache[scale_at] = bitcast<u32>(d);
    } else {
        k_cache[scale_at] = bitcast<u32>(d);
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

// attention/rope_kv appending to a q8_0 KV cache.
