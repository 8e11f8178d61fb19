#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"
#include "matmul/fma_q32.wgsl"

// Q5_0 in GGUF blocks (as its coop and scalar matvecs upload them): 32 weights per
// 22-byte block {d: f16, qh: [u8; 4], qs: [u8; 16]}; value = d * (q - 16).
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 32u) * 22u;
    return load_f16(b) * (f32(quant5_at(b + 2u, b + 6u, k % 32u)) - 16.0);
}
