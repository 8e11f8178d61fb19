#include "matvec/coop.wgsl"

// F32 weights: 32 floats per unit; the last unit of a row may be partial.
fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let first = unit * 32u;
    let n = min(32u, params.k - first);
    let word = row_byte / 4u + first;
    var acc = 0.0;
    for (var j = 0u; j < n; j++) {
        acc += bitcast<f32>(w[word + j]) * xv(xs_base + j);
    }
    return acc;
}
