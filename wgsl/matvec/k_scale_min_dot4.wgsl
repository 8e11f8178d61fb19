// Shared by the Q4_K and Q5_K dot4 kernels. A slice there is the pair of sub-blocks
// 2p and 2p + 1 of a super-block whose first 16 bytes are `hdr`: d and dmin, then its
// 6-bit scales and minimums as matvec::Layout::KScalesByPair regroups them on upload:
// byte p of hdr.y, hdr.z and hdr.w holds the pair's scales and sub-block 2p's minimum in
// its low 6 bits, and sub-block 2p + 1's minimum in their top 2 bits. Given the pair's
// integer sums `sums` = sum(q * xq) and the x group g0 of sub-block 2p, this returns
// d * sum(sc * xd * sums) - dmin * sum(m * sum(x)).
//
// In GGUF's packing (ggml's get_scale_min_k4) pairs 0-1 and 2-3 take different
// formulas, which the lanes of a block, taking different pairs, computed both of and
// selected between; regrouped, every pair is the same shift and masks.
fn k_pair_result(hdr: vec4<u32>, p: u32, g0: u32, sums: vec2<i32>) -> f32 {
    let sh = 8u * p;
    let a = hdr.y >> sh;
    let b = hdr.z >> sh;
    let c = hdr.w >> sh;
    let sc = vec2<u32>(a & 63u, b & 63u);
    let m = vec2<u32>(c & 63u, ((a >> 6u) & 3u) | ((b >> 4u) & 12u) | ((c >> 2u) & 48u));
    // Scales multiply the integer sums as integers: one conversion per sub-block.
    let scaled = sums * bitcast<vec2<i32>>(sc);
    let dots = xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y);
    let mins = xsum(g0) * f32(m.x) + xsum(g0 + 1u) * f32(m.y);
    let dm = unpack2x16float(hdr.x);
    return dm.x * dots - dm.y * mins;
}
