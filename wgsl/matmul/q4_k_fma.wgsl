#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"
#include "matmul/fma_k.wgsl"

// Q4_K in GGUF blocks (as its coop and scalar matvecs upload them): 256 weights per
// 144-byte super-block {d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]} in 8
// sub-blocks of 32. Weight l of sub-block s is nibble s & 1 of qs[32 * (s / 2) + l];
// value = d * sc * q - dmin * m (fma_k.wgsl).
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 256u) * 144u;
    let s = (k / 32u) % 8u;
    let q = (load_byte(b + 16u + 32u * (s / 2u) + k % 32u) >> (4u * (s & 1u))) & 15u;
    return k_weight(b, s, q);
}
