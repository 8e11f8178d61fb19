#include "matvec/scalar.wgsl"

// Q4_1: 32 weights per 20-byte block {d: f16, m: f16, qs: [u8; 16]}; value = d * q + m.
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var blk = 0u; blk < params.k / 32u; blk++) {
        let b = row_byte + blk * 20u;
        let d = load_f16(b);
        let m = load_f16(b + 2u);
        for (var j = 0u; j < 16u; j++) {
            let q = load_byte(b + 4u + j);
            acc += (d * f32(q & 0xfu) + m) * x[x_col + blk * 32u + j];
            acc += (d * f32(q >> 4u) + m) * x[x_col + blk * 32u + j + 16u];
        }
    }
    return acc;
}
