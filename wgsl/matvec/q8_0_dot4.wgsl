#include "matvec/dot4.wgsl"
#include "matvec/dot4_no_prefetch.wgsl"
#include "matvec/q8_x.wgsl"
#include "matvec/bytes_dot4.wgsl"

// Q8_0 with int8 x: 32 weights per 34-byte block {d: f16, qs: [i8; 32]},
// value d * q. One block per lane (a slice is the whole block): the lanes of a subgroup
// read consecutive blocks. Blocks are 2-byte aligned; see bytes_dot4.wgsl.

alias W = u32;
const BLOCK: u32 = 32u;
const SLICES: u32 = 1u;
const HALF_SKEW: u32 = 0u; // one group per lane, halves in separate loads
const STEP: u32 = 2u;

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let o = row_byte + blk * 34u;
    let s = group_dot(piece(o + 2u), piece(o + 18u), g);
    return load_f16(o) * xd(g) * f32(s);
}
