#include "matvec/scalar.wgsl"

// Q6_K: 256 weights per 210-byte super-block
//   {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}
// in two halves of 128. In half h, weight l + 32 * r (l < 32, run r < 4) takes its low 4
// bits from nibble r / 2 of ql[64 * h + 32 * (r % 2) + l] and its top 2 bits from bits
// 2r..2r+2 of qh[32 * h + l]; value = d * scales[8 * h + 2 * r + l / 16] * (q - 32).
//
// Deliberately naive, like the baseline it stands for: every weight is dequantized on its
// own from single-byte reads and multiplied by x straight from device memory.

fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var sb = 0u; sb < params.k / 256u; sb++) {
        let b = row_byte + sb * 210u;
        let d = load_f16(b + 208u);
        for (var h = 0u; h < 2u; h++) {
            for (var r = 0u; r < 4u; r++) {
                for (var l = 0u; l < 32u; l++) {
                    let low = (load_byte(b + 64u * h + 32u * (r % 2u) + l) >> (4u * (r / 2u))) & 15u;
                    let high = (load_byte(b + 128u + 32u * h + l) >> (2u * r)) & 3u;
                    let q = i32(low | (high << 4u)) - 32;
                    let sc = load_i8(b + 192u + 8u * h + 2u * r + l / 16u);
                    acc += d * f32(sc) * f32(q) * x[x_col + sb * 256u + 128u * h + 32u * r + l];
                }
            }
        }
    }
    return acc;
}
