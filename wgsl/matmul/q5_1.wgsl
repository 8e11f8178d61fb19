#include "matmul/io.wgsl"
#include "matvec/q5_bits.wgsl"

// Q5_1: 32 weights per 24-byte block {d: f16, m: f16, qh: [u8; 4], qs: [u8; 16]};
// quants as in Q5_0 (q5_0_dot4.wgsl), value d * q + m. As uploaded for
// matvec/q5_1_dot4 (the GGUF bytes); 24-byte blocks keep every field whole words.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let i = (row_byte >> 2u) + g * 6u;
    let dm = unpack2x16float(w[i]);
    let qs = vec4<u32>(w[i + 2u], w[i + 3u], w[i + 4u], w[i + 5u]);
    let q = quants5(qs, w[i + 1u]);
    return WGroup(q[0], q[1], vec2<f32>(dm.x), 0, dm.y);
}
