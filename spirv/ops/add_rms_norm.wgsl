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

// ops/add_rms_norm: the norm writing f32 only. Its `write_out` comes from here rather than
// from add_rms_norm.wgsl, which ops/add_rms_norm_q8 shares.
