// Matmul driver, cooperative-matrix family: Y[t, row] = dot(W[row, :], X[t, :]) on the
// adapter's matrix units (NVIDIA's tensor cores through VK_KHR_cooperative_matrix,
// Apple's simdgroup matrices), where dot4.wgsl multiplies on dot4I8Packed.
//
// A workgroup of 8 subgroups computes a tile of TILE rows by TILE tokens (8 S: 128 at
// S = 16), so that each staged value feeds many multiplies. It walks K in steps of
// K_GROUPS groups of 32: each step decodes the tile's weight groups once into workgroup
// memory as CT (f16, or f32 where the adapter multiplies only f32), and the tokens' x
// groups, int8 per 32 as the dot4 kernels take them, as their values q * d. Subgroup s
// then multiplies its part of the tile (a 2 x 4 grid of parts, 4 x 2 matrices of S x S
// each), accumulating in f32 across the whole of K. Each matrix goes out through the
// subgroup's own S x S of workgroup memory, so partial tiles store only what is inside
// the matrix.
//
// The kernel file (`<type>_coopmat.wgsl`) includes this and its type's decoder
// (`<type>.wgsl`, over io.wgsl). The host prepends the `f16` and
// `wgpu_cooperative_matrix` enables and
//   const S: u32              the matrix size the adapter offers (8 or 16)
//   alias CT                  the multiplied element: f16 or f32
//   alias MatA, MatB, MatC    coop_mat<S>x<S><CT, A>, <CT, B> and <f32, C>
//   const SUBGROUP_MAX: u32   the adapter's largest subgroup
//   const K_GROUPS: u32       groups of 32 per K step, as workgroup memory allows
//   STAGED                    staged_vec4.wgsl or staged_scalar.wgsl: how values are
//                             stored for the matrix loads (coop_staging.wgsl)
// and the kernel file sets
//   const FETCH_AHEAD: bool   whether a step's groups are fetched during the step
//                             before it or at its own start
// The workgroup has 8 subgroups of the largest size, so at least 8 of whatever size
// runs. Where more run, the parts are computed twice over (cooperative operations
// must be in uniform control flow, so no subgroup can sit them out) and stored alike.

#include "matmul/io.wgsl"
#include "matvec/q8_x.wgsl"

// x: the tokens' q8 groups (q8_x.wgsl's layout); y: f32, token-major.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const SUBGROUPS: u32 = 8u;
// A subgroup's part: BR x BT matrices; the parts: 2 (rows) x 4 (tokens).
const BR: u32 = 4u;
const BT: u32 = 2u;
const TILE: u32 = 2u * BR * S;
const WG: u32 = SUBGROUPS * SUBGROUP_MAX;
const KS: u32 = K_GROUPS * 32u;
// Staged rows are padded by 16 bytes (of f16) so that the rows a matrix load reads
// start in different banks.
const LD: u32 = KS + 8u;

// Per step: weight w[r][k] of the tile at staged[r * LD + k], x[t][k] after them at
// staged[X0 + t * LD + k]. yc: each subgroup's S x S, column-major (token-major, as y),
// for the matrices going out; zeroed first, where the accumulators start.
const X0: u32 = TILE * LD;
var<workgroup> staged: array<Staged, 2u * TILE * LD / STAGED_VALUES>;
var<workgroup> yc: array<f32, SUBGROUPS * S * S>;

#include "matmul/coop_staging.wgsl"

// A K step's groups: item i below TILE * K_GROUPS is a weight group, the rest x
// groups; this invocation takes FETCH_N of them, item lid + n WG.
const STEP_ITEMS: u32 = 2u * TILE * K_GROUPS;
const FETCH_N: u32 = (STEP_ITEMS + WG - 1u) / WG;
alias StepGroups = array<WGroup, FETCH_N>;

// Item i of a step: a weight group or an x group, its row (or token) in the tile, and
// its group within the step. Neighbouring invocations take neighbouring groups of a row.
struct Item {
    is_w: bool,
    r: u32,
    kg: u32,
}

fn item_of(i: u32) -> Item {
    let items = TILE * K_GROUPS;
    let is_w = i < items;
    let j = select(i - items, i, is_w);
    return Item(is_w, j / K_GROUPS, j % K_GROUPS);
}

// Where item i is staged.
fn item_at(i: u32) -> u32 {
    let it = item_of(i);
    return select(X0, 0u, it.is_w) + it.r * LD + it.kg * 32u;
}

// This invocation's groups of the step at group g0 (zero past the matrix's rows, the
// batch's tokens or K). Where FETCH_AHEAD, they are fetched during the step before,
// ahead of its multiplies, so that their loads' latency passes under those multiplies
// instead of stalling the whole workgroup at the barrier.
fn fetch_step(row0: u32, tok0: u32, g0: u32, lid: u32) -> StepGroups {
    let n_groups = params.k / 32u;
    var groups: StepGroups;
    for (var n = 0u; n < FETCH_N; n++) {
        let i = lid + n * WG;
        let it = item_of(i);
        let r = it.r;
        let g = g0 + it.kg;
        if (i >= STEP_ITEMS || g >= n_groups) {
            continue;
        }
        if (it.is_w) {
            if (row0 + r < params.m) {
                groups[n] = weight_group((row0 + r) * params.row_bytes, g);
            }
        } else if (tok0 + r < params.n_tokens) {
            let base = (tok0 + r) * params.x_stride + Q8_GROUP_VEC4S * g;
            groups[n] = WGroup(bitcast<vec4<u32>>(x[base]), bitcast<vec4<u32>>(x[base + 1u]),
                               vec2<f32>(x[base + 2u].x), 0, 0.0);
        }
    }
    return groups;
}

// A fetched step's groups as CT into `staged`.
fn put_step(groups: StepGroups, lid: u32) {
    for (var n = 0u; n < FETCH_N; n++) {
        let i = lid + n * WG;
        if (i < STEP_ITEMS) {
            put_group(item_at(i), groups[n]);
        }
    }
}

// One accumulator matrix, whose first row and token are `row` and `tok`, to y through
// the subgroup's scratch at `mine`.
fn put_out(c: MatC, mine: u32, row: u32, tok: u32, lane: u32, lanes: u32) {
    workgroupBarrier();
    coopStore(c, &yc[mine], S);
    workgroupBarrier();
    for (var e = lane; e < S * S; e += lanes) {
        let t = tok + e / S;
        let r = row + e % S;
        if (r < params.m && t < params.n_tokens) {
            y[t * params.y_stride + params.y_offset + r] = yc[mine + e];
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) lanes: u32) {
    let tok0 = wid.x * TILE;
    let row0 = wid.y * TILE;
    let part = sg % SUBGROUPS;
    // The part's first row and token within the tile.
    let pr = (part / 4u) * BR * S;
    let pt = (part % 4u) * BT * S;
    let mine = part * S * S;
    for (var i = lid; i < SUBGROUPS * S * S; i += WG) {
        yc[i] = 0.0;
    }
    workgroupBarrier();
    var c00 = coopLoad<MatC>(&yc[mine], S);
    var c01 = c00;
    var c10 = c00;
    var c11 = c00;
    var c20 = c00;
    var c21 = c00;
    var c30 = c00;
    var c31 = c00;
    var next = fetch_step(row0, tok0, 0u, lid);
    for (var g0 = 0u; g0 < params.k / 32u; g0 += K_GROUPS) {
        workgroupBarrier();
        if (!FETCH_AHEAD && g0 > 0u) {
            next = fetch_step(row0, tok0, g0, lid);
        }
        put_step(next, lid);
        workgroupBarrier();
        if (FETCH_AHEAD) {
            next = fetch_step(row0, tok0, g0 + K_GROUPS, lid);
        }
        for (var kk = 0u; kk < KS; kk += S) {
            // A = w rows (row-major [r][k]); B = x as K x tokens, each token's k
            // contiguous (column-major).
            let b0 = coopLoad<MatB>(&staged[cell(X0 + pt * LD + kk)], LDS);
            let b1 = coopLoad<MatB>(&staged[cell(X0 + (pt + S) * LD + kk)], LDS);
            let a0 = coopLoadT<MatA>(&staged[cell(pr * LD + kk)], LDS);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            let a1 = coopLoadT<MatA>(&staged[cell((pr + S) * LD + kk)], LDS);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            let a2 = coopLoadT<MatA>(&staged[cell((pr + 2u * S) * LD + kk)], LDS);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            let a3 = coopLoadT<MatA>(&staged[cell((pr + 3u * S) * LD + kk)], LDS);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
        }
    }
    let row = row0 + pr;
    let tok = tok0 + pt;
    put_out(c00, mine, row, tok, lane, lanes);
    put_out(c01, mine, row, tok + S, lane, lanes);
    put_out(c10, mine, row + S, tok, lane, lanes);
    put_out(c11, mine, row + S, tok + S, lane, lanes);
    put_out(c20, mine, row + 2u * S, tok, lane, lanes);
    put_out(c21, mine, row + 2u * S, tok + S, lane, lanes);
    put_out(c30, mine, row + 3u * S, tok, lane, lanes);
    put_out(c31, mine, row + 3u * S, tok + S, lane, lanes);
}
