// Q4_1: 32 weights per 20-byte block {d: f16, m: f16, qs: [u8; 16]}; weight j < 16 is
// the low nibble of qs[j], weight j + 16 its high nibble; value = d * q + m.
// dot = d * sum(q * x) + m * sum(x), so the offset costs one multiply per block.
fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let b = row_byte + unit * 20u;
    let dm = unpack2x16float(load_u32(b));
    var sq = 0.0;
    var sx = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let q = load_u32(b + 4u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            let byte = (q >> (8u * j)) & 0xffu;
            let x_lo = xv(xs_base + 4u * i + j);
            let x_hi = xv(xs_base + 16u + 4u * i + j);
            sq += f32(byte & 0xfu) * x_lo + f32(byte >> 4u) * x_hi;
            sx += x_lo + x_hi;
        }
    }
    return dm.x * sq + dm.y * sx;
}
