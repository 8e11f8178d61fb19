#include "ops/q8_round.wgsl"
#include "ops/q8_rows.wgsl"
#include "ops/glu_act.wgsl"

// The gated FFN's elementwise part, act(gate) * up (ops/glu_act.wgsl), written only
// quantized, as the dot4 down projection and the matmuls take x (ops/q8_rows.wgsl):
// once per step, where a `glu` down projection computes silu in every workgroup while
// staging. The silu is the staging's (`silu_times`, matvec/q8_x.wgsl), so that the
// matvec multiplies the x it would have quantized itself.

@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out_q8: array<u32>;

// act(gate) * up over the four elements from e, zeros past n (act(0) * 0 = 0).
fn values4(at: u32, e: u32, n: u32) -> vec4<f32> {
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < n) {
            a[j] = gate[at + e + j];
            b[j] = up[at + e + j];
        }
    }
    return act_times(a, b);
}
