#include "matmul/io.wgsl"
#include "matvec/bytes_dot4.wgsl"

// Q8_0: 32 weights per 34-byte block {d: f16, qs: [i8; 32]}, value d * q: a block is
// a group. As uploaded for matvec/q8_0_dot4 (the GGUF bytes); blocks are 2-byte aligned.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let o = row_byte + g * 34u;
    let d = load_f16(o);
    return WGroup(piece(o + 2u), piece(o + 18u), vec2<f32>(d), 0, 0.0);
}
