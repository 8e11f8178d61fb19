#include "ops/q8_round.wgsl"
#include "ops/q8_rows.wgsl"

// Rows of x written quantized as the matmuls take them (ops/q8_rows.wgsl): the
// attention output of a prefill batch, before its output projection.

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out_q8: array<u32>;

// x's four elements from e, zeros past n.
fn values4(at: u32, e: u32, n: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < n) {
            v[j] = x[at + e + j];
        }
    }
    return v;
}
