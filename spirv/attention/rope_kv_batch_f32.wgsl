// KV cache in f32: one word per pair of values (exact; twice the bytes of f16).

alias KvWord = vec2<f32>;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return w;
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return v;
}
// One pair's share of RoPE and the KV-cache append, shared by `attention/rope_kv.wgsl`
// (one token) and `attention/rope_kv_batch.wgsl` (many) so both do the same arithmetic
// in the same order and write the same bits for the same token.
//
// Pair `t` of a token at position `pos` whose q, k and v start at elements `q_first`,
// `k_first` and `v_first` of `qkv`: the first n_heads * rope_dim / 2 pairs rotate q in
// place, the next n_kv_heads * head_dim / 2 rotate k into row `pos` of the key cache
// (pairs at or beyond rope_dim unrotated), the last as many copy v into row `pos` of
// the value cache. The includer declares `cs`, `qkv`, `k_cache` and `v_cache`; the
// format include gives KvWord and kv_word.

struct RopeHeads {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
}

// The pair (x0, x1) at pair i of a head, rotated for position `pos`.
fn rope_rotate(x0: f32, x1: f32, i: u32, pos: u32, rope_dim: u32) -> vec2<f32> {
    let c = cs[pos * (rope_dim / 2u) + i];
    return vec2<f32>(x0 * c.x - x1 * c.y, x0 * c.y + x1 * c.x);
}

fn rope_kv_pair(t: u32, pos: u32, q_first: u32, k_first: u32, v_first: u32, h: RopeHeads) {
    let half = h.rope_dim / 2u;
    let q_pairs = h.n_heads * half;
    let kv_pairs = h.n_kv_heads * h.head_dim / 2u;
    let row = pos * kv_pairs;
    if (t < q_pairs) {
        let i = t % half;
        let j = q_first + (t / half) * h.head_dim + 2u * i;
        let r = rope_rotate(qkv[j], qkv[j + 1u], i, pos, h.rope_dim);
        qkv[j] = r.x;
        qkv[j + 1u] = r.y;
    } else if (t < q_pairs + kv_pairs) {
        let e = t - q_pairs;
        let i = e % (h.head_dim / 2u);
        let first = k_first + 2u * e;
        var value = vec2<f32>(qkv[first], qkv[first + 1u]);
        if (2u * i < h.rope_dim) {
            value = rope_rotate(value.x, value.y, i, pos, h.rope_dim);
        }
        k_cache[row + e] = kv_word(value);
    } else {
        let e = t - q_pairs - kv_pairs;
        let first = v_first + 2u * e;
        v_cache[row + e] = kv_word(vec2<f32>(qkv[first], qkv[first + 1u]));
    }
}
// RoPE and the KV-cache append for a prompt's tokens in one dispatch: token t of
// n_tokens sits at position start + t, its q, k and v at t * row_stride (+ k_first,
// + v_first) in `qkv`; q is rotated in place, k rotated into cache row start + t, v
// copied into it. Per token the work and the bits are `attention/rope_kv.wgsl`'s (both
// run `attention/rope_kv_pair.wgsl`), so a prompt fed in one batch leaves the same
// cache as one fed token by token.
//
// x walks a token's pairs, y its tokens (each loop strided by the grid, so any count
// fits the dispatch limits).

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    start: u32,
    n_tokens: u32,
    // Elements from one token's q (k, v) to the next token's.
    row_stride: u32,
    // Where a token's k and v start, in elements after its q.
    k_first: u32,
    v_first: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<KvWord>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<KvWord>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let h = RopeHeads(params.n_heads, params.n_kv_heads, params.head_dim, params.rope_dim);
    let per_token = h.n_heads * (h.rope_dim / 2u) + h.n_kv_heads * h.head_dim;
    for (var token = gid.y; token < params.n_tokens; token += groups.y) {
        let q_first = token * params.row_stride;
        let pos = params.start + token;
        for (var t = gid.x; t < per_token; t += groups.x * WG) {
            rope_kv_pair(t, pos, q_first, q_first + params.k_first, q_first + params.v_first, h);
        }
    }
}

// attention/rope_kv_batch appending to an f32 KV cache.
