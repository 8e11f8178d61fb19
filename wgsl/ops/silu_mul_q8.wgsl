#include "ops/q8_round.wgsl"

// SwiGLU's elementwise part, silu(gate) * up, written only quantized, as the dot4
// down projection takes x (matvec/q8_x.wgsl's layout): once per step, where a `glu`
// down projection computes it in every workgroup while staging.
//
// Eight invocations per group of 32, four elements each, quantizing it together as the
// q8 norms do (ops/q8_round.wgsl; one invocation per group, 32 exps and 64 loads in a
// row, took the H200 about 10 µs a dispatch). The silu is the staging's (`silu_times`,
// matvec/q8_x.wgsl), so that the matvec multiplies the x it would have quantized itself.

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out_q8: array<u32>;

const WG: u32 = 64u;
const GROUPS_PER_WG: u32 = WG / 8u;

// silu(gate) * up over the four elements from e, zeros past the end (silu(0) * 0 = 0).
fn glu4(e: u32) -> vec4<f32> {
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < params.n) {
            a[j] = gate[e + j];
            b[j] = up[e + j];
        }
    }
    return silu_times(a, b);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n_groups = (params.n + 31u) / 32u;
    // Whole rounds of GROUPS_PER_WG groups, so that every invocation reaches the
    // barriers.
    for (var base = wid.x * GROUPS_PER_WG; base < n_groups; base += groups.x * GROUPS_PER_WG) {
        let g = base + lid / 8u;
        let e = 32u * g + 4u * (lid % 8u);
        let v = glu4(e);
        q8_round(lid, g, g < n_groups, v);
    }
}
