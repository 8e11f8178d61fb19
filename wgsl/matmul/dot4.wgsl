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

#include "matmul/io.wgsl"
#include "matvec/q8_x.wgsl"

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
