#include "ops/rms_scale.wgsl"

// RMSNorm: out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i].
//
// One workgroup, as wide as the device allows (the host sets WG, at most 1,024;
// ops/rms_scale.wgsl); the sum of squares is a strided loop (four loads in flight
// per invocation) plus rms_scale's tree reduction, so it handles any length.

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// x[i], or 0 past the end.
fn x_at(i: u32) -> f32 {
    if (i < params.n) {
        return x[at(i)];
    }
    return 0.0;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wid: vec3<u32>) {
    row = wid.x;
    var acc = 0.0;
    for (var i = lid; i < params.n; i += 4u * WG) {
        let v0 = x_at(i);
        let v1 = x_at(i + WG);
        let v2 = x_at(i + 2u * WG);
        let v3 = x_at(i + 3u * WG);
        acc += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
    }
    write_out(lid, rms_scale(lid, acc));
}
