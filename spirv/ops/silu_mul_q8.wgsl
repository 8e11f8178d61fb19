const GELU: bool = false;

// x as the dot4 kernels take it, "q8 groups": each 32 values on two int8 planes. The
// first is x rounded with scale d1 = amax / 127 (llama.cpp's q8_1 activations); the
// second is what the first leaves, x - d1 q1, rounded with d1 / 256, so that a group's
// value is d (256 q1 + q2) with d = d1 / 256: 256 times finer than one plane (issue 22:
// one plane's rounding of groups with an outlier channel gave logit errors twice
// llama.cpp's at some positions, noise that moved with the summation order). The
// matvecs multiply both planes (256 * sum(w q1) + sum(w q2), exact in i32); the matmuls
// of a prompt batch, which are bound by their integer throughput, the first alone.
//
// The dot4 matvec driver quantizes f32 x this way while staging it, and the norms and
// ops/silu_mul_q8 can write it once for every kernel that reads their output
// (ops/q8_round.wgsl), so that the matvecs copy it or read it in place and the matmuls
// stage it. All use this arithmetic, so a pre-quantized x is bit for bit the x the
// matvec would have quantized.
//
// In a buffer (array<vec4<f32>>), group g is the six vec4s from 6g: the first plane's
// first 16 int8 values (4 per word, little-endian) and last 16, its tail (d1, d1 *
// sum(q1), and the sums of the two halves of q1), then the second plane's two halves,
// then the two planes' tail (d, d * sum(256 q1 + q2), and the halves' sums of 256 q1 +
// q2), as `Q8Group` holds them.

// SwiGLU's elementwise part, silu(a) * b: the one formula for the dot4 staging of a
// `glu` route and ops/silu_mul_q8, so that both quantize the same values.
fn silu_times(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return a / (1.0 + exp(-a)) * b;
}

struct Q8Group {
    lo: vec4<u32>,
    hi: vec4<u32>,
    // d1, d1 * (sum_lo + sum_hi), sum_lo, sum_hi (the sums of q1's values, bitcast)
    tail: vec4<f32>,
    lo2: vec4<u32>,
    hi2: vec4<u32>,
    // d, d * (sum_lo + sum_hi), sum_lo, sum_hi (the sums of 256 q1 + q2, bitcast)
    tail2: vec4<f32>,
}

// Values per buffer group (vec4s).
const Q8_GROUP_VEC4S: u32 = 6u;

// 1 / the scale, 0 for a group of zeros.
fn q8_inv(amax: f32) -> f32 {
    return select(0.0, 1.0 / amax, amax > 0.0);
}

// The tail of a group with scale d whose halves' int8 values sum to s_lo and s_hi: the
// one formula for it, so that a tail the norms write is bit for bit a staged one.
fn q8_tail_of(d: f32, s_lo: i32, s_hi: i32) -> vec4<f32> {
    return vec4<f32>(d, d * f32(s_lo + s_hi), bitcast<f32>(s_lo), bitcast<f32>(s_hi));
}

// The sums of a plane's 16-value halves.
fn q8_half_sums(lo: vec4<u32>, hi: vec4<u32>) -> vec2<i32> {
    let ones = 0x01010101u;
    return vec2<i32>(dot4I8Packed(lo.x, ones) + dot4I8Packed(lo.y, ones)
                   + dot4I8Packed(lo.z, ones) + dot4I8Packed(lo.w, ones),
                     dot4I8Packed(hi.x, ones) + dot4I8Packed(hi.y, ones)
                   + dot4I8Packed(hi.z, ones) + dot4I8Packed(hi.w, ones));
}

// The first plane's packed word of four values v and its residual's: the one formula
// for both (q8_group, ops/q8_round.wgsl). `inv` is q8_inv(amax): pack4x8snorm rounds
// clamp(v * inv, -1, 1) * 127 to the nearest integer, q1; the residual v - d1 q1 over
// d1 / 256 is v * 256 * inv * 127 - 256 q1, which pack4x8snorm takes as that over 127.
fn q8_planes(v: vec4<f32>, inv: f32) -> vec2<u32> {
    let p1 = pack4x8snorm(v * inv);
    let q1 = unpack4x8snorm(p1) * 127.0;
    return vec2<u32>(p1, pack4x8snorm((v * inv * 127.0 - q1) * 256.0 / 127.0));
}

// The two planes' tail from their halves' sums: d = amax / (127 * 256).
fn q8_tail2_of(amax: f32, s1: vec2<i32>, s2: vec2<i32>) -> vec4<f32> {
    return q8_tail_of(amax / (127.0 * 256.0), 256 * s1.x + s2.x, 256 * s1.y + s2.y);
}

// One group by one invocation. (ops/q8_round.wgsl spreads a group over eight, with the
// same arithmetic: q8_inv, q8_planes, d1 = amax / 127.)
fn q8_group(v: array<vec4<f32>, 8>) -> Q8Group {
    let a = max(max(max(abs(v[0]), abs(v[1])), max(abs(v[2]), abs(v[3]))),
                max(max(abs(v[4]), abs(v[5])), max(abs(v[6]), abs(v[7]))));
    let amax = max(max(a.x, a.y), max(a.z, a.w));
    let inv = q8_inv(amax);
    let w0 = q8_planes(v[0], inv);
    let w1 = q8_planes(v[1], inv);
    let w2 = q8_planes(v[2], inv);
    let w3 = q8_planes(v[3], inv);
    let w4 = q8_planes(v[4], inv);
    let w5 = q8_planes(v[5], inv);
    let w6 = q8_planes(v[6], inv);
    let w7 = q8_planes(v[7], inv);
    let lo = vec4<u32>(w0.x, w1.x, w2.x, w3.x);
    let hi = vec4<u32>(w4.x, w5.x, w6.x, w7.x);
    let lo2 = vec4<u32>(w0.y, w1.y, w2.y, w3.y);
    let hi2 = vec4<u32>(w4.y, w5.y, w6.y, w7.y);
    let s1 = q8_half_sums(lo, hi);
    let s2 = q8_half_sums(lo2, hi2);
    return Q8Group(lo, hi, q8_tail_of(amax / 127.0, s1.x, s1.y), lo2, hi2,
                   q8_tail2_of(amax, s1, s2));
}

// One round of an op writing its output quantized for the dot4 kernels (ops/q8_out.wgsl
// for the norms, ops/silu_mul_q8.wgsl, ops/quantize_rows.wgsl) in matvec/q8_x.wgsl's
// layout: each invocation holds four consecutive values, the eight invocations from
// lid - lid % 8 hold group g, and they meet once in workgroup memory for the group's
// amax; each packs its own four values on both planes (q8_group's arithmetic: q8_inv,
// q8_planes), and the group's first invocation writes the tails after the round's
// closing barrier, where the sums of the eight have met. Every invocation of the
// workgroup calls it (two barriers); `valid` says whether group g exists. The op
// declares WG and `out_q8` (array<u32>).

var<workgroup> q8_amaxes: array<f32, WG>;
// Per invocation, the sums of its four values on each plane.
var<workgroup> q8_sums: array<vec2<i32>, WG>;

fn q8_round(lid: u32, g: u32, valid: bool, v: vec4<f32>) {
    let p = lid % 8u;
    let first = lid - p;
    let a = abs(v);
    q8_amaxes[lid] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    var amax = 0.0;
    for (var j = 0u; j < 8u; j++) {
        amax = max(amax, q8_amaxes[first + j]);
    }
    let planes = q8_planes(v, q8_inv(amax));
    let ones = 0x01010101u;
    q8_sums[lid] = vec2<i32>(dot4I8Packed(planes.x, ones), dot4I8Packed(planes.y, ones));
    // Group g's u32s: plane 1 (8), its tail (4), plane 2 (8), the two planes' tail (4).
    let at = 4u * Q8_GROUP_VEC4S * g;
    if (valid) {
        out_q8[at + p] = planes.x;
        out_q8[at + 12u + p] = planes.y;
    }
    // Also closes the round: the next one writes q8_amaxes first and q8_sums only after
    // its first barrier, so the reads below are safe without another.
    workgroupBarrier();
    if (valid && p == 0u) {
        let s_lo = q8_sums[first] + q8_sums[first + 1u] + q8_sums[first + 2u]
                 + q8_sums[first + 3u];
        let s_hi = q8_sums[first + 4u] + q8_sums[first + 5u] + q8_sums[first + 6u]
                 + q8_sums[first + 7u];
        let s1 = vec2<i32>(s_lo.x, s_hi.x);
        let s2 = vec2<i32>(s_lo.y, s_hi.y);
        let tail = q8_tail_of(amax / 127.0, s1.x, s1.y);
        let tail2 = q8_tail2_of(amax, s1, s2);
        for (var j = 0u; j < 4u; j++) {
            out_q8[at + 8u + j] = bitcast<u32>(tail[j]);
            out_q8[at + 20u + j] = bitcast<u32>(tail2[j]);
        }
    }
}
// Rows of values written only quantized, as the dot4 kernels take x
// (matvec/q8_x.wgsl's layout; a row's groups end to end, then the next row's): the
// driver of ops/silu_mul_q8 (silu(gate) * up) and ops/quantize_rows (x as it is).
//
// Eight invocations per group of 32, four elements each, quantizing it together as the
// q8 norms do (ops/q8_round.wgsl; one invocation per group, 32 exps and 64 loads in a
// row, took the H200 about 10 µs a dispatch). Row r's element e is input element
// r * stride + e, so the rows may be read out of a wider buffer (the gate and up of a
// prefill batch, every token's side by side).
//
// The root file declares the input bindings, `out_q8` and
//   fn values4(at: u32, e: u32, n: u32) -> vec4<f32>
// the row's four values from element e, at its first element, zeros from n on.

struct Params {
    n: u32,       // values per row
    rows: u32,
    stride: u32,  // input elements from one row to the next
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 64u;
const GROUPS_PER_WG: u32 = WG / 8u;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let per_row = (params.n + 31u) / 32u;
    let n_groups = per_row * params.rows;
    // Whole rounds of GROUPS_PER_WG groups, so that every invocation reaches the
    // barriers.
    for (var base = wid.x * GROUPS_PER_WG; base < n_groups; base += groups.x * GROUPS_PER_WG) {
        let g = base + lid / 8u;
        let r = g / per_row;
        let e = 32u * (g % per_row) + 4u * (lid % 8u);
        var v = vec4<f32>(0.0);
        if (g < n_groups) {
            v = values4(r * params.stride, e, params.n);
        }
        q8_round(lid, g, g < n_groups, v);
    }
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

// The gated FFN's elementwise part, act(gate) * up (ops/glu_act.wgsl), written only
// quantized, as the dot4 down projection and the matmuls take x (ops/q8_rows.wgsl):
// once per step, where a `glu` down projection computes silu in every workgroup while
// staging. The silu is the staging's (`silu_times`, matvec/q8_x.wgsl), so that the
// matvec multiplies the x it would have quantized itself.

@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out_q8: array<u32>;

// act(gate) * up over the four elements from e, zeros past n (act(0) * 0 = 0).
fn values4(at: u32, e: u32, n: u32) -> vec4<f32> {
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < n) {
            a[j] = gate[at + e + j];
            b[j] = up[at + e + j];
        }
    }
    return act_times(a, b);
}
