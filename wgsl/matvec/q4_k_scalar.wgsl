#include "matvec/scalar.wgsl"
#include "matvec/k_scale_min_scalar.wgsl"

// Q4_K: 256 weights per 144-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]}
// in 8 sub-blocks of 32. Sub-block j has a 6-bit scale sc and minimum m packed in
// `scales` (ggml's get_scale_min_k4, below); its weight l is nibble j & 1 of
// qs[32 * (j / 2) + l]; value = d * sc * q - dmin * m.
//
// Deliberately naive, like the baseline it stands for: every weight is dequantized on its
// own from single-byte reads and multiplied by x straight from device memory.

fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var sb = 0u; sb < params.k / 256u; sb++) {
        let b = row_byte + sb * 144u;
        let d = load_f16(b);
        let dmin = load_f16(b + 2u);
        for (var j = 0u; j < 8u; j++) {
            let sm = scale_min(b, j);
            let dl = d * f32(sm.x);
            let ml = dmin * f32(sm.y);
            for (var l = 0u; l < 32u; l++) {
                let q = (load_byte(b + 16u + 32u * (j / 2u) + l) >> (4u * (j & 1u))) & 15u;
                acc += (dl * f32(q) - ml) * x[x_col + sb * 256u + 32u * j + l];
            }
        }
    }
    return acc;
}
