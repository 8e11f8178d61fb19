#include "matmul/io.wgsl"
#include "matvec/k_scales_by_pair.wgsl"

// Q4_K: 256 weights per 144-byte super-block {d: f16, dmin: f16, scales: [u8; 12],
// qs: [u8; 128]}, as uploaded for matvec/q4_k_dot4 (matvec::Layout::KScalesByPair):
// nine 16-byte pieces, the header then eight of qs. Group s (0..8) of a block is
// sub-block s, value d * sc * q - dmin * m: the low nibbles (s even) or the high ones
// (s odd) of pieces s / 2 * 2 + 1 and + 2.

alias W = vec4<u32>;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let base = (row_byte >> 4u) + (g / 8u) * 9u;
    let s = g % 8u;
    let p = s / 2u;
    let hdr = w[base];
    let n = vec4<u32>(4u * (s & 1u));
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let lo = (w[base + 1u + 2u * p] >> n) & m4;
    let hi = (w[base + 2u + 2u * p] >> n) & m4;
    let sm = k_pair_scales(hdr, p);
    let odd = (s & 1u) == 1u;
    let dm = unpack2x16float(hdr.x);
    let sc = dm.x * f32(select(sm.x, sm.y, odd));
    return WGroup(lo, hi, vec2<f32>(sc), 0, -dm.y * f32(select(sm.z, sm.w, odd)));
}
