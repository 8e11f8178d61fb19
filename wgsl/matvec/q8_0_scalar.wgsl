#include "matvec/scalar.wgsl"

// Q8_0: 32 weights per 34-byte block {d: f16, qs: [i8; 32]}; value = d * qs[j].
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var blk = 0u; blk < params.k / 32u; blk++) {
        let b = row_byte + blk * 34u;
        let d = load_f16(b);
        for (var j = 0u; j < 32u; j++) {
            let q = load_i8(b + 2u + j);
            acc += (d * f32(q)) * x[x_col + blk * 32u + j];
        }
    }
    return acc;
}
