const WG: u32 = 1024u;
const Q8_BINDING: u32 = 4u;

// Shared by ops/rms_norm and ops/add_rms_norm, one workgroup of WG invocations whose
// bindings are `params` {n, eps}, x, w and out: the reduction of the sum of squares and
// the scaled write, out[i] = x[i] * scale * w[i].

struct Params {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

var<workgroup> partial: array<f32, WG>;

// The row this workgroup normalizes: its index, one workgroup per row (a decode step
// has one, a prefill batch one per token), rows of params.n elements end to end.
var<private> row: u32;

// Element i of this workgroup's row.
fn at(i: u32) -> u32 {
    return row * params.n + i;
}

// 1 / sqrt(mean(x^2) + eps), from each invocation's partial sum of squares: a tree
// reduction in workgroup memory, so no subgroup support is needed.
fn rms_scale(lid: u32, acc: f32) -> f32 {
    partial[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    return 1.0 / sqrt(partial[0] / f32(params.n) + params.eps);
}

fn scale_at(i: u32, scale: f32) {
    if (i < params.n) {
        out[at(i)] = x[at(i)] * scale * w[i];
    }
}

// Writes this invocation's elements i = lid, lid + WG, ..., four stores per iteration.
// Each invocation reads back only x values it wrote or read itself.
fn write_scaled(lid: u32, scale: f32) {
    for (var i = lid; i < params.n; i += 4u * WG) {
        scale_at(i, scale);
        scale_at(i + WG, scale);
        scale_at(i + 2u * WG, scale);
        scale_at(i + 3u * WG, scale);
    }
}
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

// The norms' q8 variants (ops/rms_norm_q8, ops/add_rms_norm_q8): besides `out`, they
// write it quantized as the dot4 matvecs take x (matvec/q8_x.wgsl: per group of 32 the
// int8 words, then the group's tail: its scale and sums), so that every matvec reading
// the norm's output reads it in place or copies it, instead of each workgroup
// quantizing it again. The host sets Q8_BINDING, out_q8's binding, after the op's
// others.
//
// The norm is one workgroup, so latency is what counts: invocation lid takes the four
// elements of every chunk c = lid, lid + WG, ... (rather than rms_scale's stride), so
// that the eight invocations holding a group quantize it together (ops/q8_round.wgsl).
// (One invocation per group, reading it back from `out`, cost SmolLM2 8 % of its decode
// speed on the H200.)

@group(0) @binding(Q8_BINDING) var<storage, read_write> out_q8: array<u32>;

// out's four elements from element e (zeros past the end), x * scale * w.
fn normed4(e: u32, scale: f32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (e + j < params.n) {
            v[j] = x[at(e + j)] * scale * w[e + j];
        }
    }
    return v;
}

fn write_out(lid: u32, scale: f32) {
    // x as other invocations wrote it (add_rms_norm).
    storageBarrier();
    let chunks = (params.n + 3u) / 4u;
    let groups = (params.n + 31u) / 32u;
    // Whole rounds of WG chunks, so that every invocation reaches the barriers.
    for (var c0 = 0u; c0 < chunks; c0 += WG) {
        let c = c0 + lid;
        let v = normed4(4u * c, scale);
        for (var j = 0u; j < 4u; j++) {
            if (4u * c + j < params.n) {
                out[at(4u * c + j)] = v[j];
            }
        }
        // The rows' groups lie end to end as their elements do.
        q8_round(lid, row * groups + c / 8u, c / 8u < groups, v);
    }
}

// RMSNorm: out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i].
//
// One workgroup, as wide as the device allows (the host sets WG, at most 1,024;
// ops/rms_scale.wgsl); the sum of squares is a strided loop (four loads in flight
// per invocation) plus rms_scale's tree reduction, so it handles any length.

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// x[i], or 0 past the end.
fn x_at(i: u32) -> f32 {
    if (i < params.n) {
        return x[at(i)];
    }
    return 0.0;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wid: vec3<u32>) {
    row = wid.x;
    var acc = 0.0;
    for (var i = lid; i < params.n; i += 4u * WG) {
        let v0 = x_at(i);
        let v1 = x_at(i + WG);
        let v2 = x_at(i + 2u * WG);
        let v3 = x_at(i + 3u * WG);
        acc += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
    }
    write_out(lid, rms_scale(lid, acc));
}

// ops/rms_norm_q8: the norm writing its output also quantized (ops/q8_out.wgsl).
