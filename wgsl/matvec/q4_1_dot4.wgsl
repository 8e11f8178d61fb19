#include "matvec/dot4.wgsl"
#include "matvec/dot4_no_prefetch.wgsl"
#include "matvec/q8_x.wgsl"

// Q4_1 with int8 x: 32 weights per 20-byte block {d: f16, m: f16, qs: [u8; 16]}; weight
// i is the low nibble of qs[i], weight i + 16 its high nibble, value d * q + m. One block
// per lane; 20-byte blocks stay 4-byte aligned, so every field is whole words.
// sum(w * x) = d * xd * sum(q * xq) + m * sum(x), with the group's sum.

alias W = u32;
const BLOCK: u32 = 32u;
const SLICES: u32 = 1u;
const HALF_SKEW: u32 = 0u; // one group per lane, halves in separate loads
const STEP: u32 = 2u;

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let i = (row_byte >> 2u) + blk * 5u;
    let dm = unpack2x16float(w[i]);
    let qs = vec4<u32>(w[i + 1u], w[i + 2u], w[i + 3u], w[i + 4u]);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let s = group_dot(qs & m4, (qs >> vec4<u32>(4u)) & m4, g);
    return dm.x * xd(g) * f32(s) + dm.y * xsum(g);
}
