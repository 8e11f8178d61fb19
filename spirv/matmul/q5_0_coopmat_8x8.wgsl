enable f16;
enable wgpu_cooperative_matrix;
const S: u32 = 8u;
alias CT = f16;
alias MatA = coop_mat8x8<f16, A>;
alias MatB = coop_mat8x8<f16, B>;
alias MatC = coop_mat8x8<f32, C>;
// STAGED: wgsl/matmul/staged_scalar.wgsl
const SUBGROUP_MAX: u32 = 32u;
const K_GROUPS: u32 = 2u;

// The matrix-unit drivers' staging (coop_staging.wgsl) where matrix loads take scalar
// pointers (the MSL naga writes for Metal): a store per value. As staged_vec4.wgsl,
// whose contract this keeps: `staged` is array<Staged>, offsets count values.

alias Staged = CT;
const STAGED_VALUES: u32 = 1u;

// Four values as CT at values at..at + 4.
fn put4(at: u32, v: vec4<f32>) {
    let c = vec4<CT>(v);
    staged[at] = c.x;
    staged[at + 1u] = c.y;
    staged[at + 2u] = c.z;
    staged[at + 3u] = c.w;
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
// Shared by the Q5_0 and Q5_1 kernels of the coop and dot4 families: a block's qh is a
// little-endian u32 of fifth bits, bit j for weight j (the low nibble of qs byte j) and
// bit j + 16 for weight j + 16 (its high nibble).

// The low 4 bits of `bits` moved to bit 4 of each byte: the fifth bits of four quants.
// Multiplying by 1 + 2^7 + 2^14 + 2^21 puts a copy of bit i at bit 8i (from the 2^(7i)
// term); no two copies land on the same bit, so nothing carries, and the mask keeps
// only bits 0, 8, 16 and 24.
fn fifth_bits(bits: u32) -> u32 {
    return (((bits & 0xfu) * 0x00204081u) & 0x01010101u) << 4u;
}

// Four 5-bit quants, one per byte: the nibbles at bit n of each byte of qs word `q`
// (n = 0 for weights below 16, 4 above), topped by the qh bits from bit `first` on.
fn q5_word(q: u32, n: u32, qh: u32, first: u32) -> u32 {
    return ((q >> n) & 0x0f0f0f0fu) | fifth_bits(qh >> first);
}

// All 32 quants of a block as int8, weights 0..16 and 16..32, from its 16 qs bytes.
fn quants5(qs: vec4<u32>, qh: u32) -> array<vec4<u32>, 2> {
    return array<vec4<u32>, 2>(
        vec4<u32>(q5_word(qs.x, 0u, qh, 0u), q5_word(qs.y, 0u, qh, 4u),
                  q5_word(qs.z, 0u, qh, 8u), q5_word(qs.w, 0u, qh, 12u)),
        vec4<u32>(q5_word(qs.x, 4u, qh, 16u), q5_word(qs.y, 4u, qh, 20u),
                  q5_word(qs.z, 4u, qh, 24u), q5_word(qs.w, 4u, qh, 28u)),
    );
}

// Q5_0: 32 weights per 22-byte block {d: f16, qh: [u8; 4], qs: [u8; 16]}; weight i is
// the low nibble of qs[i] with bit i of qh as its fifth bit, weight i + 16 the high
// nibble with bit i + 16, value d * (q - 16). As uploaded for matvec/q5_0_dot4 (the
// GGUF bytes); blocks are 2-byte aligned.

alias W = u32;

fn weight_group(row_byte: u32, g: u32) -> WGroup {
    let o = row_byte + g * 22u;
    let q = quants5(piece(o + 6u), word_at(o + 2u));
    return WGroup(q[0], q[1], vec2<f32>(load_f16(o)), -16, 0.0);
}

// Groups fetched a K step ahead (coopmat.wgsl): 1.07-1.23x for Q4_K on the H100.
const FETCH_AHEAD: bool = true;
