#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"
#include "matmul/fma_q32.wgsl"

// Q4_0 in GGUF blocks (as its coop and scalar matvecs upload them): 32 weights per
// 18-byte block {d: f16, qs: [u8; 16]}; value = d * (q - 8).
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 32u) * 18u;
    return load_f16(b) * (f32(nibble_at(b + 2u, k % 32u)) - 8.0);
}
