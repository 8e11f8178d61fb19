enable f16;
enable wgpu_cooperative_matrix;
const S: u32 = 16u;
alias CT = f16;
alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias MatC = coop_mat16x16<f32, C>;
const SUBGROUP_MAX: u32 = 32u;
const ROW_PARTS: u32 = 2u;
const BT: u32 = 2u;
const PREFETCH: bool = true;

// Matmul driver, unpacked family: Y[t, row] = dot(W[row, :], X[t, :]) on the adapter's
// matrix units, with W and X already in CT in memory (unpack.wgsl and unpack_x.wgsl,
// once per batch): each subgroup loads its matrices straight from the buffers, so the
// K loop has no workgroup staging, no decoding and no barriers, where coopmat.wgsl
// decodes and stages both operands of every K step in workgroup memory (on the H200
// that staging, not the matrix units, bounds it).
//
// A workgroup of 8 subgroups computes ROW_PARTS x TOKEN_PARTS parts of BR x BT
// matrices of S x S each (BR = 4, BT = 2 or 4): a tile of TILE_ROWS rows by TILE_TOKENS
// tokens, whose subgroups read the same rows and tokens, so that most of their loads
// come from the cache; each matrix loaded feeds BT or BR multiplies. With PREFETCH a
// subgroup loads step k + S's matrices before it multiplies step k's (a register
// double buffer), so the loads are in flight during the multiplies. The third and
// fourth token blocks are written out under `if (BT == 4u)`: a constant the compiler
// folds, so no matrix sits in an indexed array.
//
// W holds whole tiles of rows (row r's K values at r * k) and X whole tiles of tokens
// (token t's at t * k): the loads never leave the buffers. Rows and tokens past the
// matrix's and the batch's hold zeros or stale values; an output depends on nothing but
// its own row and token, and theirs are not stored.
//
// The host prepends the `f16` and `wgpu_cooperative_matrix` enables and S, CT, MatA,
// MatB and MatC (as coopmat.wgsl), SUBGROUP_MAX, ROW_PARTS (1, 2, 4 or 8), BT (2 or 4)
// and PREFETCH.
// The workgroup has 8 subgroups of the largest size; where more run, parts are computed
// twice over and stored alike. Workgroups: x over token tiles, y over row tiles.

const SUBGROUPS: u32 = 8u;
const TOKEN_PARTS: u32 = SUBGROUPS / ROW_PARTS;
const BR: u32 = 4u;
const TILE_ROWS: u32 = ROW_PARTS * BR * S;
const TILE_TOKENS: u32 = TOKEN_PARTS * BT * S;
const WG: u32 = SUBGROUPS * SUBGROUP_MAX;

struct Params {
    m: u32,          // rows of W (of y per token)
    k: u32,
    n_tokens: u32,
    y_offset: u32,   // output element of row 0 within a token's row of y
    y_stride: u32,   // floats per token in y
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> wu: array<CT>;
@group(0) @binding(2) var<storage, read> xu: array<CT>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// Each subgroup's S x S, column-major (token-major, as y), for the matrices going out;
// zeroed first, where the accumulators start.
var<workgroup> yc: array<f32, SUBGROUPS * S * S>;

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
    let part = sg % SUBGROUPS;
    let row = wid.y * TILE_ROWS + (part / TOKEN_PARTS) * BR * S;
    let tok = wid.x * TILE_TOKENS + (part % TOKEN_PARTS) * BT * S;
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
    var c02 = c00;
    var c03 = c00;
    var c12 = c00;
    var c13 = c00;
    var c22 = c00;
    var c23 = c00;
    var c32 = c00;
    var c33 = c00;
    let k = params.k;
    // A = w rows (row-major [r][k]); B = x as K x tokens, each token's k contiguous
    // (column-major). Matrix i's first element: rows at a + i * sk, tokens at b + i * sk.
    let a = row * k;
    let b = tok * k;
    let sk = S * k;
    if (PREFETCH) {
        var a0 = coopLoadT<MatA>(&wu[a], k);
        var a1 = coopLoadT<MatA>(&wu[a + sk], k);
        var a2 = coopLoadT<MatA>(&wu[a + 2u * sk], k);
        var a3 = coopLoadT<MatA>(&wu[a + 3u * sk], k);
        var b0 = coopLoad<MatB>(&xu[b], k);
        var b1 = coopLoad<MatB>(&xu[b + sk], k);
        // Token blocks 2 and 3 start as blocks 0 and 1 where BT is 2 (never multiplied).
        var b2 = b0;
        var b3 = b1;
        if (BT == 4u) {
            b2 = coopLoad<MatB>(&xu[b + 2u * sk], k);
            b3 = coopLoad<MatB>(&xu[b + 3u * sk], k);
        }
        for (var kk = 0u; kk < k; kk += S) {
            // The last step loads itself again: no load past the row.
            let kn = min(kk + S, k - S);
            let na0 = coopLoadT<MatA>(&wu[a + kn], k);
            let na1 = coopLoadT<MatA>(&wu[a + sk + kn], k);
            let na2 = coopLoadT<MatA>(&wu[a + 2u * sk + kn], k);
            let na3 = coopLoadT<MatA>(&wu[a + 3u * sk + kn], k);
            let nb0 = coopLoad<MatB>(&xu[b + kn], k);
            let nb1 = coopLoad<MatB>(&xu[b + sk + kn], k);
            var nb2 = b2;
            var nb3 = b3;
            if (BT == 4u) {
                nb2 = coopLoad<MatB>(&xu[b + 2u * sk + kn], k);
                nb3 = coopLoad<MatB>(&xu[b + 3u * sk + kn], k);
            }
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            if (BT == 4u) {
                c02 = coopMultiplyAdd(a0, b2, c02);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c12 = coopMultiplyAdd(a1, b2, c12);
                c13 = coopMultiplyAdd(a1, b3, c13);
                c22 = coopMultiplyAdd(a2, b2, c22);
                c23 = coopMultiplyAdd(a2, b3, c23);
                c32 = coopMultiplyAdd(a3, b2, c32);
                c33 = coopMultiplyAdd(a3, b3, c33);
            }
            a0 = na0;
            a1 = na1;
            a2 = na2;
            a3 = na3;
            b0 = nb0;
            b1 = nb1;
            b2 = nb2;
            b3 = nb3;
        }
    } else {
        for (var kk = 0u; kk < k; kk += S) {
            let b0 = coopLoad<MatB>(&xu[b + kk], k);
            let b1 = coopLoad<MatB>(&xu[b + sk + kk], k);
            let a0 = coopLoadT<MatA>(&wu[a + kk], k);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            let a1 = coopLoadT<MatA>(&wu[a + sk + kk], k);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            let a2 = coopLoadT<MatA>(&wu[a + 2u * sk + kk], k);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            let a3 = coopLoadT<MatA>(&wu[a + 3u * sk + kk], k);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            if (BT == 4u) {
                let b2 = coopLoad<MatB>(&xu[b + 2u * sk + kk], k);
                let b3 = coopLoad<MatB>(&xu[b + 3u * sk + kk], k);
                c02 = coopMultiplyAdd(a0, b2, c02);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c12 = coopMultiplyAdd(a1, b2, c12);
                c13 = coopMultiplyAdd(a1, b3, c13);
                c22 = coopMultiplyAdd(a2, b2, c22);
                c23 = coopMultiplyAdd(a2, b3, c23);
                c32 = coopMultiplyAdd(a3, b2, c32);
                c33 = coopMultiplyAdd(a3, b3, c33);
            }
        }
    }
    put_out(c00, mine, row, tok, lane, lanes);
    put_out(c01, mine, row, tok + S, lane, lanes);
    put_out(c10, mine, row + S, tok, lane, lanes);
    put_out(c11, mine, row + S, tok + S, lane, lanes);
    put_out(c20, mine, row + 2u * S, tok, lane, lanes);
    put_out(c21, mine, row + 2u * S, tok + S, lane, lanes);
    put_out(c30, mine, row + 3u * S, tok, lane, lanes);
    put_out(c31, mine, row + 3u * S, tok + S, lane, lanes);
    if (BT == 4u) {
        let t2 = tok + 2u * S;
        let t3 = tok + 3u * S;
        put_out(c02, mine, row, t2, lane, lanes);
        put_out(c03, mine, row, t3, lane, lanes);
        put_out(c12, mine, row + S, t2, lane, lanes);
        put_out(c13, mine, row + S, t3, lane, lanes);
        put_out(c22, mine, row + 2u * S, t2, lane, lanes);
        put_out(c23, mine, row + 2u * S, t3, lane, lanes);
        put_out(c32, mine, row + 3u * S, t2, lane, lanes);
        put_out(c33, mine, row + 3u * S, t3, lane, lanes);
    }
}
