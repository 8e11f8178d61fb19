#include "matvec/scalar.wgsl"

// Q4_0: 32 weights per 18-byte block {d: f16, qs: [u8; 16]}; weight j < 16 is the low
// nibble of qs[j], weight j + 16 its high nibble; value = d * (q - 8).
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var blk = 0u; blk < params.k / 32u; blk++) {
        let b = row_byte + blk * 18u;
        let d = load_f16(b);
        for (var j = 0u; j < 16u; j++) {
            let q = load_byte(b + 2u + j);
            acc += (d * (f32(q & 0xfu) - 8.0)) * x[x_col + blk * 32u + j];
            acc += (d * (f32(q >> 4u) - 8.0)) * x[x_col + blk * 32u + j + 16u];
        }
    }
    return acc;
}
