// Q4_K with int8 x: 256 weights per 144-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]}
// = nine 16-byte pieces: the header (d, dmin, scales) and eight of qs. Every block
// starts 16-byte aligned (rows are whole blocks), so the binding is read as vec4<u32>.
//
// qs piece i holds positions l = 16 (i % 2) .. + 16 of the qs pair p = i / 2: low nibbles
// are weights of sub-block 2p, high nibbles of sub-block 2p + 1 (value d * sc * q -
// dmin * m, sc and m 6-bit, ggml's get_scale_min_k4). Slice j (0..4) is pieces j and
// j + 4: pairs p and p + 2 (p = j / 2), half h = j % 2 of each, 64 weights. The four
// lanes of a block read each 64-byte half of qs as one contiguous run. Each lane's four
// sub-blocks are 2p, 2p + 1 (scales in plain bytes) and 2p + 4, 2p + 5 (scales split over
// high bits), so every lane decodes its scales the same way, without a branch. On the
// H200 these 64-weight slices beat 32-weight ones (one qs piece per lane) by 10-12 % on
// the large shapes: the header and scales are decoded half as often.
//
// Per sub-block: sum(w * x) = d * sc * xd * sum(q * xq) - dmin * m * sum(x), the integer
// sums on dot4I8Packed (nibbles are non-negative int8); see k_scale_min_dot4.wgsl.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// The eight lanes of two neighbouring blocks read halves h = j % 2 of groups 2p and
// 2p + 1, 4 and 5 apart: second halves 4 slots on put them on all eight bank sets.
const HALF_SKEW: u32 = 4u;

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let base = (row_byte >> 4u) + blk * 9u;
    let hdr = w[base];
    let qa = w[base + 1u + j];
    let qb = w[base + 5u + j];
    let p = j >> 1u;
    let h = j & 1u;
    let g0 = g + 2u * p;
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let i0 = dot16(qa & m4, xq16(g0, h));
    let i1 = dot16((qa >> vec4<u32>(4u)) & m4, xq16(g0 + 1u, h));
    let i4 = dot16(qb & m4, xq16(g0 + 4u, h));
    let i5 = dot16((qb >> vec4<u32>(4u)) & m4, xq16(g0 + 5u, h));
    return k_slice_result(hdr, p, h, g0, vec4<i32>(i0, i1, i4, i5));
}
