#include "matvec/k_scales_by_pair.wgsl"

// Shared by the Q4_K and Q5_K dot4 kernels. A slice there is the pair of sub-blocks
// 2p and 2p + 1 of a super-block whose first 16 bytes are `hdr`: d and dmin, then its
// 6-bit scales and minimums as matvec::Layout::KScalesByPair regroups them on upload
// (k_scales_by_pair.wgsl). Given the pair's
// integer sums `sums` = sum(q * xq) and the x group g0 of sub-block 2p, this returns
// d * sum(sc * xd * sums) - dmin * sum(m * sum(x)).
//
// In GGUF's packing (ggml's get_scale_min_k4) pairs 0-1 and 2-3 take different
// formulas, which the lanes of a block, taking different pairs, computed both of and
// selected between; regrouped, every pair is the same shift and masks.
fn k_pair_result(hdr: vec4<u32>, p: u32, g0: u32, sums: vec2<i32>) -> f32 {
    let sm = k_pair_scales(hdr, p);
    // Scales multiply the integer sums as integers: one conversion per sub-block.
    let scaled = sums * bitcast<vec2<i32>>(sm.xy);
    let dots = xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y);
    let mins = xsum(g0) * f32(sm.z) + xsum(g0 + 1u) * f32(sm.w);
    let dm = unpack2x16float(hdr.x);
    return dm.x * dots - dm.y * mins;
}
