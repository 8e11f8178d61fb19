const K_STEP: u32 = 16u;

// Matmul driver, exact-x family: Y[t, row] = dot(W[row, :], X[t, :]) for a batch of
// tokens t, W of any type in the GGUF rows (`row_bytes` apart) that its coop and scalar
// matvecs upload, X f32 (exact activations, as those matvecs take them), f32
// multiply-adds.
//
// A workgroup computes a tile of TILE_M rows by TILE_N tokens. It walks K in steps of
// K_STEP: each step stages the tile's weights and the tokens' x as f32 in workgroup
// memory, then every invocation multiplies its 4 rows by its 4 tokens over the step.
// So a weight is read and decoded once per TILE_N tokens rather than once per token.
// Nothing here needs subgroups, f16 arithmetic or integer dot products: the kernel runs
// on any adapter.
//
// The kernel file (`<type>_fma.wgsl`) includes this and defines
//   fn weight_at(row_byte: u32, k: u32) -> f32
// weight k (< K) of the row starting at byte `row_byte`, decoded from its block and
// reading only words that hold the bytes it needs (so never past the binding, whatever
// the row's alignment).
//
// The host prepends K_STEP. Workgroups: x over token tiles, y over row tiles, as the
// other drivers, so that the workgroups running at once share their weight rows.

// io.wgsl's Params, field for field (the host fills every matmul's alike), except that
// x is plain floats here: K need not be a multiple of 4.
struct Params {
    m: u32,          // rows in this dispatch (its weight part)
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // output element of row 0 of this dispatch within a token's row of y
    n_tokens: u32,
    x_stride: u32,   // floats per token in x
    y_stride: u32,   // floats per token in y
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const TILE_M: u32 = 64u;
const TILE_N: u32 = 64u;
const WG: u32 = 256u;
// 16 x 16 invocations, each 4 rows (ty + 16i) by 4 tokens (tx + 16j): a subgroup's
// lanes then read consecutive tokens' x (distinct banks) and at most a few rows
// (broadcast).
const SPAN: u32 = 16u;
// Staging: each invocation loads 4 consecutive elements of one row (or token), so
// neighbouring lanes read neighbouring addresses of device memory.
const RUN: u32 = 4u;
const RUNS_PER_ROW: u32 = K_STEP / RUN;
// Staged element kk of row r sits at kk * LD + r. The compute loop reads along r
// (conflict-free at any LD); the staging writes go along kk, and an odd LD spreads the
// lanes of one store over the banks where a multiple of 32 would put the four lanes
// staging each row on one bank.
const LD: u32 = TILE_M + 1u;

var<workgroup> ws: array<f32, K_STEP * LD>;
var<workgroup> xs: array<f32, K_STEP * LD>;

// Stages step k0: the weights of rows row0.. and the x of tokens tok0..; past the
// matrix's rows, the batch's tokens or K, zeros (which add nothing).
fn stage(row0: u32, tok0: u32, k0: u32, lid: u32) {
    for (var i = lid; i < TILE_M * RUNS_PER_ROW; i += WG) {
        let r = i / RUNS_PER_ROW;
        let kk = (i % RUNS_PER_ROW) * RUN;
        let row = row0 + r;
        let tok = tok0 + r;
        for (var e = 0u; e < RUN; e++) {
            let k = k0 + kk + e;
            var wv = 0.0;
            if (row < params.m && k < params.k) {
                wv = weight_at(row * params.row_bytes, k);
            }
            ws[(kk + e) * LD + r] = wv;
            var xv = 0.0;
            if (tok < params.n_tokens && k < params.k) {
                xv = x[tok * params.x_stride + k];
            }
            xs[(kk + e) * LD + r] = xv;
        }
    }
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
    for (var k0 = 0u; k0 < params.k; k0 += K_STEP) {
        workgroupBarrier();
        stage(row0, tok0, k0, lid);
        workgroupBarrier();
        for (var kk = 0u; kk < K_STEP; kk++) {
            let at = kk * LD;
            let b = vec4<f32>(xs[at + tx], xs[at + tx + SPAN], xs[at + tx + 2u * SPAN],
                              xs[at + tx + 3u * SPAN]);
            acc0 = fma(vec4<f32>(ws[at + ty]), b, acc0);
            acc1 = fma(vec4<f32>(ws[at + ty + SPAN]), b, acc1);
            acc2 = fma(vec4<f32>(ws[at + ty + 2u * SPAN]), b, acc2);
            acc3 = fma(vec4<f32>(ws[at + ty + 3u * SPAN]), b, acc3);
        }
    }
    store(row0 + ty, tok0, tx, acc0);
    store(row0 + ty + SPAN, tok0, tx, acc1);
    store(row0 + ty + 2u * SPAN, tok0, tx, acc2);
    store(row0 + ty + 3u * SPAN, tok0, tx, acc3);
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

// F16 weights: 2 bytes each. With odd K every other row starts only 2-byte aligned;
// load_f16 takes a weight from the half of its word its byte offset names, and that
// word lies inside the binding (uploads round parts up to 16 bytes).
fn weight_at(row_byte: u32, k: u32) -> f32 {
    return load_f16(row_byte + 2u * k);
}
