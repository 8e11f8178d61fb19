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
