#include "matvec/scalar.wgsl"
#include "matvec/k_scale_min_scalar.wgsl"

// Q5_K: 256 weights per 176-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]}
// laid out as Q4_K plus a fifth bit: weight l of sub-block j takes nibble j & 1 of
// qs[32 * (j / 2) + l] and, as bit 4, bit j of qh[l]; value = d * sc * q - dmin * m with
// sc and m packed as in Q4_K (ggml's get_scale_min_k4).
//
// Deliberately naive, like the baseline it stands for: every weight is dequantized on its
// own from single-byte reads and multiplied by x straight from device memory.

fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var sb = 0u; sb < params.k / 256u; sb++) {
        let b = row_byte + sb * 176u;
        let d = load_f16(b);
        let dmin = load_f16(b + 2u);
        for (var j = 0u; j < 8u; j++) {
            let sm = scale_min(b, j);
            let dl = d * f32(sm.x);
            let ml = dmin * f32(sm.y);
            for (var l = 0u; l < 32u; l++) {
                let low = (load_byte(b + 48u + 32u * (j / 2u) + l) >> (4u * (j & 1u))) & 15u;
                let high = (load_byte(b + 16u + l) >> j) & 1u;
                acc += (dl * f32(low | (high << 4u)) - ml) * x[x_col + sb * 256u + 32u * j + l];
            }
        }
    }
    return acc;
}
