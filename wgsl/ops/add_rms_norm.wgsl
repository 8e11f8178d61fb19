// Residual add fused with the RMSNorm that always follows it in a llama block:
//   x[i] += y[i];  out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i].
// One dispatch instead of two, twice per layer.
//
// One workgroup, like ops/rms_norm: each invocation adds, squares and later scales the
// same elements i = lid, lid + WG, ..., so it only ever reads back what it wrote itself.

const WG: u32 = 256u;

struct Params {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var i = lid; i < params.n; i += WG) {
        let v = x[i] + y[i];
        x[i] = v;
        acc += v * v;
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
    for (var i = lid; i < params.n; i += WG) {
        out[i] = x[i] * scale * w[i];
    }
}
