// Q5_K with int8 x: 256 weights per 176-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]}
// = eleven 16-byte pieces: the header, two of qh and eight of qs. Every block starts
// 16-byte aligned (rows are whole blocks), so the binding is read as vec4<u32>.
//
// Slices as in q4_k_dot4.wgsl: slice j (0..4) is qs pieces j and j + 4, half h = j % 2
// of the qs pairs p and p + 2 (p = j / 2), i.e. sub-blocks 2p, 2p + 1, 2p + 4, 2p + 5.
// Each weight's fifth bit is bit s (its sub-block) of qh[l], l its position in the
// sub-block: all four sub-blocks read qh piece h. Value d * sc * q - dmin * m; see
// q4_k_dot4.wgsl for the scales and the algebra.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// As in q4_k_dot4.wgsl.
const HALF_SKEW: u32 = 4u;

// The 5-bit quants of a qs piece: nibbles at bit n of each byte of `qs`, fifth bits at
// bit 4 of each byte of `qh5` (qh shifted so that they land there).
fn quants(qs: vec4<u32>, n: u32, qh5: vec4<u32>) -> vec4<u32> {
    return ((qs >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu)) | (qh5 & vec4<u32>(0x10101010u));
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    let base = (row_byte >> 4u) + blk * 11u;
    let hdr = w[base];
    let h = j & 1u;
    let qa = w[base + 3u + j];
    let qb = w[base + 7u + j];
    let p = j >> 1u;
    let g0 = g + 2u * p;
    // Fifth bits of sub-blocks 2p, 2p + 1, 2p + 4, 2p + 5 at bits 0, 1, 4, 5 of qhs.
    let qhs = w[base + 1u + h] >> vec4<u32>(2u * p);
    let i0 = dot16(quants(qa, 0u, qhs << vec4<u32>(4u)), xq16(g0, h));
    let i1 = dot16(quants(qa, 4u, qhs << vec4<u32>(3u)), xq16(g0 + 1u, h));
    let i4 = dot16(quants(qb, 0u, qhs), xq16(g0 + 4u, h));
    let i5 = dot16(quants(qb, 4u, qhs >> vec4<u32>(1u)), xq16(g0 + 5u, h));
    return k_slice_result(hdr, p, h, g0, vec4<i32>(i0, i1, i4, i5));
}
