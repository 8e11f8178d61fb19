#include "matvec/dot4.wgsl"
#include "matvec/dot4_no_prefetch.wgsl"
#include "matvec/q8_x.wgsl"
#include "matvec/bytes_dot4.wgsl"

// Q4_0 with int8 x: 32 weights per 18-byte block {d: f16, qs: [u8; 16]}; weight i is the
// low nibble of qs[i], weight i + 16 its high nibble, value d * (q - 8). One block per
// lane. sum((q - 8) * x) = xd * sum(q * xq) - 8 * sum(x), with the group's sum.
// Blocks are 2-byte aligned; see bytes_dot4.wgsl.

alias W = u32;
const BLOCK: u32 = 32u;
const SLICES: u32 = 1u;
const HALF_SKEW: u32 = 0u; // one group per lane, halves in separate loads
const STEP: u32 = 2u;

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let o = row_byte + blk * 18u;
    let qs = piece(o + 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let s = group_dot(qs & m4, (qs >> vec4<u32>(4u)) & m4, g);
    return load_f16(o) * (xd(g) * f32(s) - 8.0 * xsum(g));
}
