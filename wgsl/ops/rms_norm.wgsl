// RMSNorm: out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i].
//
// One workgroup, as wide as the device allows (the host prepends WG, at most 1,024);
// the sum of squares is a strided loop (four loads in flight per invocation) plus a
// tree reduction in workgroup memory, so it needs no subgroup support and handles any
// length.

struct Params {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, WG>;

// x[i], or 0 past the end.
fn x_at(i: u32) -> f32 {
    if (i < params.n) {
        return x[i];
    }
    return 0.0;
}

fn scale_at(i: u32, scale: f32) {
    if (i < params.n) {
        out[i] = x[i] * scale * w[i];
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var i = lid; i < params.n; i += 4u * WG) {
        let v0 = x_at(i);
        let v1 = x_at(i + WG);
        let v2 = x_at(i + 2u * WG);
        let v3 = x_at(i + 3u * WG);
        acc += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(partial[0] / f32(params.n) + params.eps);
    for (var i = lid; i < params.n; i += 4u * WG) {
        scale_at(i, scale);
        scale_at(i + WG, scale);
        scale_at(i + 2u * WG, scale);
        scale_at(i + 3u * WG, scale);
    }
}
