#include "matmul/io.wgsl"
#include "matvec/bytes_dot4.wgsl"
#include "matvec/q5_bits.wgsl"

// Q5_0: 32 weights per 22-byte block {d: f16, qh: [u8; 4], qs: [u8; 16]}; weight i is
// the low nibble of qs[i] with bit i of qh as its fifth bit, weight i + 16 the high
// nibble with bit i + 16, value d * (q - 16). As uploaded for matvec/q5_0_dot4 (the
// GGUF bytes); blocks are 2-byte aligned.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let o = row_byte + g * 22u;
    let q = quants5(piece(o + 6u), word_at(o + 2u));
    return WGroup(q[0], q[1], vec2<f32>(load_f16(o)), -16, 0.0);
}
