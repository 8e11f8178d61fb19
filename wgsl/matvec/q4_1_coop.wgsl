#include "matvec/coop.wgsl"

// Q4_1: 32 weights per 20-byte block {d: f16, m: f16, qs: [u8; 16]}; weight j < 16 is
// the low nibble of qs[j], weight j + 16 its high nibble; value = d * q + m, so
// dot = d * sum(q * x) + m * sum(x): the offset costs one multiply per block.
//
// Loads: blocks are 20 bytes and rows K / 32 * 20 bytes, so every block and field is
// 4-byte aligned and plain word reads of `w` suffice: {d, m} then the four qs words.
//
// Conversion: masking a word with 0x0f0f0f0f leaves four nibbles in four bytes, and a
// byte OR'd into the mantissa of 2^23 is exactly 2^23 + q; subtracting 2^23 yields q on
// the FP32 pipe (int-to-float conversion runs at a fraction of its rate on NVIDIA).

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// The nibbles at bits n, n + 8, n + 16, n + 24 of `q`, as floats.
fn nibbles(q: u32, n: u32) -> vec4<f32> {
    let b = (vec4<u32>((q >> n) & 0x0f0f0f0fu) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
}

// qs word c holds weights 4c..4c+3 (low nibbles) and 16+4c..16+4c+3 (high nibbles).
fn word_dot(acc: ptr<function, vec4<f32>>, sx: ptr<function, vec4<f32>>, q: u32, xs_base: u32, c: u32) {
    let lo = x4(xs_base + 4u * c);
    let hi = x4(xs_base + 16u + 4u * c);
    *acc += nibbles(q, 0u) * lo + nibbles(q, 4u) * hi;
    *sx += lo + hi;
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let i0 = (row_byte + unit * 20u) >> 2u;
    let dm = unpack2x16float(w[i0]);
    var acc = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    word_dot(&acc, &sx, w[i0 + 1u], xs_base, 0u);
    word_dot(&acc, &sx, w[i0 + 2u], xs_base, 1u);
    word_dot(&acc, &sx, w[i0 + 3u], xs_base, 2u);
    word_dot(&acc, &sx, w[i0 + 4u], xs_base, 3u);
    let ones = vec4<f32>(1.0);
    return dm.x * dot(acc, ones) + dm.y * dot(sx, ones);
}
