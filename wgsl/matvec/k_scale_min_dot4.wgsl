// Shared by the Q4_K and Q5_K dot4 kernels. A slice there covers half h of sub-blocks
// 2p, 2p + 1, 2p + 4 and 2p + 5 of a super-block whose first 16 bytes are `hdr` (d and
// dmin, then the 12 `scales` bytes in hdr.y, hdr.z, hdr.w). Given the slice's integer
// sums `sums` = sum(q * xq) of those four sub-blocks and the x group g0 of sub-block 2p,
// this returns d * sum(sc * xd * sums) - dmin * sum(m * sum(x)), the minimum term only
// for h == 0 (it covers whole sub-blocks).
//
// ggml's get_scale_min_k4 for sub-blocks s < 4 takes the low 6 bits of scales[s] and
// scales[s + 4]; for s >= 4 the low or high nibble of scales[s + 4] plus the top 2 bits
// of scales[s - 4] or scales[s]. The slice's pairs (2p, 2p + 1) and (2p + 4, 2p + 5) sit
// in adjacent bytes, so both of a pair are decoded at once, 16 bits apart.
fn k_slice_result(hdr: vec4<u32>, p: u32, h: u32, g0: u32, sums: vec4<i32>) -> f32 {
    let sh = 16u * p;
    let a = hdr.y >> sh;
    let b = hdr.z >> sh;
    let c = hdr.w >> sh;
    let sc01 = a & 0x3f3fu;
    let m01 = b & 0x3f3fu;
    let sc45 = (c & 0x0f0fu) | ((a >> 2u) & 0x3030u);
    let m45 = ((c >> 4u) & 0x0f0fu) | ((b >> 2u) & 0x3030u);
    // Scales multiply the integer sums as integers: one conversion per sub-block.
    let scaled = sums * vec4<i32>(bitcast<vec4<i32>>(
        vec4<u32>(sc01 & 0xffu, sc01 >> 8u, sc45 & 0xffu, sc45 >> 8u)));
    let dots = xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y)
             + xd(g0 + 4u) * f32(scaled.z) + xd(g0 + 5u) * f32(scaled.w);
    let mins = xsum(g0) * f32(m01 & 0xffu) + xsum(g0 + 1u) * f32(m01 >> 8u)
             + xsum(g0 + 4u) * f32(m45 & 0xffu) + xsum(g0 + 5u) * f32(m45 >> 8u);
    let dm = unpack2x16float(hdr.x);
    return dm.x * dots - select(0.0, dm.y * mins, h == 0u);
}
