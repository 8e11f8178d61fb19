#include "matvec/dot4.wgsl"
#include "matvec/dot4_no_prefetch.wgsl"
#include "matvec/q8_x.wgsl"
#include "matvec/q5_bits.wgsl"

// Q5_1 with int8 x: 32 weights per 24-byte block {d: f16, m: f16, qh: [u8; 4],
// qs: [u8; 16]}; quants as in Q5_0 (q5_0_dot4.wgsl), value d * q + m. One block per
// lane; 24-byte blocks stay 4-byte aligned, so every field is whole words.

alias W = u32;
const BLOCK: u32 = 32u;
const SLICES: u32 = 1u;
const HALF_SKEW: u32 = 0u; // one group per lane, halves in separate loads
const STEP: u32 = 2u;

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let i = (row_byte >> 2u) + blk * 6u;
    let dm = unpack2x16float(w[i]);
    let qh = w[i + 1u];
    let qs = vec4<u32>(w[i + 2u], w[i + 3u], w[i + 4u], w[i + 5u]);
    let q = quants5(qs, qh);
    let s = group_dot(q[0], q[1], g);
    return dm.x * xd(g) * f32(s) + dm.y * xsum(g);
}
