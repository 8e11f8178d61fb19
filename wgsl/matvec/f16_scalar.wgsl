#include "matvec/scalar.wgsl"

// F16 weights, one element at a time: 2 bytes per weight, so K needs no block multiple.
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var j = 0u; j < params.k; j++) {
        acc += load_f16(row_byte + 2u * j) * x[x_col + j];
    }
    return acc;
}
