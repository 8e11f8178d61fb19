#include "matvec/scalar.wgsl"

// Q5_0: 32 weights per 22-byte block {d: f16, qh: [u8; 4], qs: [u8; 16]}. qh is a
// little-endian u32 of fifth bits: weight j < 16 is the low nibble of qs[j] with bit j
// of qh on top, weight j + 16 the high nibble with bit j + 16; value = d * (q - 16).
fn row_dot(row_byte: u32) -> f32 {
    var acc = 0.0;
    for (var blk = 0u; blk < params.k / 32u; blk++) {
        let b = row_byte + blk * 22u;
        let d = load_f16(b);
        let qh = load_byte(b + 2u) | (load_byte(b + 3u) << 8u) | (load_byte(b + 4u) << 16u)
            | (load_byte(b + 5u) << 24u);
        for (var j = 0u; j < 16u; j++) {
            let q = load_byte(b + 6u + j);
            let lo = (q & 0xfu) | (((qh >> j) & 1u) << 4u);
            let hi = (q >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
            acc += (d * (f32(lo) - 16.0)) * x[x_col + blk * 32u + j];
            acc += (d * (f32(hi) - 16.0)) * x[x_col + blk * 32u + j + 16u];
        }
    }
    return acc;
}
