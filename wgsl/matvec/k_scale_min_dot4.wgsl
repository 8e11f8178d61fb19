#include "matvec/k_scales_by_pair.wgsl"

// Shared by the Q4_K and Q5_K dot4 kernels. A slice there is the pair of sub-blocks
// 2p and 2p + 1 of a super-block whose first 16 bytes are `hdr`: d and dmin, then its
// 6-bit scales and minimums as matvec::Layout::KScalesByPair regroups them on upload
// (k_scales_by_pair.wgsl). `k_pair` gathers what a pair's dot product needs of the
// weights (its int8 quants, scales and minimums, d and dmin) once, and `k_pair_dot`
// multiplies that with x groups g and g + 1, as the sub-blocks' sum(w * x) =
// d * sum(sc * xd * sum(q * xq)) - dmin * sum(m * sum(x)): once per column where a slice
// is dotted with several.
//
// In GGUF's packing (ggml's get_scale_min_k4) pairs 0-1 and 2-3 take different
// formulas, which the lanes of a block, taking different pairs, computed both of and
// selected between; regrouped, every pair is the same shift and masks.

// Sub-block 2p's quants (halves lo0, lo1) and 2p + 1's (hi0, hi1); sc, sc', m, m' of
// k_pair_scales; d and dmin; and the x group of sub-block 2p past the block's first.
struct KPair {
    lo0: vec4<u32>,
    lo1: vec4<u32>,
    hi0: vec4<u32>,
    hi1: vec4<u32>,
    sm: vec4<u32>,
    dm: vec2<f32>,
    g_off: u32,
}

fn k_pair(hdr: vec4<u32>, p: u32, lo: array<vec4<u32>, 2>, hi: array<vec4<u32>, 2>) -> KPair {
    return KPair(lo[0], lo[1], hi[0], hi[1], k_pair_scales(hdr, p), unpack2x16float(hdr.x), 2u * p);
}

// The pair's dot product with x from group g + its g_off, g the block's first group.
fn k_pair_dot(k: KPair, g: u32) -> f32 {
    let g0 = g + k.g_off;
    let sums = vec2<i32>(group_dot(k.lo0, k.lo1, g0), group_dot(k.hi0, k.hi1, g0 + 1u));
    // Scales multiply the integer sums as integers: one conversion per sub-block.
    let scaled = sums * bitcast<vec2<i32>>(k.sm.xy);
    let dots = xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y);
    let mins = xsum(g0) * f32(k.sm.z) + xsum(g0 + 1u) * f32(k.sm.w);
    return k.dm.x * dots - k.dm.y * mins;
}
