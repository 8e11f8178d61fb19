#include "matmul/io.wgsl"

// Q6_K: 256 weights per 210-byte super-block {ql: [u8; 128], qh: [u8; 64],
// scales: [i8; 16], d: f16}, as uploaded for matvec/q6_k_dot4
// (matvec::Layout::BodiesFirst): the 208-byte bodies of all the part's blocks, 13 vec4s
// each, then every block's d. Weight n = 128 h + 32 r + l takes its low 4 bits from
// nibble r / 2 of ql[64 h + 32 (r % 2) + l], its top 2 bits from bits 2r..2r+2 of
// qh[32 h + l], and value d * scales[8 h + 2 r + l / 16] * (q - 32). Group 4h + r of a
// block is run r of part h: two halves of 16 under two scales.

alias W = vec4<u32>;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    // Rows are whole blocks, so row_byte / 210 blocks precede the row.
    let n = row_byte / 210u + g / 8u;
    let body = 13u * n;
    let h = (g % 8u) / 4u;
    let r = g % 4u;
    let ql = body + 4u * h + 2u * (r % 2u);
    let qh = body + 8u + 2u * h;
    let nib = vec4<u32>(4u * (r / 2u));
    let top = vec4<u32>(2u * r);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m2 = vec4<u32>(0x03030303u);
    let lo = ((w[ql] >> nib) & m4) | (((w[qh] >> top) & m2) << vec4<u32>(4u));
    let hi = ((w[ql + 1u] >> nib) & m4) | (((w[qh + 1u] >> top) & m2) << vec4<u32>(4u));
    // Scales 8h + 2r and 8h + 2r + 1: bytes 2(r % 2) and + 1 of word 2h + r / 2.
    let sc = bitcast<i32>(w[body + 12u][2u * h + r / 2u]);
    let at = 16u * (r % 2u);
    let dv = w[13u * params.m * (params.k / 256u) + n / 8u];
    let d = unpack2x16float(dv[(n / 2u) % 4u] >> (16u * (n % 2u))).x;
    let scale = vec2<f32>(d * f32(extractBits(sc, at, 8u)), d * f32(extractBits(sc, at + 8u, 8u)));
    return WGroup(lo, hi, scale, -32, 0.0);
}
