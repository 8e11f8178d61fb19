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

#include "attention/rows.wgsl"

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
