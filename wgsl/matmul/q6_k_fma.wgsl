#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"

// Q6_K in GGUF blocks (as its coop and scalar matvecs upload them): 256 weights per
// 210-byte super-block {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16} in two
// halves of 128. Weight i = 128h + 32r + l (run r < 4, l < 32) takes its low 4 bits from
// nibble r / 2 of ql[64h + 32(r % 2) + l] and its top 2 bits from bits 2r..2r+2 of
// qh[32h + l]; value = d * scales[i / 16] * (q - 32), multiplied in ggml's order.
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let b = row_byte + (k / 256u) * 210u;
    let i = k % 256u;
    let h = i / 128u;
    let r = (i / 32u) % 4u;
    let l = i % 32u;
    let low = (load_byte(b + 64u * h + 32u * (r % 2u) + l) >> (4u * (r / 2u))) & 15u;
    let high = (load_byte(b + 128u + 32u * h + l) >> (2u * r)) & 3u;
    let scale = load_f16(b + 208u) * f32(load_i8(b + 192u + i / 16u));
    return scale * (f32(low | (high << 4u)) - 32.0);
}
