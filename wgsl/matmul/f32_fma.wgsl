#include "matmul/fma.wgsl"

// F32 weights: 4 bytes each, so every weight is one whole word.
fn weight_at(row_byte: u32, k: u32) -> f32 {
    return bitcast<f32>(w[row_byte / 4u + k]);
}
