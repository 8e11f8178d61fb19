#include "matvec/dot4.wgsl"
#include "matvec/dot4_no_prefetch.wgsl"
#include "matvec/q8_x.wgsl"

// Q6_K with int8 x: 256 weights per 210-byte super-block
//   {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}
// Weight n = 128 h + 32 r + l (h = 0..2, r = 0..4, l = 0..32) takes its low 4 bits from
// nibble r / 2 of ql[64 h + 32 (r % 2) + l], its top 2 bits from bits 2r..2r+2 of
// qh[32 h + l], and value d * scales[8 h + 2 r + l / 16] * (q - 32).
//
// Slice j (0..4) is half hh = j % 2 of the positions l of part h = j / 2: l = 16 hh ..
// + 16 of all four runs r, 64 weights under four scales. It reads two 16-byte pieces
// of ql (bytes 64 h + 16 hh and 64 h + 32 + 16 hh: low nibbles runs 0 and 1, high
// nibbles runs 2 and 3) and one of qh (bytes 32 h + 16 hh, all four runs' top bits).
// On the H200 these 64-weight slices beat 32-weight ones (one ql piece per lane): the
// block's d, scales and qh are read and decoded half as often.

// 210-byte blocks would leave every other block only 2-byte aligned, so the weights
// are uploaded as `Layout::BodiesFirst`: the first 208 bytes {ql, qh, scales} of every
// block of the dispatch's rows, 13 vec4s each, then every block's d. Each field of a
// slice is then one aligned vec4 load, where the GGUF layout took 13 word loads.
//
// sum((q - 32) * xq) = sum(q * xq) - 32 * sum(xq): the quants 0..63 are non-negative
// int8, and the driver keeps sum(xq) per half group.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// The lanes of a block read halves hh of groups 4h + r: neighbouring blocks' lanes
// already fall on distinct bank sets (groups 8 apart sit 9 slots apart), any skew will do.
const HALF_SKEW: u32 = 2u;
// One slice at a time: a slice holds five loads (see `row_partial`).
const STEP: u32 = 1u;

// sum((q - 32) * xq) over one 16-weight run: nibbles at bit n of `ql`'s bytes, top bits
// already at bits 4..5 of `top`'s bytes, against half hh of x group g.
fn run_dot(ql: vec4<u32>, top: vec4<u32>, n: u32, g: u32, hh: u32) -> i32 {
    let q = ((ql >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu)) | (top & vec4<u32>(0x30303030u));
    return xdot16(q, g, hh) - 32 * xsum16(g, hh);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    // Block n of the binding: rows are whole blocks, so row_byte / 210 blocks precede.
    let n = row_byte / 210u + blk;
    let body = 13u * n;
    let h = j >> 1u;
    let hh = j & 1u;
    let ql0 = w[body + 4u * h + hh];
    let ql1 = w[body + 4u * h + 2u + hh];
    let qh = w[body + 8u + 2u * h + hh];
    // Scales 8h + 2r + hh: runs 0 and 1 at bytes hh and 2 + hh of the part's first
    // word, runs 2 and 3 likewise of its second.
    let sc = w[body + 12u];
    let s01 = bitcast<i32>(select(sc.x, sc.z, h == 1u));
    let s23 = bitcast<i32>(select(sc.y, sc.w, h == 1u));
    let sh = 8u * hh;
    // d: after the bodies of all m * k / 256 blocks, 2 bytes each.
    let dv = w[13u * params.m * (params.k / BLOCK) + n / 8u];
    let d = unpack2x16float(dv[(n / 2u) % 4u] >> (16u * (n % 2u))).x;
    let g0 = g + 4u * h;
    // Run r's top bits are bits 2r..2r+2 of qh's bytes, moved to bits 4..5.
    let sums = vec4<i32>(run_dot(ql0, qh << vec4<u32>(4u), 0u, g0, hh),
                         run_dot(ql1, qh << vec4<u32>(2u), 0u, g0 + 1u, hh),
                         run_dot(ql0, qh, 4u, g0 + 2u, hh),
                         run_dot(ql1, qh >> vec4<u32>(2u), 4u, g0 + 3u, hh));
    // Scales multiply the integer sums as integers: one conversion per run.
    let scaled = sums * vec4<i32>(extractBits(s01, sh, 8u), extractBits(s01, sh + 16u, 8u),
                                  extractBits(s23, sh, 8u), extractBits(s23, sh + 16u, 8u));
    return d * (xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y)
              + xd(g0 + 2u) * f32(scaled.z) + xd(g0 + 3u) * f32(scaled.w));
}
