#include "matvec/dot4.wgsl"
#include "matvec/dot4_prefetch.wgsl"
#include "matvec/q8_x.wgsl"
#include "matvec/k_scale_min_dot4.wgsl"

// Q4_K with int8 x: 256 weights per 144-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]}
// = nine 16-byte pieces: the header (d, dmin, scales) and eight of qs. Every block
// starts 16-byte aligned (rows are whole blocks), so the binding is read as vec4<u32>.
//
// qs pair p (bytes 32p .. 32p + 32, pieces 2p and 2p + 1) holds sub-block 2p in its low
// nibbles and sub-block 2p + 1 in its high ones (value d * sc * q - dmin * m, sc and m
// 6-bit, ggml's get_scale_min_k4, regrouped per pair on upload: see
// k_scale_min_dot4.wgsl). Slice j (0..4) is pair j: 64 weights, two whole
// sub-blocks, so each lane decodes two scales and two minimums. Slices of half of four
// sub-blocks each (the same 64 weights per lane, four scales and minimums, the latter
// thrown away by half the lanes) ran 3-5 % slower on the H200's large shapes (the
// 128,256 x 4,096 head 75-77 -> 80 %).
//
// Per sub-block: sum(w * x) = d * sc * xd * sum(q * xq) - dmin * m * sum(x), the integer
// sums on dot4I8Packed (nibbles are non-negative int8); see k_scale_min_dot4.wgsl.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// Lanes read groups 2j of their blocks, and neighbouring blocks' groups sit 9 slots
// apart: every half already falls on distinct bank sets.
const HALF_SKEW: u32 = 0u;
const STEP: u32 = 2u;

// A slice's loads apart from its arithmetic, so that the driver can load one slice
// ahead (dot4_prefetch.wgsl).
struct Raw {
    hdr: vec4<u32>,
    q0: vec4<u32>,
    q1: vec4<u32>,
}

fn slice_load(row_byte: u32, blk: u32, j: u32) -> Raw {
    let base = (row_byte >> 4u) + blk * 9u;
    return Raw(w[base], w[base + 1u + 2u * j], w[base + 2u + 2u * j]);
}

// What a slice's dot products need of its weights, once however many columns it is
// dotted with (dot4_prefetch.wgsl's `columns_at_once`).
alias Prep = KPair;

fn slice_prep(r: Raw, j: u32) -> Prep {
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let s4 = vec4<u32>(4u);
    return k_pair(r.hdr, j, array(r.q0 & m4, r.q1 & m4), array((r.q0 >> s4) & m4, (r.q1 >> s4) & m4));
}

fn prep_math(p: Prep, g: u32) -> f32 {
    return k_pair_dot(p, g);
}

fn slice_math(r: Raw, j: u32, g: u32) -> f32 {
    return prep_math(slice_prep(r, j), g);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    return slice_math(slice_load(row_byte, blk, j), j, g);
}
