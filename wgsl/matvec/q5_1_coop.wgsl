#include "matvec/coop.wgsl"
#include "matvec/q5_bits.wgsl"

// Q5_1: 32 weights per 24-byte block {d: f16, m: f16, qh: [u8; 4], qs: [u8; 16]}. qh is
// a little-endian u32 of fifth bits: weight j < 16 is the low nibble of qs[j] with bit j
// of qh on top, weight j + 16 the high nibble with bit j + 16; value = d * q + m, so
// dot = d * sum(q * x) + m * sum(x): the offset costs one multiply per block.
//
// Loads: blocks are 24 bytes and rows whole blocks, so every field is 4-byte aligned and
// is read straight from `w`: one word each for {d, m} and qh, and four for qs. The code
// is straight-line: naga puts a guard counter on every loop, which can keep the driver
// from unrolling it and issuing all the loads before the first use.
//
// Conversion: four 5-bit values are assembled in the four bytes of a word, the nibbles by
// a mask and the four matching qh bits spread to bit 4 of each byte by one multiply (see
// `fifth_bits` in q5_bits.wgsl). A byte OR'd into the mantissa of 2^23 is exactly 2^23 + q, and one
// subtraction of 2^23 yields q. This stays on the FP32 pipe; int-to-float conversion
// runs at a fraction of its rate on NVIDIA.
//
// Order of the x reads: the lanes of a subgroup run consecutive units 32 elements apart,
// so walking each unit front to back puts every lane on the same one or two
// workgroup-memory banks (16-way conflicts with f16 x). Each lane walks its unit's eight
// 4-element chunks starting at chunk r = (unit / 2) % 8, which spreads the lanes over all
// banks. Chunk c is the low (c < 4) or high nibbles of qs word c % 4, with its fifth bits
// at bits 4c.. of qh in both cases, so chunks c and c ^ 4 share a word, loaded by its
// index.

fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(xv(i), xv(i + 1u), xv(i + 2u), xv(i + 3u));
}

// Chunk c's four 5-bit values (nibbles at bit n of each byte of `q`) as floats.
fn quints(q: u32, n: u32, qh: u32, c: u32) -> vec4<f32> {
    let v = q5_word(q, n, qh, 4u * c);
    let b = (vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
}

// Chunks c and c ^ 4, both held in qs word `qs + c % 4`: sum(q * x) into acc and
// sum(x) into sx.
fn chunk_pair(acc: ptr<function, vec4<f32>>, sx: ptr<function, vec4<f32>>, qs: u32, qh: u32,
              xs_base: u32, c: u32) {
    let q = w[qs + (c & 3u)];
    let n = c & 4u;
    let xa = x4(xs_base + 4u * c);
    let xb = x4(xs_base + 4u * (c ^ 4u));
    *acc += quints(q, n, qh, c) * xa + quints(q, n ^ 4u, qh, c ^ 4u) * xb;
    *sx += xa + xb;
}

fn unit_dot(row_byte: u32, unit: u32, xs_base: u32) -> f32 {
    let i0 = (row_byte + unit * 24u) >> 2u;
    let dm = unpack2x16float(w[i0]);
    let qh = w[i0 + 1u];
    let r = (unit >> 1u) & 7u;
    var acc = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, r);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, (r + 1u) & 7u);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, (r + 2u) & 7u);
    chunk_pair(&acc, &sx, i0 + 2u, qh, xs_base, (r + 3u) & 7u);
    let one = vec4<f32>(1.0);
    return dm.x * dot(acc, one) + dm.y * dot(sx, one);
}
