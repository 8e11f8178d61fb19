#include "matmul/io.wgsl"
#include "matvec/k_scales_by_pair.wgsl"
#include "matvec/q5_k_quants.wgsl"

// Q5_K: 256 weights per 176-byte super-block {d: f16, dmin: f16, scales: [u8; 12],
// qh: [u8; 32], qs: [u8; 128]}, as uploaded for matvec/q5_k_dot4
// (matvec::Layout::Q5kByPair): eleven 16-byte pieces, the header, two of qh (word s
// holds sub-block s's fifth bits) and eight of qs. Group s (0..8) of a block is
// sub-block s: nibbles as in Q4_K (q4_k_dot4.wgsl), value d * sc * q - dmin * m.

alias W = vec4<u32>;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let base = (row_byte >> 4u) + (g / 8u) * 11u;
    let s = g % 8u;
    let p = s / 2u;
    let hdr = w[base];
    let n = vec4<u32>(4u * (s & 1u));
    let qh = w[base + 1u + s / 4u][s % 4u];
    let q = quants(w[base + 3u + 2u * p] >> n, w[base + 4u + 2u * p] >> n, qh);
    let sm = k_pair_scales(hdr, p);
    let odd = (s & 1u) == 1u;
    let dm = unpack2x16float(hdr.x);
    let sc = dm.x * f32(select(sm.x, sm.y, odd));
    return WGroup(q[0], q[1], vec2<f32>(sc), 0, -dm.y * f32(select(sm.z, sm.w, odd)));
}
