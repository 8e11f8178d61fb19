#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"
#include "matmul/fma_q32.wgsl"

// Q5_1 in GGUF blocks (as its coop and scalar matvecs upload them): 32 weights per
// 24-byte block {d: f16, m: f16, qh: [u8; 4], qs: [u8; 16]}; value = d * q + m.
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 32u) * 24u;
    return load_f16(b) * f32(quant5_at(b + 4u, b + 8u, k % 32u)) + load_f16(b + 2u);
}
