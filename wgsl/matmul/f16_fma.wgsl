#include "matmul/fma.wgsl"

// F16 weights: 2 bytes each. With odd K every other row starts only 2-byte aligned, so
// a weight is taken from the half of its word its byte offset names; the word holding
// a weight of the row lies inside the binding (uploads round parts up to 16 bytes).
fn weight_at(row_byte: u32, k: u32) -> f32 {
    let byte = row_byte + 2u * k;
    let pair = unpack2x16float(w[byte >> 2u]);
    return select(pair.x, pair.y, (byte & 2u) != 0u);
}
