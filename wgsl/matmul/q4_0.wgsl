#include "matmul/io.wgsl"
#include "matvec/bytes_dot4.wgsl"

// Q4_0: 32 weights per 18-byte block {d: f16, qs: [u8; 16]}; weight i is the low nibble
// of qs[i], weight i + 16 its high nibble, value d * (q - 8). As uploaded for
// matvec/q4_0_dot4 (the GGUF bytes); blocks are 2-byte aligned.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let o = row_byte + g * 18u;
    let qs = piece(o + 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return WGroup(qs & m4, (qs >> vec4<u32>(4u)) & m4, vec2<f32>(load_f16(o)), -8, 0.0);
}
