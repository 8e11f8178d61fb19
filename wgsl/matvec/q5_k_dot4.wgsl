#include "matvec/dot4.wgsl"
#include "matvec/dot4_prefetch.wgsl"
#include "matvec/q8_x.wgsl"
#include "matvec/k_scale_min_dot4.wgsl"
#include "matvec/q5_k_quants.wgsl"

// Q5_K with int8 x: 256 weights per 176-byte super-block
//   {d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]}
// = eleven 16-byte pieces: the header, two of qh and eight of qs. Every block starts
// 16-byte aligned (rows are whole blocks), so the binding is read as vec4<u32>.
//
// Uploaded with the scales and qh regrouped (matvec::Layout::Q5kByPair): qh word s holds
// sub-block s's 32 fifth bits, weight 4k + b's at bit 8b + k. Slices as in
// q4_k_dot4.wgsl: slice j (0..4) is qs pair j, sub-blocks 2j (low nibbles) and 2j + 1
// (high), whose fifth bits are qh words 2j and 2j + 1: half of one qh piece. Value
// d * sc * q - dmin * m; see q4_k_dot4.wgsl for the scales and the algebra.
//
// In GGUF's order a slice read both qh pieces (its bits are bit 2j and 2j + 1 of every
// qh byte): five loads and two shifts a quant word for its fifth bits; regrouped, four
// loads and one.

alias W = vec4<u32>;
const BLOCK: u32 = 256u;
const SLICES: u32 = 4u;
// As in q4_k_dot4.wgsl.
const HALF_SKEW: u32 = 0u;
// One slice at a time: a slice holds four loads (see `row_partial`).
const STEP: u32 = 1u;

// A slice's loads apart from its arithmetic, so that the driver can load one slice
// ahead (dot4_prefetch.wgsl). `qh` is the qh piece holding the slice's two words.
struct Raw {
    hdr: vec4<u32>,
    qh: vec4<u32>,
    q0: vec4<u32>,
    q1: vec4<u32>,
}

fn slice_load(row_byte: u32, blk: u32, j: u32) -> Raw {
    let base = (row_byte >> 4u) + blk * 11u;
    return Raw(w[base], w[base + 1u + j / 2u], w[base + 3u + 2u * j], w[base + 4u + 2u * j]);
}

fn slice_dot(row_byte: u32, blk: u32, j: u32, g: u32) -> f32 {
    return slice_math(slice_load(row_byte, blk, j), j, g);
}

// What a slice's dot products need of its weights, once however many columns it is
// dotted with (dot4_prefetch.wgsl's `columns_at_once`).
alias Prep = KPair;

fn slice_prep(r: Raw, j: u32) -> Prep {
    let odd = (j & 1u) == 1u;
    let h_lo = select(r.qh.x, r.qh.z, odd);
    let h_hi = select(r.qh.y, r.qh.w, odd);
    let lo = quants(r.q0, r.q1, h_lo);
    let hi = quants(r.q0 >> vec4<u32>(4u), r.q1 >> vec4<u32>(4u), h_hi);
    return k_pair(r.hdr, j, lo, hi);
}

fn prep_math(p: Prep, g: u32) -> f32 {
    return k_pair_dot(p, g);
}

fn slice_math(r: Raw, j: u32, g: u32) -> f32 {
    return prep_math(slice_prep(r, j), g);
}
