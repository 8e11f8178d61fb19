// Matmul driver, a decode step's rows on the matrix units: Y[t, row] = dot(W[row, :],
// X[t, :]) for the tokens of a decode step of many sequences (each token a sequence's
// row), where the prompt's tiles (coopmat.wgsl, 128 tokens a workgroup) would leave
// most of the matrix units' columns empty and too few workgroups to read the weights.
//
// A workgroup of 8 subgroups takes ROWS = ROW_BLOCKS * S rows by TOKENS = TOKEN_BLOCKS
// * S tokens. It walks K in rounds of KS = K_GROUPS * 32: each round decodes the rows'
// weight groups into workgroup memory as CT, and the tokens' x groups from their two
// int8 planes (the dot4 matvecs' q8 x, q8_x.wgsl: value d * (256 q1 + q2)) as CT too;
// then the subgroups multiply the rows by the tokens in K_PARTS parts of the round
// (KS / K_PARTS values each), each part with accumulators of its own. Subgroup s takes
// row block s % ROW_BLOCKS, every token block, and PARTS = K_PARTS / SPREAD of the
// parts, SPREAD = 8 / ROW_BLOCKS apart from part s / ROW_BLOCKS. At the end the
// parts' accumulators are summed in part order.
//
// K_PARTS is the host's, not ROW_BLOCKS's: a tile of twice the row blocks and two parts
// a subgroup sums the same parts in the same order as one of half the row blocks and
// one, so the two give a token the same bits (the plan's narrow and wide tiles).
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
// (results/parallel/h200_2026-12-04_columns). Four values a store (staged_vec4.wgsl)
// shortened rounds by 1-4 % only; the loads are most of a round on an H100
// (results/parallel/vec4_staging), so an invocation issues all its loads of a round
// before it stages any (fetch_round: the wide tile's rounds 7-11 % shorter, 32
// sequences 1.10x; results/parallel/fetch_round). Fetching a round ahead, under the
// multiplies of the one before, held more registers and gained nothing; nor did rounds
// of 8 groups. Splitting K over more workgroups, the last summing the spans through
// atomics, was slower; K spans summed by a second dispatch (below) run a matrix of few
// row tiles up to 2x faster on an H100 (results/parallel/columns_experiments, section
// 6).
//
// K spans: with K_SPANS > 1 the workgroups of z index s take span s of K's rounds (as
// even a share as whole rounds allow), so that a matrix of few row tiles still
// has workgroups on every multiprocessor, and write their span's sums to y as if it had
// K_SPANS times the tokens: span s's token t at row s * n_tokens + t. The host points y
// at a scratch buffer and sums the spans in span order (span_sum.wgsl); a token's spans
// are the same rounds whoever shares the dispatch, so its outputs stay the same bits.
//
// The kernel file (`<type>_columns.wgsl`) includes this and its type's decoder
// (`<type>.wgsl`). The host prepends what coopmat.wgsl takes (S, CT, MatA, MatB, MatC,
// SUBGROUP_MAX, K_GROUPS, STAGED), ROW_BLOCKS (1, 2, 4 or 8), TOKEN_BLOCKS (1 or 2),
// K_PARTS (8 / ROW_BLOCKS or twice that) and K_SPANS (1 or more). As there, the
// workgroup has 8 subgroups of the largest size; where more run, parts are computed
// twice over and stored alike.

#include "matmul/io.wgsl"
#include "matmul/coop_staging.wgsl"
#include "matvec/q8_x.wgsl"
#include "matmul/x_planes.wgsl"

// x: the tokens' q8 groups (q8_x.wgsl's layout); y: f32, token-major.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const SUBGROUPS: u32 = 8u;
// Parts apart of a subgroup's own, and how many it takes (1 or 2).
const SPREAD: u32 = SUBGROUPS / ROW_BLOCKS;
const PARTS: u32 = K_PARTS / SPREAD;
const ROWS: u32 = ROW_BLOCKS * S;
const TOKENS: u32 = TOKEN_BLOCKS * S;
const WG: u32 = SUBGROUPS * SUBGROUP_MAX;
const KS: u32 = K_GROUPS * 32u;
// Values of K per part per round.
const KP: u32 = KS / K_PARTS;
// The outputs each invocation sums.
const OUTS: u32 = (ROW_BLOCKS * TOKEN_BLOCKS * SS + WG - 1u) / WG;
// Staged rows are padded by 16 bytes (of f16) so that a matrix load's rows start in
// different banks.
const LD: u32 = KS + 8u;
// An S x S matrix's floats.
const SS: u32 = S * S;

// Per round: weight w[r][k] at staged[r * LD + k]; token t's x[k] at staged[X0 + t *
// LD + k]. yc: each subgroup's accumulators of one part (one S x S per token block),
// token-major as y.
const X0: u32 = ROWS * LD;
var<workgroup> staged: array<Staged, (ROWS + TOKENS) * LD / STAGED_VALUES>;
var<workgroup> yc: array<f32, SUBGROUPS * TOKEN_BLOCKS * SS>;

// 16 staged x values from the two planes' words: d * (256 q1 + q2).
fn put_x(at: u32, q1: vec4<u32>, q2: vec4<u32>, d: f32) {
    for (var i = 0u; i < 4u; i++) {
        put4(at + 4u * i, q8_planes4(q1[i], q2[i], d));
    }
}

// A round's items: item i below ROWS * K_GROUPS is a weight group, the rest x groups;
// an invocation takes FETCH_N of them, items lid + n WG. Neighbouring invocations take
// neighbouring groups of a row.
const W_ITEMS: u32 = ROWS * K_GROUPS;
const ROUND_ITEMS: u32 = W_ITEMS + TOKENS * K_GROUPS;
const FETCH_N: u32 = (ROUND_ITEMS + WG - 1u) / WG;

// An item as fetched: a weight group (q), or an x group's first plane in q.lo and
// q.hi, its second in lo2 and hi2 and its d in q.scale.x.
struct Fetched {
    q: WGroup,
    lo2: vec4<u32>,
    hi2: vec4<u32>,
}
alias RoundGroups = array<Fetched, FETCH_N>;

// This invocation's items of the round at group g0, all fetched before any is staged:
// fetched and staged one at a time, an invocation with two items waited on two loads
// one after the other (results/parallel/vec4_staging, the ablations). Past the
// matrix's rows, the step's tokens or K, items are zeros.
fn fetch_round(row0: u32, tok0: u32, g0: u32, lid: u32) -> RoundGroups {
    let n_groups = params.k / 32u;
    var f: RoundGroups;
    for (var n = 0u; n < FETCH_N; n++) {
        let i = lid + n * WG;
        let g = g0 + i % K_GROUPS;
        if (g >= n_groups) {
            continue;
        }
        if (i < W_ITEMS) {
            let row = row0 + i / K_GROUPS;
            if (row < params.m) {
                f[n].q = weight_group(row * params.row_bytes, g);
            }
        } else if (i < ROUND_ITEMS) {
            let t = tok0 + (i - W_ITEMS) / K_GROUPS;
            if (t < params.n_tokens) {
                let base = t * params.x_stride + Q8_GROUP_VEC4S * g;
                f[n].q.lo = bitcast<vec4<u32>>(x[base]);
                f[n].q.hi = bitcast<vec4<u32>>(x[base + 1u]);
                f[n].lo2 = bitcast<vec4<u32>>(x[base + 3u]);
                f[n].hi2 = bitcast<vec4<u32>>(x[base + 4u]);
                f[n].q.scale.x = x[base + 5u].x;
            }
        }
    }
    return f;
}

// A fetched round's items as CT into `staged`: weight row r's group kg at r * LD + kg *
// 32, token t's at X0 + t * LD + kg * 32.
fn put_round(f: RoundGroups, lid: u32) {
    for (var n = 0u; n < FETCH_N; n++) {
        let i = lid + n * WG;
        let kg = i % K_GROUPS;
        let q = f[n].q;
        if (i < W_ITEMS) {
            put_group(i / K_GROUPS * LD + kg * 32u, q);
        } else if (i < ROUND_ITEMS) {
            let at = X0 + (i - W_ITEMS) / K_GROUPS * LD + kg * 32u;
            put_x(at, q.lo, f[n].lo2, q.scale.x);
            put_x(at + 16u, q.hi, f[n].hi2, q.scale.x);
        }
    }
}

// Output i of a workgroup's tile as (row block, token block, element e of its S x S:
// token e / S, row e % S).
fn output_at(i: u32) -> vec3<u32> {
    return vec3<u32>(i / (TOKEN_BLOCKS * SS), (i / SS) % TOKEN_BLOCKS, i % SS);
}

// Adds to each of the invocation's outputs the parts the subgroups' accumulators in yc
// hold, in part order.
fn add_parts(sums: ptr<function, array<f32, OUTS>>, lid: u32) {
    for (var n = 0u; n < OUTS; n++) {
        let i = lid + n * WG;
        if (i < ROW_BLOCKS * TOKEN_BLOCKS * SS) {
            let o = output_at(i);
            for (var p = 0u; p < SPREAD; p++) {
                (*sums)[n] += yc[((p * ROW_BLOCKS + o.x) * TOKEN_BLOCKS + o.y) * SS + o.z];
            }
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
    // The subgroup's second part, where it takes two.
    let a2_at = a_at + SPREAD * KP;
    let b2_at = b_at + SPREAD * KP;
    let mine = part * TOKEN_BLOCKS * SS;
    for (var i = lid; i < SUBGROUPS * TOKEN_BLOCKS * SS; i += WG) {
        yc[i] = 0.0;
    }
    workgroupBarrier();
    var acc0 = coopLoad<MatC>(&yc[mine], S);
    var acc1 = acc0;
    var acc2 = acc0;
    var acc3 = acc0;
    // Span s: rounds s * rounds / K_SPANS up to (s + 1) * rounds / K_SPANS.
    let n_groups = params.k / 32u;
    let rounds = (n_groups + K_GROUPS - 1u) / K_GROUPS;
    let first = wid.z * rounds / K_SPANS * K_GROUPS;
    let end = min((wid.z + 1u) * rounds / K_SPANS * K_GROUPS, n_groups);
    for (var g0 = first; g0 < end; g0 += K_GROUPS) {
        workgroupBarrier();
        put_round(fetch_round(row0, tok0, g0, lid), lid);
        workgroupBarrier();
        for (var kk = 0u; kk < KP; kk += S) {
            // A = w rows (row-major [r][k]); B = x as K x tokens, each token's k
            // contiguous (column-major).
            let a = coopLoadT<MatA>(&staged[cell(a_at + kk)], LDS);
            acc0 = coopMultiplyAdd(a, coopLoad<MatB>(&staged[cell(b_at + kk)], LDS), acc0);
            if (TOKEN_BLOCKS == 2u) {
                let b1 = coopLoad<MatB>(&staged[cell(b_at + S * LD + kk)], LDS);
                acc1 = coopMultiplyAdd(a, b1, acc1);
            }
            if (PARTS == 2u) {
                let a2 = coopLoadT<MatA>(&staged[cell(a2_at + kk)], LDS);
                acc2 = coopMultiplyAdd(a2, coopLoad<MatB>(&staged[cell(b2_at + kk)], LDS), acc2);
                if (TOKEN_BLOCKS == 2u) {
                    let b3 = coopLoad<MatB>(&staged[cell(b2_at + S * LD + kk)], LDS);
                    acc3 = coopMultiplyAdd(a2, b3, acc3);
                }
            }
        }
    }
    // Each row block and token block's sum over the parts, in part order: the
    // subgroups' first parts, then (where they take two) their second.
    var sums: array<f32, OUTS>;
    workgroupBarrier();
    coopStore(acc0, &yc[mine], S);
    if (TOKEN_BLOCKS == 2u) {
        coopStore(acc1, &yc[mine + SS], S);
    }
    workgroupBarrier();
    add_parts(&sums, lid);
    if (PARTS == 2u) {
        workgroupBarrier();
        coopStore(acc2, &yc[mine], S);
        if (TOKEN_BLOCKS == 2u) {
            coopStore(acc3, &yc[mine + SS], S);
        }
        workgroupBarrier();
        add_parts(&sums, lid);
    }
    for (var n = 0u; n < OUTS; n++) {
        let i = lid + n * WG;
        let o = output_at(i);
        let t = tok0 + o.y * S + o.z / S;
        let r = row0 + o.x * S + o.z % S;
        if (i < ROW_BLOCKS * TOKEN_BLOCKS * SS && r < params.m && t < params.n_tokens) {
            y[(wid.z * params.n_tokens + t) * params.y_stride + params.y_offset + r] = sums[n];
        }
    }
}
