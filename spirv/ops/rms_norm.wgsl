const WG: u32 = 1024u;

// Shared by ops/rms_norm and ops/add_rms_norm, one workgroup of WG invocations whose
// bindings are `params` {n, eps}, x, w and out: the reduction of the sum of squares and
// the scaled write, out[i] = x[i] * scale * w[i].

struct Params {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

var<workgroup> partial: array<f32, WG>;

// The row this workgroup normalizes: its index, one workgroup per row (a decode step
// has one, a prefill batch one per token), rows of params.n elements end to end.
var<private> row: u32;

// Element i of this workgroup's row.
fn at(i: u32) -> u32 {
    return row * params.n + i;
}

// 1 / sqrt(mean(x^2) + eps), from each invocation's partial sum of squares: a tree
// reduction in workgroup memory, so no subgroup support is needed.
fn rms_scale(lid: u32, acc: f32) -> f32 {
    partial[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    return 1.0 / sqrt(partial[0] / f32(params.n) + params.eps);
}

fn scale_at(i: u32, scale: f32) {
    if (i < params.n) {
        out[at(i)] = x[at(i)] * scale * w[i];
    }
}

// Writes this invocation's elements i = lid, lid + WG, ..., four stores per iteration.
// Each invocation reads back only x values it wrote or read itself.
fn write_scaled(lid: u32, scale: f32) {
    for (var i = lid; i < params.n; i += 4u * WG) {
        scale_at(i, scale);
        scale_at(i + WG, scale);
        scale_at(i + 2u * WG, scale);
        scale_at(i + 3u * WG, scale);
    }
}
// `write_out` of the norms writing f32 only (ops/rms_norm, ops/add_rms_norm); their q8
// variants take ops/q8_out.wgsl's.
fn write_out(lid: u32, scale: f32) {
    write_scaled(lid, scale);
}

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

// ops/rms_norm: the norm writing f32 only. Its `write_out` comes from here rather than
// from rms_norm.wgsl, which ops/rms_norm_q8 shares.
