#include "matvec/scalar.wgsl"

// F32 weights, one element at a time.
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var j = 0u; j < params.k; j++) {
        let b = row_byte + 4u * j;
        let bits = load_byte(b) | (load_byte(b + 1u) << 8u) | (load_byte(b + 2u) << 16u)
            | (load_byte(b + 3u) << 24u);
        acc += bitcast<f32>(bits) * x[x_col + j];
    }
    return acc;
}
