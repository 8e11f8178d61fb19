#include "matmul/fma.wgsl"
#include "matvec/bytes.wgsl"

// F16 weights: 2 bytes each. With odd K every other row starts only 2-byte aligned;
// load_f16 takes a weight from the half of its word its byte offset names, and that
// word lies inside the binding (uploads round parts up to 16 bytes).
fn weight_at(row_byte: u32, k: u32) -> f32 {
    return load_f16(row_byte + 2u * k);
}
