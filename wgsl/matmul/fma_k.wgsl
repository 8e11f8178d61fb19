#include "matvec/k_scale_min_scalar.wgsl"

// Shared by the Q4_K and Q5_K fma matmuls: the value of quant q of sub-block s of the
// super-block at byte b, d * sc * q - dmin * m in ggml's order, so that the weight is
// the reference's own f32 value but for the rounding a fused multiply-add may skip.
fn k_weight(b: u32, s: u32, q: u32) -> f32 {
    let sm = scale_min(b, s);
    return load_f16(b) * f32(sm.x) * f32(q) - load_f16(b + 2u) * f32(sm.y);
}
