enable f16;
enable wgpu_cooperative_matrix;
const S: u32 = 16u;
alias CT = f16;
alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias MatC = coop_mat16x16<f32, C>;
// STAGED: wgsl/matmul/staged_vec4.wgsl
const SUBGROUP_MAX: u32 = 32u;
const K_GROUPS: u32 = 4u;
const ROW_BLOCKS: u32 = 2u;
const TOKEN_BLOCKS: u32 = 2u;
const K_PARTS: u32 = 4u;
const K_SPANS: u32 = 1u;

// The matrix-unit drivers' staging (coop_staging.wgsl) where a matrix load may read
// through a pointer to vectors of its elements (SPIR-V): four values a store. The
// staging is what bounds these kernels' rounds, and a scalar store per value was most
// of its instructions. The includer declares `staged` as array<Staged> and divides its
// matrix loads' offsets and row strides, which count values, by STAGED_VALUES.

alias Staged = vec4<CT>;
const STAGED_VALUES: u32 = 4u;

// Four values as CT at values at..at + 4 (at a multiple of 4).
fn put4(at: u32, v: vec4<f32>) {
    staged[at / 4u] = vec4<CT>(v);
}
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
// The one formula for the drivers that turn a weight group (io.wgsl's WGroup) into the
// values they multiply on the matrix units (coop_staging.wgsl, unpack.wgsl).

// Four of a group's values, those of the int8 quants of word q: scale * (q + offset) +
// min.
fn group_values4(q: u32, scale: f32, offset: i32, min: f32) -> vec4<f32> {
    return vec4<f32>(unpack4xI8(q) + vec4<i32>(offset)) * scale + min;
}
// Staging shared by the drivers on cooperative matrices (coopmat.wgsl, columns.wgsl):
// groups of 32 values written as CT into the includer's `staged` (array<Staged>), where
// the matrix loads read them. The host picks how values are stored (STAGED: put4,
// Staged and STAGED_VALUES from staged_vec4.wgsl or staged_scalar.wgsl); offsets here
// count values.


// A staged row's stride in elements of `staged` (the includer's LD counts values).
const LDS: u32 = LD / STAGED_VALUES;

// The element of `staged` that value `at` starts (at a multiple of STAGED_VALUES).
fn cell(at: u32) -> u32 {
    return at / STAGED_VALUES;
}

// 16 staged values from four words of int8 quants: scale * (q + offset) + min.
fn put16(at: u32, q: vec4<u32>, scale: f32, offset: i32, min: f32) {
    for (var i = 0u; i < 4u; i++) {
        put4(at + 4u * i, group_values4(q[i], scale, offset, min));
    }
}

// A weight group's 32 values (the includer's io.wgsl WGroup) at `at`.
fn put_group(at: u32, q: WGroup) {
    put16(at, q.lo, q.scale.x, q.offset, q.min);
    put16(at + 16u, q.hi, q.scale.y, q.offset, q.min);
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
// The one formula for the drivers that turn q8 x (q8_x.wgsl) back into values from
// both int8 planes (columns.wgsl, unpack_x.wgsl).

// Four values of x from the two planes' words q1 and q2: d * (256 q1 + q2).
fn q8_planes4(q1: u32, q2: u32, d: f32) -> vec4<f32> {
    return vec4<f32>(256 * unpack4xI8(q1) + unpack4xI8(q2)) * d;
}
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
// Byte reads over the includer's `w: array<u32>`, for the kernels that decode GGUF blocks
// a weight at a time (the scalar matvecs, the fma matmuls) and the dot4 kernels' word
// reads (bytes_dot4.wgsl). Each reads only the word that holds its bytes: blocks of 18,
// 20, 22, 24, 34 and 210 bytes leave rows only 2-byte aligned, and a part's last row
// may end where its binding does.

fn load_byte(byte: u32) -> u32 {
    return (w[byte >> 2u] >> ((byte & 3u) * 8u)) & 0xffu;
}

// WGSL has no i8: the byte is moved to the top of an i32 and shifted back
// arithmetically, which sign-extends it.
fn load_i8(byte: u32) -> i32 {
    return bitcast<i32>(load_byte(byte) << 24u) >> 24u;
}

// The f16 at 2-aligned byte offset `byte`, widened. Every f16 of a GGUF row is 2-byte
// aligned (blocks and their fields have even sizes), so it lies in one word.
fn load_f16(byte: u32) -> f32 {
    return unpack2x16float(w[byte >> 2u] >> (8u * (byte & 2u))).x;
}
// Shared by the dot4 kernels that read their weights as words (alias W = u32): blocks of
// 18, 22, 34 and 210 bytes leave fields only 2-byte aligned. The alignment of a field
// differs between neighbouring lanes' blocks, so only the lanes that need a second word
// load it.


// The 4 bytes at 2-aligned byte offset `byte`.
fn word_at(byte: u32) -> u32 {
    let i = byte >> 2u;
    let lo = w[i];
    if ((byte & 2u) == 0u) {
        return lo;
    }
    return (lo >> 16u) | (w[i + 1u] << 16u);
}

// The 16 bytes at 2-aligned byte offset `byte`.
fn piece(byte: u32) -> vec4<u32> {
    let i = byte >> 2u;
    let a = w[i];
    let b = w[i + 1u];
    let c = w[i + 2u];
    let d = w[i + 3u];
    if ((byte & 2u) == 0u) {
        return vec4<u32>(a, b, c, d);
    }
    let e = w[i + 4u];
    return vec4<u32>((a >> 16u) | (b << 16u), (b >> 16u) | (c << 16u),
                     (c >> 16u) | (d << 16u), (d >> 16u) | (e << 16u));
}

// Q4_0: 32 weights per 18-byte block {d: f16, qs: [u8; 16]}; weight i is the low nibble
// of qs[i], weight i + 16 its high nibble, value d * (q - 8). As uploaded for
// matvec/q4_0_dot4 (the GGUF bytes); blocks are 2-byte aligned.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let o = row_byte + g * 18u;
    let qs = piece(o + 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return WGroup(qs & m4, (qs >> vec4<u32>(4u)) & m4, vec2<f32>(load_f16(o)), -8, 0.0);
}
