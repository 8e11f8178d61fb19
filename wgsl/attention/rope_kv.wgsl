// RoPE and the KV-cache append, in one dispatch because a decode step always needs them
// together: q rotated in place, k rotated into row `pos` of the key cache, v copied
// into row `pos` of the value cache (layout [pos][kv_head][kv_row words], in the
// format the writer include gives: `attention/rope_kv_pair.wgsl` for plain caches,
// `attention/rope_kv_block.wgsl` for q8_0). As two
// dispatches (rope, then the append) they cost the H200 about 5 µs each, nearly all of
// it a dispatch's fixed cost.
//
// RoPE: within each head, pair i of values (adjacent, or halves apart: the rope mode,
// `attention/rope_math.wgsl`) is rotated by theta = pos * base^(-2i / rope_dim).
// Values at or beyond rope_dim stay as they are. The projections' biases (qwen2) are
// added first.
//
// cos/sin come from a table the host computed in f64 at load (cs[pos][i] = (cos, sin)):
// GPU sin/cos are only loosely specified for large arguments, and a table lookup is
// exact. The position is a uniform parameter, so the host can record ahead.
//
// One invocation per pair of values of q, then one per unit of k, then of v (a pair,
// or a q8_0 block).

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    pos: u32,
    // Where k and v start in `qkv`, in elements (q starts at 0).
    k_first: u32,
    v_first: u32,
    // KvWords from one cache row (a position's KV head) to the next.
    kv_row: u32,
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
    let units = rope_kv_units(h);
    for (var t = gid.x; t < units; t += groups.x * WG) {
        rope_kv_unit(t, params.pos, 0u, params.k_first, params.v_first, h);
    }
}
