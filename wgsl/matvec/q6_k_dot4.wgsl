#include "matvec/dot4.wgsl"
#include "matvec/dot4_prefetch.wgsl"
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
// The quants q - 32 go to dot4I8Packed as signed int8: q's six bits with bit 5 flipped
// are q - 32 in six-bit two's complement, and bit 5 copied to bits 6 and 7 makes it
// eight. The integer sums are exact either way, so this is bit for bit what
// sum(q * xq) - 32 * sum(xq) gave, without a per-half sum of x staged beside it.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// The lanes of a block read halves hh of groups 4h + r: neighbouring blocks' lanes
// already fall on distinct bank sets (groups 8 apart sit 9 slots apart), any skew will do.
const HALF_SKEW: u32 = 2u;
// One slice at a time: a slice holds five loads (see `row_partial`).
const STEP: u32 = 1u;

// A run's 16 quants q - 32 as signed int8: nibbles at bit n of `ql`'s bytes, top bits
// already at bits 4..5 of `top`'s bytes.
fn run_quants(ql: vec4<u32>, top: vec4<u32>, n: u32) -> vec4<u32> {
    let q = ((ql >> vec4<u32>(n)) & vec4<u32>(0x0f0f0f0fu)) | (top & vec4<u32>(0x30303030u));
    let flipped = q ^ vec4<u32>(0x20202020u);
    // 0x20 * 6 = 0xc0 within each byte: no carry into the next.
    return flipped | ((flipped & vec4<u32>(0x20202020u)) * 6u);
}

// A slice's loads apart from its arithmetic (dot4_prefetch.wgsl): its two ql pieces,
// its qh piece, the block's scales and the vec4 holding its d, and the block's index
// (which half-word of that vec4 is d).
struct Raw {
    ql0: vec4<u32>,
    ql1: vec4<u32>,
    qh: vec4<u32>,
    sc: vec4<u32>,
    dv: vec4<u32>,
    n: u32,
}

fn slice_load(row_byte: u32, blk: u32, j: u32) -> Raw {
    // Block n of the binding: rows are whole blocks, so row_byte / 210 blocks precede.
    let n = row_byte / 210u + blk;
    let body = 13u * n;
    let h = j >> 1u;
    let hh = j & 1u;
    // d: after the bodies of all m * k / 256 blocks, 2 bytes each.
    return Raw(w[body + 4u * h + hh], w[body + 4u * h + 2u + hh], w[body + 8u + 2u * h + hh],
               w[body + 12u], w[13u * params.m * (params.k / BLOCK) + n / 8u], n);
}

// What a slice's dot products need of its weights, once however many columns it is
// dotted with (dot4_prefetch.wgsl's `columns_at_once`): the four runs' quants, their
// scales, d, the x group of run 0 past the block's first, and the half of the groups.
struct Prep {
    r0: vec4<u32>,
    r1: vec4<u32>,
    r2: vec4<u32>,
    r3: vec4<u32>,
    scales: vec4<i32>,
    d: f32,
    g_off: u32,
    hh: u32,
}

fn slice_prep(r: Raw, j: u32) -> Prep {
    let h = j >> 1u;
    let hh = j & 1u;
    // Scales 8h + 2r + hh: runs 0 and 1 at bytes hh and 2 + hh of the part's first
    // word, runs 2 and 3 likewise of its second.
    let s01 = bitcast<i32>(select(r.sc.x, r.sc.z, h == 1u));
    let s23 = bitcast<i32>(select(r.sc.y, r.sc.w, h == 1u));
    let sh = 8u * hh;
    let d = unpack2x16float(r.dv[(r.n / 2u) % 4u] >> (16u * (r.n % 2u))).x;
    // Run r's top bits are bits 2r..2r+2 of qh's bytes, moved to bits 4..5.
    return Prep(run_quants(r.ql0, r.qh << vec4<u32>(4u), 0u),
                run_quants(r.ql1, r.qh << vec4<u32>(2u), 0u),
                run_quants(r.ql0, r.qh, 4u),
                run_quants(r.ql1, r.qh >> vec4<u32>(2u), 4u),
                vec4<i32>(extractBits(s01, sh, 8u), extractBits(s01, sh + 16u, 8u),
                          extractBits(s23, sh, 8u), extractBits(s23, sh + 16u, 8u)),
                d, 4u * h, hh);
}

// The slice's dot product with x from group g + its g_off, g the block's first group.
fn prep_math(p: Prep, g: u32) -> f32 {
    let g0 = g + p.g_off;
    let sums = vec4<i32>(xdot16(p.r0, g0, p.hh), xdot16(p.r1, g0 + 1u, p.hh),
                         xdot16(p.r2, g0 + 2u, p.hh), xdot16(p.r3, g0 + 3u, p.hh));
    // Scales multiply the integer sums as integers: one conversion per run.
    let scaled = sums * p.scales;
    return p.d * (xd(g0) * f32(scaled.x) + xd(g0 + 1u) * f32(scaled.y)
              + xd(g0 + 2u) * f32(scaled.z) + xd(g0 + 3u) * f32(scaled.w));
}

fn slice_math(r: Raw, j: u32, g: u32) -> f32 {
    return prep_math(slice_prep(r, j), g);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    return slice_math(slice_load(row_byte, blk, j), j, g);
}
