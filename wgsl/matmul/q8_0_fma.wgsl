#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"

// Q8_0 in GGUF blocks (as its coop and scalar matvecs upload them): 32 weights per
// 34-byte block {d: f16, qs: [i8; 32]}; value = d * qs[j].
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 32u) * 34u;
    return load_f16(b) * f32(load_i8(b + 2u + k % 32u));
}
