// x for unpacked.wgsl: the tokens' q8 groups (q8_x.wgsl's layout) as CT, token after
// token, K values each, once per batch where coopmat.wgsl converts them once per tile
// of rows. Both int8 planes, d * (256 q1 + q2), as the decode columns (columns.wgsl)
// read them: 256 times finer than the first plane alone, which is all coopmat.wgsl and
// the dot4 matmuls take.
//
// One invocation converts one group of 32. Tokens past the batch in the output (up to
// a whole tile) are not written: they hold zeros or an earlier batch's values, and
// meet only outputs that unpacked.wgsl does not store.
//
// The host prepends the `f16` enable where CT is f16, and `alias CT`. Workgroups: a
// grid of x by y over the batch's groups, WG each.

#include "matvec/q8_x.wgsl"
#include "matmul/x_planes.wgsl"

const WG: u32 = 64u;

struct Params {
    n_tokens: u32,
    k: u32,
    x_stride: u32,   // vec4s per token in x (6 per group of 32)
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<CT>>;

// 16 values d * (256 q1 + q2) from the two planes' words, to out[at..at + 4].
fn put16(at: u32, q1: vec4<u32>, q2: vec4<u32>, d: f32) {
    for (var i = 0u; i < 4u; i++) {
        out[at + i] = vec4<CT>(q8_planes4(q1[i], q2[i], d));
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let groups = params.k / 32u;
    let i = (wid.y * grid.x + wid.x) * WG + lid;
    if (i >= params.n_tokens * groups) {
        return;
    }
    let t = i / groups;
    let g = i % groups;
    let base = t * params.x_stride + Q8_GROUP_VEC4S * g;
    let d = x[base + 5u].x;
    let at = t * (params.k / 4u) + 8u * g;
    put16(at, bitcast<vec4<u32>>(x[base]), bitcast<vec4<u32>>(x[base + 3u]), d);
    put16(at + 4u, bitcast<vec4<u32>>(x[base + 1u]), bitcast<vec4<u32>>(x[base + 4u]), d);
}
