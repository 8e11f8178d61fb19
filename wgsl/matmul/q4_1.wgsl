#include "matmul/io.wgsl"

// Q4_1: 32 weights per 20-byte block {d: f16, m: f16, qs: [u8; 16]}; weight i is the
// low nibble of qs[i], weight i + 16 its high nibble, value d * q + m. As uploaded for
// matvec/q4_1_dot4 (the GGUF bytes); 20-byte blocks keep every field whole words.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let i = (row_byte >> 2u) + g * 5u;
    let dm = unpack2x16float(w[i]);
    let qs = vec4<u32>(w[i + 1u], w[i + 2u], w[i + 3u], w[i + 4u]);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return WGroup(qs & m4, (qs >> vec4<u32>(4u)) & m4, vec2<f32>(dm.x), 0, dm.y);
}
