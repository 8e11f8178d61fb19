#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"
#include "matmul/fma_k.wgsl"

// Q5_K in GGUF blocks (as its coop and scalar matvecs upload them): 256 weights per
// 176-byte super-block {d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32],
// qs: [u8; 128]}, Q4_K's plus a fifth bit: weight l of sub-block s takes nibble s & 1 of
// qs[32 * (s / 2) + l] and, as bit 4, bit s of qh[l].
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 256u) * 176u;
    let s = (k / 32u) % 8u;
    let l = k % 32u;
    let low = (load_byte(b + 48u + 32u * (s / 2u) + l) >> (4u * (s & 1u))) & 15u;
    let high = (load_byte(b + 16u + l) >> s) & 1u;
    return k_weight(b, s, low | (high << 4u));
}
