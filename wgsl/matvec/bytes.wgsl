// Byte reads over the includer's `w: array<u32>`, for the kernels that decode GGUF blocks
// a weight at a time (the scalar matvecs, the fma matmuls) and the dot4 kernels' word
// reads (bytes_dot4.wgsl). Each reads only the word that holds its bytes: blocks of 18,
// 20, 22, 24, 34 and 210 bytes leave rows only 2-byte aligned, and a part's last row
// may end where its binding does.

fn load_byte(byte: u32) -> u32 {
    return (w[byte >> 2u] >> ((byte & 3u) * 8u)) & 0xffu;
}

// WGSL has no i8: the byte is moved to the top of an i32 and shifted back
// arithmetically, which sign-extends it.
fn load_i8(byte: u32) -> i32 {
    return bitcast<i32>(load_byte(byte) << 24u) >> 24u;
}

// The f16 at 2-aligned byte offset `byte`, widened. Every f16 of a GGUF row is 2-byte
// aligned (blocks and their fields have even sizes), so it lies in one word.
fn load_f16(byte: u32) -> f32 {
    return unpack2x16float(w[byte >> 2u] >> (8u * (byte & 2u))).x;
}
