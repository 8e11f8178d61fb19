#include "ops/glu_act.wgsl"

// The gated FFN's elementwise part: out[r * n + i] = act(gate[r * stride + i]) *
// up[r * stride + i] for rows r and i < n, act silu (SwiGLU) or GELU (GeGLU,
// ops/glu_act.wgsl). Decode passes one row; a prefill batch passes its rows, gate and up
// read out of the rows of the gate-and-up matmuls' output.

struct Params {
    n: u32,
    rows: u32,
    stride: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let total = params.n * params.rows;
    for (var i = gid.x; i < total; i += groups.x * 256u) {
        let at = (i / params.n) * params.stride + i % params.n;
        out[i] = act_times(vec4<f32>(gate[at]), vec4<f32>(up[at])).x;
    }
}
