#include "matvec/dot4.wgsl"
#include "matvec/dot4_no_prefetch.wgsl"
#include "matvec/q8_x.wgsl"
#include "matvec/bytes_dot4.wgsl"
#include "matvec/q5_bits.wgsl"

// Q5_0 with int8 x: 32 weights per 22-byte block {d: f16, qh: [u8; 4], qs: [u8; 16]};
// weight i is the low nibble of qs[i] with bit i of qh as its fifth bit, weight i + 16
// the high nibble with bit i + 16, value d * (q - 16). One block per lane.
// sum((q - 16) * x) = xd * sum(q * xq) - 16 * sum(x). Blocks are 2-byte aligned; see
// bytes_dot4.wgsl.

alias W = u32;
const BLOCK: u32 = 32u;
const SLICES: u32 = 1u;
const HALF_SKEW: u32 = 0u; // one group per lane, halves in separate loads
const STEP: u32 = 2u;

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let o = row_byte + blk * 22u;
    let qh = word_at(o + 2u);
    let qs = piece(o + 6u);
    let q = quants5(qs, qh);
    let s = group_dot(q[0], q[1], g);
    return load_f16(o) * (xd(g) * f32(s) - 16.0 * xsum(g));
}
