#include "ops/rms_scale.wgsl"

// Residual add fused with the RMSNorm that always follows it in a llama block:
//   x[i] += y[i];  out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i].
// One dispatch instead of two, twice per layer.
//
// One workgroup, like ops/rms_norm, as wide as the device allows (the host sets WG,
// at most 1,024; ops/rms_scale.wgsl): each invocation adds, squares and later
// scales the same elements i = lid, lid + WG, ..., so it only ever reads back what it
// wrote itself. A single
// workgroup is latency-bound (256 invocations took 17 us per 4,096 elements on the
// H200), so each loads four elements before using any, and wider groups need fewer
// such trips.

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// x[i] + y[i], or 0 past the end.
fn sum_at(i: u32) -> f32 {
    if (i < params.n) {
        return x[at(i)] + y[at(i)];
    }
    return 0.0;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wid: vec3<u32>) {
    row = wid.x;
    var acc = 0.0;
    for (var i = lid; i < params.n; i += 4u * WG) {
        let v0 = sum_at(i);
        let v1 = sum_at(i + WG);
        let v2 = sum_at(i + 2u * WG);
        let v3 = sum_at(i + 3u * WG);
        x[at(i)] = v0;
        if (i + WG < params.n) { x[at(i + WG)] = v1; }
        if (i + 2u * WG < params.n) { x[at(i + 2u * WG)] = v2; }
        if (i + 3u * WG < params.n) { x[at(i + 3u * WG)] = v3; }
        acc += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
    }
    write_out(lid, rms_scale(lid, acc));
}
