// Q5_K with int8 x: 256 weights per 176-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]}
// = eleven 16-byte pieces: the header, two of qh and eight of qs. Every block starts
// 16-byte aligned (rows are whole blocks), so the binding is read as vec4<u32>.
//
// Slices as in q4_k_dot4.wgsl: slice j (0..4) is qs pair j, sub-blocks 2j (low nibbles)
// and 2j + 1 (high). Each weight's fifth bit is bit s (its sub-block) of qh[l], l its
// position in the sub-block: a slice reads both qh pieces. Value d * sc * q - dmin * m;
// see q4_k_dot4.wgsl for the scales and the algebra.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// As in q4_k_dot4.wgsl.
const HALF_SKEW: u32 = 0u;
// One slice at a time: a slice holds five loads (see `row_partial`).
const STEP: u32 = 1u;

// The 5-bit quants of a qs piece: nibbles at bit n of each byte of `qs`, fifth bits at
// bit 4 of each byte of `qh5` (qh shifted so that they land there).
fn quants(qs: vec4<u32>, n: u32, qh5: vec4<u32>) -> vec4<u32> {
    return ((qs >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu)) | (qh5 & vec4<u32>(0x10101010u));
}

// A slice's loads apart from its arithmetic, so that the driver can load one slice
// ahead (dot4_prefetch.wgsl).
struct Raw {
    hdr: vec4<u32>,
    qh0: vec4<u32>,
    qh1: vec4<u32>,
    q0: vec4<u32>,
    q1: vec4<u32>,
}

fn slice_load(row_byte: u32, blk: u32, j: u32) -> Raw {
    let base = (row_byte >> 4u) + blk * 11u;
    return Raw(w[base], w[base + 1u], w[base + 2u], w[base + 3u + 2u * j], w[base + 4u + 2u * j]);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    return slice_math(slice_load(row_byte, blk, j), j, g);
}

fn slice_math(r: Raw, j: u32, g: u32) -> f32 {
    let hdr = r.hdr;
    let q0 = r.q0;
    let q1 = r.q1;
    // Fifth bits of sub-blocks 2j and 2j + 1 at bits 4 and 5 of each byte.
    let sh = vec4<u32>(2u * j);
    let h0 = (r.qh0 >> sh) << vec4<u32>(4u);
    let h1 = (r.qh1 >> sh) << vec4<u32>(4u);
    let g0 = g + 2u * j;
    let lo = group_dot(quants(q0, 0u, h0), quants(q1, 0u, h1), g0);
    let hi = group_dot(quants(q0, 4u, h0 >> vec4<u32>(1u)), quants(q1, 4u, h1 >> vec4<u32>(1u)), g0 + 1u);
    return k_pair_result(hdr, j, g0, vec2<i32>(lo, hi));
}
