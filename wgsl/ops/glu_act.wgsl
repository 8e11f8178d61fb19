#include "matvec/q8_x.wgsl"

// The gated FFN's activation times up, act(a) * b, by the host's GELU: silu (SwiGLU,
// the dot4 staging's `silu_times`, so both quantize the same values) or GELU's tanh
// form (GeGLU, as llama.cpp's ggml_gelu).
//
// 0.5 a (1 + tanh(u)) is written a / (1 + e^(-2u)): the same value without a tanh
// whose exponentials overflow to inf / inf for a large u.
fn gelu_times(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    let u = 0.7978845608028654 * (a + 0.044715 * a * a * a);
    return a / (1.0 + exp(-2.0 * u)) * b;
}

fn act_times(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    if (GELU) {
        return gelu_times(a, b);
    }
    return silu_times(a, b);
}
