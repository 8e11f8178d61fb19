const K_GROUPS: u32 = 2u;

// A matmul's parameters, its weight binding and its weight decoders' contract, shared
// by the drivers (dot4.wgsl, coopmat.wgsl, columns.wgsl, unpack.wgsl), which declare
// what else they bind, and the per-type decoders (<type>.wgsl), which define
//   alias W                   the weight binding's element (u32 or vec4<u32>)
//   fn weight_group(row_byte: u32, g: u32) -> WGroup
// group g (weights 32g .. 32g + 32) of the row starting at byte `row_byte`, reading the
// layout its dot4 matvec uploads (the two share the weight buffers).

struct Params {
    m: u32,          // rows in this dispatch (its weight part)
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // output element of row 0 of this dispatch within a token's row of y
    n_tokens: u32,
    x_stride: u32,   // vec4s per token in x (6 per group of 32, q8_x.wgsl)
    y_stride: u32,   // floats per token in y
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<W>;

// 32 weights: int8 quants q (lo: weights 0..16, four per word, hi: 16..32), value
// scale[h] * (q + offset) + min for the weights of half h. Every type fits this form:
// Q4_0 and Q5_0 (offset -8, -16), Q4_1 and Q5_1 (min), Q8_0, the K-quants' sub-block
// scales and minimums, and Q6_K's 16-weight scales (a scale per half, offset -32).
struct WGroup {
    lo: vec4<u32>,
    hi: vec4<u32>,
    scale: vec2<f32>,
    offset: i32,
    min: f32,
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
// Matmul driver, integer family: Y[t, row] = dot(W[row, :], X[t, :]) for a batch of
// tokens t (prompt processing), where the matvecs take one token at a time.
//
// A workgroup computes a tile of TILE_M rows by TILE_N tokens. It walks K in steps of
// K_GROUPS groups of 32: each step decodes the tile's weight groups once into workgroup
// memory as int8 quants with their scales, copies the tokens' x groups (already
// quantized to int8 per 32, q8_x.wgsl's layout: its first plane, as llama.cpp rounds
// activations; the matvecs add the second), and
// then every invocation multiplies its 4 rows by its 4 tokens on dot4I8Packed. So a
// weight is read and decoded once per TILE_N tokens rather than once per token, and
// each decoded group feeds TILE_N dot products.
//
// The kernel file (`<type>_dot4.wgsl`) includes this and its type's decoder
// (`<type>.wgsl`, over io.wgsl).
//
// The host prepends K_GROUPS (groups per step: its workgroup memory is 6 KiB per group).
// Workgroups: x over token tiles, y over row tiles, so that the workgroups running at
// once share their weight rows and read them from DRAM about once.


// x: the tokens' q8 groups (q8_x.wgsl's layout); y: f32, token-major.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const TILE_M: u32 = 64u;
const TILE_N: u32 = 64u;
const WG: u32 = 256u;
// 16 x 16 invocations, each 4 rows (ty + 16i) by 4 tokens (tx + 16j): a subgroup's
// lanes then read consecutive tokens' x (distinct banks) and at most a few rows
// (broadcast).
const SPAN: u32 = 16u;

// Per step: the tile's weight groups, half h of group kg of row r at (h * K_GROUPS + kg)
// * TILE_M + r, with (scale.x, scale.y, offset, min); the tokens' x groups likewise,
// with (d, sum of the first half's int8 values, of the second's, of both as a float).
var<workgroup> wq: array<vec4<u32>, 2u * K_GROUPS * TILE_M>;
var<workgroup> wsc: array<vec4<f32>, K_GROUPS * TILE_M>;
var<workgroup> xq: array<vec4<u32>, 2u * K_GROUPS * TILE_N>;
var<workgroup> xsc: array<vec4<f32>, K_GROUPS * TILE_N>;

fn dot16(q: vec4<u32>, xv: vec4<u32>) -> i32 {
    return dot4I8Packed(q.x, xv.x) + dot4I8Packed(q.y, xv.y)
         + dot4I8Packed(q.z, xv.z) + dot4I8Packed(q.w, xv.w);
}

// Decodes weight groups and copies x groups for the step starting at group g0: item i
// below TILE_M * K_GROUPS is a weight group, the rest x groups. Past the matrix's rows,
// the batch's tokens or K, groups are zero.
fn stage(row0: u32, tok0: u32, g0: u32, lid: u32) {
    let n_groups = params.k / 32u;
    let w_items = TILE_M * K_GROUPS;
    for (var i = lid; i < w_items + TILE_N * K_GROUPS; i += WG) {
        if (i < w_items) {
            // Neighbouring invocations take neighbouring groups of a row.
            let r = i / K_GROUPS;
            let kg = i % K_GROUPS;
            let row = row0 + r;
            let g = g0 + kg;
            var q = WGroup(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), 0, 0.0);
            if (row < params.m && g < n_groups) {
                q = weight_group(row * params.row_bytes, g);
            }
            wq[kg * TILE_M + r] = q.lo;
            wq[(K_GROUPS + kg) * TILE_M + r] = q.hi;
            wsc[kg * TILE_M + r] = vec4<f32>(q.scale, bitcast<f32>(q.offset), q.min);
        } else {
            let j = i - w_items;
            let t = j / K_GROUPS;
            let kg = j % K_GROUPS;
            let tok = tok0 + t;
            let g = g0 + kg;
            var lo = vec4<u32>(0u);
            var hi = vec4<u32>(0u);
            var tail = vec4<f32>(0.0);
            if (tok < params.n_tokens && g < n_groups) {
                let at = tok * params.x_stride + Q8_GROUP_VEC4S * g;
                lo = bitcast<vec4<u32>>(x[at]);
                hi = bitcast<vec4<u32>>(x[at + 1u]);
                tail = x[at + 2u];
            }
            xq[kg * TILE_N + t] = lo;
            xq[(K_GROUPS + kg) * TILE_N + t] = hi;
            let s = bitcast<vec2<i32>>(tail.zw);
            xsc[kg * TILE_N + t] = vec4<f32>(tail.x, tail.z, tail.w, f32(s.x + s.y));
        }
    }
}

struct Staged {
    lo: vec4<u32>,
    hi: vec4<u32>,
    s: vec4<f32>,
}

fn weights_at(kg: u32, r: u32) -> Staged {
    return Staged(wq[kg * TILE_M + r], wq[(K_GROUPS + kg) * TILE_M + r], wsc[kg * TILE_M + r]);
}

fn x_at(kg: u32, t: u32) -> Staged {
    return Staged(xq[kg * TILE_N + t], xq[(K_GROUPS + kg) * TILE_N + t], xsc[kg * TILE_N + t]);
}

// One weight group times one x group:
// xd * (scale.x * (sum(q * xq) + offset * sum(xq)) over the first half + the same over
// the second + min * sum(xq)), the integer sums exact.
fn group_product(a: Staged, b: Staged) -> f32 {
    let offset = bitcast<i32>(a.s.z);
    let s_lo = bitcast<i32>(b.s.y);
    let s_hi = bitcast<i32>(b.s.z);
    let i_lo = dot16(a.lo, b.lo) + offset * s_lo;
    let i_hi = dot16(a.hi, b.hi) + offset * s_hi;
    return b.s.x * (a.s.x * f32(i_lo) + a.s.y * f32(i_hi) + a.s.w * b.s.w);
}

fn row_products(a: Staged, b0: Staged, b1: Staged, b2: Staged, b3: Staged) -> vec4<f32> {
    return vec4<f32>(group_product(a, b0), group_product(a, b1), group_product(a, b2),
                     group_product(a, b3));
}

fn store(row: u32, tok0: u32, tx: u32, acc: vec4<f32>) {
    if (row >= params.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let tok = tok0 + tx + SPAN * j;
        if (tok < params.n_tokens) {
            y[tok * params.y_stride + params.y_offset + row] = acc[j];
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let tok0 = wid.x * TILE_N;
    let row0 = wid.y * TILE_M;
    let tx = lid % SPAN;
    let ty = lid / SPAN;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var g0 = 0u; g0 < params.k / 32u; g0 += K_GROUPS) {
        workgroupBarrier();
        stage(row0, tok0, g0, lid);
        workgroupBarrier();
        for (var kg = 0u; kg < K_GROUPS; kg++) {
            let b0 = x_at(kg, tx);
            let b1 = x_at(kg, tx + SPAN);
            let b2 = x_at(kg, tx + 2u * SPAN);
            let b3 = x_at(kg, tx + 3u * SPAN);
            acc0 += row_products(weights_at(kg, ty), b0, b1, b2, b3);
            acc1 += row_products(weights_at(kg, ty + SPAN), b0, b1, b2, b3);
            acc2 += row_products(weights_at(kg, ty + 2u * SPAN), b0, b1, b2, b3);
            acc3 += row_products(weights_at(kg, ty + 3u * SPAN), b0, b1, b2, b3);
        }
    }
    store(row0 + ty, tok0, tx, acc0);
    store(row0 + ty + SPAN, tok0, tx, acc1);
    store(row0 + ty + 2u * SPAN, tok0, tx, acc2);
    store(row0 + ty + 3u * SPAN, tok0, tx, acc3);
}
// Shared by the Q4_K and Q5_K kernels that read matvec::Layout::KScalesByPair (the
// dot4 matvecs and the matmuls): the 6-bit scales and minimums of sub-blocks 2p and
// 2p + 1 of the super-block whose first 16 bytes are `hdr`. Byte p of hdr.y, hdr.z and
// hdr.w holds the pair's scales and sub-block 2p's minimum in its low 6 bits, and
// sub-block 2p + 1's minimum in their top 2 bits. Returns (sc_2p, sc_2p+1, m_2p, m_2p+1).
fn k_pair_scales(hdr: vec4<u32>, p: u32) -> vec4<u32> {
    let sh = 8u * p;
    let a = hdr.y >> sh;
    let b = hdr.z >> sh;
    let c = hdr.w >> sh;
    return vec4<u32>(a & 63u, b & 63u, c & 63u,
                     ((a >> 6u) & 3u) | ((b >> 4u) & 12u) | ((c >> 2u) & 48u));
}
// Shared by the Q5_K kernels that read matvec::Layout::Q5kByPair (the dot4 matvec and
// the matmul).

// The 5-bit quants of a sub-block, words 0..4 and 4..8: its nibbles (`n0`, `n1`, at
// bits 0..4 of each byte) topped by the fifth bits of qh word `h`. Word k's bits sit at
// 8b + k and go to 8b + 4: up by 4 - k for the first four words, down by k - 4 after.
fn quants(n0: vec4<u32>, n1: vec4<u32>, h: u32) -> array<vec4<u32>, 2> {
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m5 = vec4<u32>(0x10101010u);
    let hv = vec4<u32>(h);
    return array<vec4<u32>, 2>(
        (n0 & m4) | ((hv << vec4<u32>(4u, 3u, 2u, 1u)) & m5),
        (n1 & m4) | ((hv >> vec4<u32>(0u, 1u, 2u, 3u)) & m5),
    );
}

// Q5_K: 256 weights per 176-byte super-block {d: f16, dmin: f16, scales: [u8; 12],
// qh: [u8; 32], qs: [u8; 128]}, as uploaded for matvec/q5_k_dot4
// (matvec::Layout::Q5kByPair): eleven 16-byte pieces, the header, two of qh (word s
// holds sub-block s's fifth bits) and eight of qs. Group s (0..8) of a block is
// sub-block s: nibbles as in Q4_K (q4_k_dot4.wgsl), value d * sc * q - dmin * m.

alias W = vec4<u32>;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let base = (row_byte >> 4u) + (g / 8u) * 11u;
    let s = g % 8u;
    let p = s / 2u;
    let hdr = w[base];
    let n = vec4<u32>(4u * (s & 1u));
    let qh = w[base + 1u + s / 4u][s % 4u];
    let q = quants(w[base + 3u + 2u * p] >> n, w[base + 4u + 2u * p] >> n, qh);
    let sm = k_pair_scales(hdr, p);
    let odd = (s & 1u) == 1u;
    let dm = unpack2x16float(hdr.x);
    let sc = dm.x * f32(select(sm.x, sm.y, odd));
    return WGroup(q[0], q[1], vec2<f32>(sc), 0, -dm.y * f32(select(sm.z, sm.w, odd)));
}
