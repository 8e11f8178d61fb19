// Shared by the Q4_K and Q5_K dot4 kernels. A slice there is the pair of sub-blocks
// 2p and 2p + 1 of a super-block whose first 16 bytes are `hdr` (d and dmin, then the 12
// `scales` bytes in hdr.y, hdr.z, hdr.w). Given the pair's integer sums `sums` =
// sum(q * xq) and the x group g0 of sub-block 2p, this returns
// d * sum(sc * xd * sums) - dmin * sum(m * sum(x)).
//
// ggml's get_scale_min_k4 for sub-blocks s < 4 takes the low 6 bits of scales[s] and
// scales[s + 4]; for s >= 4 the low or high nibble of scales[s + 4] plus the top 2 bits
// of scales[s - 4] or scales[s]. A pair sits in adjacent bytes, so both of it are
// decoded at once, 16 bits apart; both forms are computed and one selected, so that
// the lanes of a block, which take different pairs, do not diverge.
fn k_pair_result(hdr: vec4<u32>, p: u32, g0: u32, sums: vec2<i32>) -> f32 {
    let sh = 16u * (p & 1u);
    let a = hdr.y >> sh;
    let b = hdr.z >> sh;
    let c = hdr.w >> sh;
    // One formula for both forms: the low 6 bits of a (b), or its top 2 bits over
    // c's nibble.
    let high = p >= 2u;
    let ab_shift = select(0u, 2u, high);
    let ab_mask = select(0x3f3fu, 0x3030u, high);
    let c_mask = select(0u, 0x0f0fu, high);
    let sc = ((a >> ab_shift) & ab_mask) | (c & c_mask);
    let m = ((b >> ab_shift) & ab_mask) | ((c >> 4u) & c_mask);
    // Scales multiply the integer sums as integers: one conversion per sub-block.
    let scaled = sums * bitcast<vec2<i32>>(vec2<u32>(sc & 0xffu, sc >> 8u));
    let dots = xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y);
    let mins = xsum(g0) * f32(m & 0xffu) + xsum(g0 + 1u) * f32(m >> 8u);
    let dm = unpack2x16float(hdr.x);
    return dm.x * dots - dm.y * mins;
}
