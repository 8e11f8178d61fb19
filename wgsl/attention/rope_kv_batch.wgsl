// RoPE and the KV-cache append for a prompt's tokens in one dispatch: token t of
// n_tokens sits at position start + t, its q, k and v at t * row_stride (+ k_first,
// + v_first) in `qkv`; q is rotated in place, k rotated into cache row start + t, v
// copied into it. Per token the work and the bits are `attention/rope_kv.wgsl`'s (both
// run the format's writer, `attention/rope_kv_pair.wgsl` or
// `attention/rope_kv_block.wgsl`), so a prompt fed in one batch leaves the same cache
// as one fed token by token.
//
// x walks a token's units of work (pairs, or q8_0 blocks), y its tokens (each loop strided by the grid, so any count
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
    // KvWords from one cache row (a position's KV head) to the next.
    kv_row: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<KvWord>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<KvWord>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let h = RopeHeads(params.n_heads, params.n_kv_heads, params.head_dim, params.rope_dim,
                      params.kv_row);
    let per_token = rope_kv_units(h);
    for (var token = gid.y; token < params.n_tokens; token += groups.y) {
        let q_first = token * params.row_stride;
        let pos = params.start + token;
        for (var t = gid.x; t < per_token; t += groups.x * WG) {
            rope_kv_unit(t, pos, pos, q_first, q_first + params.k_first, q_first + params.v_first, h);
        }
    }
}
