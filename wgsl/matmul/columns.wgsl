// Matmul driver, a decode step's rows on the matrix units: Y[t, row] = dot(W[row, :],
// X[t, :]) for the tokens of a decode step of many sequences (each token a sequence's
// row), where the prompt's tiles (coopmat.wgsl, 128 tokens a workgroup) would leave
// most of the matrix units' columns empty and too few workgroups to read the weights.
//
// A workgroup of 8 subgroups takes ROWS = ROW_BLOCKS * S rows by TOKENS = TOKEN_BLOCKS
// * S tokens. It walks K in rounds of KS = K_GROUPS * 32: each round decodes the rows'
// weight groups into workgroup memory as CT, and the tokens' x groups from their two
// int8 planes (the dot4 matvecs' q8 x, q8_x.wgsl: value d * (256 q1 + q2)) as CT too;
// then subgroup s multiplies row block s % ROW_BLOCKS by every token block over K part
// s / ROW_BLOCKS of the round (KS / K_PARTS values). At the end the K parts'
// accumulators are summed in part order.
//
// Batch invariance: a token's outputs are the same bits whichever other tokens share
// the dispatch, and however many. Its x column is multiplied by the same weights in
// the same rounds, parts and order wherever it sits in the tile (a matrix unit computes
// each output element from its own row and column alone), tokens past the step's
// count are zeros, and nothing in the arithmetic depends on params.n_tokens.
//
// What bounds it is the staging, not the matrix units: on the H200 a round's decode,
// scalar f16 stores and two barriers are about two thirds of its time, and 32 tokens of
// 14,336 x 4,096 Q4_K run at 3 % of the read probe and 2 % of the matrix probe
// (results/parallel/h200_2026-12-04_columns). Splitting K over more workgroups, the
// last summing the spans through atomics, was slower.
//
// The kernel file (`<type>_columns.wgsl`) includes this and its type's decoder
// (`<type>.wgsl`) and sets FETCH_AHEAD, as coopmat.wgsl's do. The host prepends what
// coopmat.wgsl takes (S, CT, MatA, MatB, MatC, SUBGROUP_MAX, K_GROUPS), ROW_BLOCKS (1,
// 2, 4 or 8) and TOKEN_BLOCKS (1 or 2). As
// there, the workgroup has 8 subgroups of the largest size; where more run, parts are
// computed twice over and stored alike.

#include "matmul/io.wgsl"
#include "matmul/coop_staging.wgsl"
#include "matvec/q8_x.wgsl"
#include "matmul/x_planes.wgsl"

// x: the tokens' q8 groups (q8_x.wgsl's layout); y: f32, token-major.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const SUBGROUPS: u32 = 8u;
const K_PARTS: u32 = SUBGROUPS / ROW_BLOCKS;
const ROWS: u32 = ROW_BLOCKS * S;
const TOKENS: u32 = TOKEN_BLOCKS * S;
const WG: u32 = SUBGROUPS * SUBGROUP_MAX;
const KS: u32 = K_GROUPS * 32u;
// Values of K per subgroup per round.
const KP: u32 = KS / K_PARTS;
// Staged rows are padded by 16 bytes (of f16) so that a matrix load's rows start in
// different banks.
const LD: u32 = KS + 8u;
// An S x S matrix's floats.
const SS: u32 = S * S;

// Per round: weight w[r][k] at staged[r * LD + k]; token t's x[k] at staged[X0 + t *
// LD + k]. yc: each subgroup's accumulators (one S x S per token block), token-major
// as y.
const X0: u32 = ROWS * LD;
var<workgroup> staged: array<CT, (ROWS + TOKENS) * LD>;
var<workgroup> yc: array<f32, SUBGROUPS * TOKEN_BLOCKS * SS>;

// 16 staged x values from the two planes' words: d * (256 q1 + q2).
fn put_x(at: u32, q1: vec4<u32>, q2: vec4<u32>, d: f32) {
    for (var i = 0u; i < 4u; i++) {
        put4(at + 4u * i, q8_planes4(q1[i], q2[i], d));
    }
}

// A round's groups: item i below ROWS * K_GROUPS is a weight group, the rest x groups;
// this invocation takes FETCH_N of them, item lid + n WG.
const ROUND_ITEMS: u32 = (ROWS + TOKENS) * K_GROUPS;
const FETCH_N: u32 = (ROUND_ITEMS + WG - 1u) / WG;

// A fetched group: a weight group (`w`), or a token's x group, its first plane's halves
// in w.lo and w.hi, its second's in lo2 and hi2, its d in w.scale.x. All zero past the
// matrix's rows, the step's tokens or K.
struct RoundGroup {
    w: WGroup,
    lo2: vec4<u32>,
    hi2: vec4<u32>,
}
alias RoundGroups = array<RoundGroup, FETCH_N>;

// Item i of a round: a weight group or an x group, its row (or token) in the tile, and
// its group within the round. Neighbouring invocations take neighbouring groups of a
// row.
struct Item {
    is_w: bool,
    r: u32,
    kg: u32,
}

fn item_of(i: u32) -> Item {
    let w_items = ROWS * K_GROUPS;
    let is_w = i < w_items;
    let j = select(i - w_items, i, is_w);
    return Item(is_w, j / K_GROUPS, j % K_GROUPS);
}

// This invocation's groups of the round at group g0. Where FETCH_AHEAD, they are
// fetched during the round before, ahead of its multiplies, so that their loads'
// latency passes under those multiplies instead of stalling the whole workgroup at the
// barrier (as coopmat.wgsl's steps).
fn fetch_round(row0: u32, tok0: u32, g0: u32, lid: u32) -> RoundGroups {
    let n_groups = params.k / 32u;
    var groups: RoundGroups;
    for (var n = 0u; n < FETCH_N; n++) {
        let i = lid + n * WG;
        let it = item_of(i);
        let g = g0 + it.kg;
        if (i >= ROUND_ITEMS || g >= n_groups) {
            continue;
        }
        if (it.is_w) {
            if (row0 + it.r < params.m) {
                groups[n].w = weight_group((row0 + it.r) * params.row_bytes, g);
            }
        } else if (tok0 + it.r < params.n_tokens) {
            let base = (tok0 + it.r) * params.x_stride + Q8_GROUP_VEC4S * g;
            groups[n].w = WGroup(bitcast<vec4<u32>>(x[base]), bitcast<vec4<u32>>(x[base + 1u]),
                                 vec2<f32>(x[base + 5u].x), 0, 0.0);
            groups[n].lo2 = bitcast<vec4<u32>>(x[base + 3u]);
            groups[n].hi2 = bitcast<vec4<u32>>(x[base + 4u]);
        }
    }
    return groups;
}

// A fetched round's groups as CT into `staged`: weights w[r][k] at r * LD + k, token
// t's x[k] at X0 + t * LD + k.
fn put_round(groups: RoundGroups, lid: u32) {
    for (var n = 0u; n < FETCH_N; n++) {
        let i = lid + n * WG;
        if (i >= ROUND_ITEMS) {
            continue;
        }
        let it = item_of(i);
        let q = groups[n];
        let at = select(X0, 0u, it.is_w) + it.r * LD + it.kg * 32u;
        if (it.is_w) {
            put16(at, q.w.lo, q.w.scale.x, q.w.offset, q.w.min);
            put16(at + 16u, q.w.hi, q.w.scale.y, q.w.offset, q.w.min);
        } else {
            put_x(at, q.w.lo, q.lo2, q.w.scale.x);
            put_x(at + 16u, q.w.hi, q.hi2, q.w.scale.x);
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg: u32) {
    let tok0 = wid.x * TOKENS;
    let row0 = wid.y * ROWS;
    let part = sg % SUBGROUPS;
    let block = part % ROW_BLOCKS;
    let kpart = part / ROW_BLOCKS;
    let a_at = block * S * LD + kpart * KP;
    let b_at = X0 + kpart * KP;
    let mine = part * TOKEN_BLOCKS * SS;
    for (var i = lid; i < SUBGROUPS * TOKEN_BLOCKS * SS; i += WG) {
        yc[i] = 0.0;
    }
    workgroupBarrier();
    var acc0 = coopLoad<MatC>(&yc[mine], S);
    var acc1 = acc0;
    var next = fetch_round(row0, tok0, 0u, lid);
    for (var g0 = 0u; g0 < params.k / 32u; g0 += K_GROUPS) {
        workgroupBarrier();
        if (!FETCH_AHEAD && g0 > 0u) {
            next = fetch_round(row0, tok0, g0, lid);
        }
        put_round(next, lid);
        workgroupBarrier();
        if (FETCH_AHEAD) {
            next = fetch_round(row0, tok0, g0 + K_GROUPS, lid);
        }
        for (var kk = 0u; kk < KP; kk += S) {
            // A = w rows (row-major [r][k]); B = x as K x tokens, each token's k
            // contiguous (column-major).
            let a = coopLoadT<MatA>(&staged[a_at + kk], LD);
            acc0 = coopMultiplyAdd(a, coopLoad<MatB>(&staged[b_at + kk], LD), acc0);
            if (TOKEN_BLOCKS == 2u) {
                let b1 = coopLoad<MatB>(&staged[b_at + S * LD + kk], LD);
                acc1 = coopMultiplyAdd(a, b1, acc1);
            }
        }
    }
    workgroupBarrier();
    coopStore(acc0, &yc[mine], S);
    if (TOKEN_BLOCKS == 2u) {
        coopStore(acc1, &yc[mine + SS], S);
    }
    workgroupBarrier();
    // Row block b and token block tb's sum over the K parts, in part order; element e
    // of an S x S is token e / S, row e % S.
    for (var i = lid; i < ROW_BLOCKS * TOKEN_BLOCKS * SS; i += WG) {
        let b = i / (TOKEN_BLOCKS * SS);
        let tb = (i / SS) % TOKEN_BLOCKS;
        let e = i % SS;
        var sum = 0.0;
        for (var p = 0u; p < K_PARTS; p++) {
            sum += yc[((p * ROW_BLOCKS + b) * TOKEN_BLOCKS + tb) * SS + e];
        }
        let t = tok0 + tb * S + e / S;
        let r = row0 + b * S + e % S;
        if (r < params.m && t < params.n_tokens) {
            y[t * params.y_stride + params.y_offset + r] = sum;
        }
    }
}
