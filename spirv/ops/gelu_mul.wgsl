const GELU: bool = true;

// x as the dot4 matvecs take it, "q8 groups": each 32 values as int8 with one scale
// d = amax / 127, rounded to nearest (llama.cpp's q8_1 activations). The dot4 driver
// quantizes f32 x this way while staging it, and the norms and ops/silu_mul_q8 can
// write it once for every matvec that reads their output (ops/q8_round.wgsl), so that
// those matvecs copy it or read it in place. All use this arithmetic, so a
// pre-quantized x is bit for bit the x the matvec would have quantized.
//
// In a buffer (array<vec4<f32>>), group g is the three vec4s from 3g: its first 16 int8
// values (4 per word, little-endian), its last 16, then its tail as `Q8Group` holds it.

// SwiGLU's elementwise part, silu(a) * b: the one formula for the dot4 staging of a
// `glu` route and ops/silu_mul_q8, so that both quantize the same values.
fn silu_times(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return a / (1.0 + exp(-a)) * b;
}

struct Q8Group {
    lo: vec4<u32>,
    hi: vec4<u32>,
    // d, d * (sum_lo + sum_hi), sum_lo, sum_hi (the sums of the int8 values, bitcast)
    tail: vec4<f32>,
}

// 1 / the scale, 0 for a group of zeros.
fn q8_inv(amax: f32) -> f32 {
    return select(0.0, 1.0 / amax, amax > 0.0);
}

// The tail of a group with scale d whose halves' int8 values sum to s_lo and s_hi: the
// one formula for it, so that a tail the norms write is bit for bit a staged one.
fn q8_tail_of(d: f32, s_lo: i32, s_hi: i32) -> vec4<f32> {
    return vec4<f32>(d, d * f32(s_lo + s_hi), bitcast<f32>(s_lo), bitcast<f32>(s_hi));
}

// The group's tail from its int8 values (two halves of 16) and its scale.
fn q8_tail(lo: vec4<u32>, hi: vec4<u32>, d: f32) -> vec4<f32> {
    // The sum of the quantized values, not of x: an offset or minimum term then carries
    // the same rounding as the quants' term (sum(w * xq) exactly), where the exact sum
    // would leave their errors uncancelled.
    let ones = 0x01010101u;
    let s_lo = dot4I8Packed(lo.x, ones) + dot4I8Packed(lo.y, ones)
             + dot4I8Packed(lo.z, ones) + dot4I8Packed(lo.w, ones);
    let s_hi = dot4I8Packed(hi.x, ones) + dot4I8Packed(hi.y, ones)
             + dot4I8Packed(hi.z, ones) + dot4I8Packed(hi.w, ones);
    return q8_tail_of(d, s_lo, s_hi);
}

// One group by one invocation. (ops/q8_round.wgsl spreads a group over eight, with the
// same arithmetic: q8_inv, pack4x8snorm of v * inv, d = amax / 127.)
fn q8_group(v: array<vec4<f32>, 8>) -> Q8Group {
    let a = max(max(max(abs(v[0]), abs(v[1])), max(abs(v[2]), abs(v[3]))),
                max(max(abs(v[4]), abs(v[5])), max(abs(v[6]), abs(v[7]))));
    let amax = max(max(a.x, a.y), max(a.z, a.w));
    let inv = q8_inv(amax);
    // pack4x8snorm rounds clamp(v, -1, 1) * 127 to the nearest integer.
    let lo = vec4<u32>(pack4x8snorm(v[0] * inv), pack4x8snorm(v[1] * inv),
                       pack4x8snorm(v[2] * inv), pack4x8snorm(v[3] * inv));
    let hi = vec4<u32>(pack4x8snorm(v[4] * inv), pack4x8snorm(v[5] * inv),
                       pack4x8snorm(v[6] * inv), pack4x8snorm(v[7] * inv));
    return Q8Group(lo, hi, q8_tail(lo, hi, amax / 127.0));
}

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

// The gated FFN's elementwise part: out[r * n + i] = act(gate[r * stride + i]) *
// up[r * stride + i] for rows r and i < n, act silu (SwiGLU) or GELU (GeGLU,
// ops/glu_act.wgsl). Decode passes one row; a prefill batch passes its rows, gate and up
// read out of the rows of the gate-and-up matmuls' output.

struct Params {
    n: u32,
    rows: u32,
    stride: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let total = params.n * params.rows;
    for (var i = gid.x; i < total; i += groups.x * 256u) {
        let at = (i / params.n) * params.stride + i % params.n;
        out[i] = act_times(vec4<f32>(gate[at]), vec4<f32>(up[at])).x;
    }
}
