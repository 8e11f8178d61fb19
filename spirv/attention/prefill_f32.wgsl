const WG: u32 = 128u;
const HD: u32 = 128u;
const KV_ROW: u32 = 64u;
const ROWS: u32 = 16u;
const KT: u32 = 32u;
const CHUNK: u32 = 32u;
const SLICE: u32 = 64u;

// KV cache in f32: one word per pair of values (exact; twice the bytes of f16).

alias KvWord = vec2<f32>;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return w;
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return v;
}
// A head's value pairs in a plain (f32 or f16) KV cache, for the kernels that read the
// cache a pair at a time (`attention/prefill.wgsl`, `attention/decode_portable.wgsl`):
// cache row `row` (position * n_kv_heads + KV head) is KV_ROW words of one pair each.
// The includer declares `k_cache` and `v_cache`; the format include gives KvWord and
// kv_pair; the host sets KV_ROW.

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return kv_pair(k_cache[row * KV_ROW + p]);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return kv_pair(v_cache[row * KV_ROW + p]);
}
// What the prompt attention kernels (prefill.wgsl, flash.wgsl) share: their parameters
// and bindings, and where a (token, query head) row's token sits, which keys it sees and
// where its values are. The includer sets HD; the format include gives KvWord.

struct Params {
    n_kv_heads: u32,
    group: u32,       // query heads per KV head
    start: u32,       // position of the first token
    n_tokens: u32,
    q_stride: u32,    // elements from one token's q to the next's
    out_stride: u32,  // elements from one token's output to the next's
    scale: f32,       // what q is multiplied by before its dot products
    block_first: u32, // first row block of this dispatch (the grid's x is limited)
    key_first: u32,   // the first key position of this pass
    key_end: u32,     // the pass's keys end before this position
    n_heads: u32,     // query heads: a token's rows of `state`
    window: u32,      // keys a row sees, its own included (0: all up to its own)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvWord>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvWord>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// (running max, running sum) of each (token, query head) row between passes.
@group(0) @binding(5) var<storage, read_write> state: array<vec2<f32>>;

// The position of row `row`'s token.
fn row_pos(row: u32) -> u32 {
    return params.start + row / params.group;
}

// The first key a row at `pos` sees: 0, or the start of its window.
fn first_key(pos: u32) -> u32 {
    if (params.window == 0u || pos < params.window) {
        return 0u;
    }
    return pos + 1u - params.window;
}

// Where value d of row `row` (of KV head kvh) is in a buffer of `stride` elements per
// token.
fn row_element(row: u32, kvh: u32, d: u32, stride: u32) -> u32 {
    let head = kvh * params.group + row % params.group;
    return (row / params.group) * stride + head * HD + d;
}
// Causal attention for a prompt's tokens (prefill), flash-attention style. Token t of
// n_tokens sits at position start + t and attends to cache positions 0..=start + t;
// its q rows are at q[t * q_stride + head * HD ..], its output rows at
// out[t * out_stride + head * HD ..]. The cache holds every position up to the last
// token's (layout [pos][kv_head][HD], a KvWord per pair of values).
//
// The rows of KV head kvh are its (token, query head) pairs, token-major: row
// t * group + g is token t's query head kvh * group + g. Workgroup (b, kvh, s) takes
// ROWS consecutive rows of them, so a GQA group of any size shares one walk over the
// keys, and the output pairs [s * SLICE, (s + 1) * SLICE) of those rows. It walks the
// keys in tiles of KT positions, each K and V tile staged in workgroup memory once for
// all its rows, in chunks of CHUNK pairs (a head of any size fits, chunk by chunk):
// the scores of a tile (rows x positions) sum over the K chunks, one online-softmax
// step per row turns them into weights (the running max and sum, and the factor that
// rescales the accumulator), then the V chunks are added into the accumulators.
//
// A local layer's row sees only its last `window` positions (Gemma 3, Mistral): keys
// before its window are masked out of its scores, and tiles before the block's first
// window are skipped.
//
// A dispatch walks the keys key_first..key_end (a multiple of KT apart): the host
// splits them into passes where the device cuts an invocation's loops short (lavapipe
// ends them all after 65,535 iterations; `PrefillAttention::keys_per_pass`). A row
// whose last position is past key_end leaves its accumulators unnormalized in `out`
// and its running max and sum in `state` for the next pass, which reads them back.
//
// Every accumulator lives in workgroup memory and every private value is a scalar:
// arrays in registers indexed at run time are moved to slow local memory by drivers.
// No subgroup operations, so any subgroup size is right.
//
// The host sets WG (invocations), HD (head_dim, even), ROWS, KT, CHUNK (pairs per
// staged chunk, at most HD / 2) and SLICE (output pairs per workgroup, at most HD / 2);
// the workgroup memory they take is the host's `PrefillAttention::workgroup_bytes`.
// The format includes give KvWord, k_pair and v_pair.


const HALF: u32 = HD / 2u;
// A row of the K/V tile is one pair longer than a chunk, so the positions that
// neighbouring invocations read fall in different memory banks.
const KV_STRIDE: u32 = CHUNK + 1u;
// With one chunk per head the scaled q rows are staged once, not once per tile.
const Q_RESIDENT: bool = CHUNK == HALF;
const NO_SCORE: f32 = -3.0e38;

var<workgroup> q_tile: array<vec2<f32>, ROWS * CHUNK>;
var<workgroup> kv_tile: array<vec2<f32>, KT * KV_STRIDE>;
var<workgroup> scores: array<f32, ROWS * KT>;
var<workgroup> acc: array<vec2<f32>, ROWS * SLICE>;
var<workgroup> run_max: array<f32, ROWS>;
var<workgroup> run_sum: array<f32, ROWS>;
var<workgroup> rescale: array<f32, ROWS>;

// The state slot of row `row` (of KV head kvh): its token's, its query head's.
fn state_slot(row: u32, kvh: u32) -> u32 {
    return (row / params.group) * params.n_heads + kvh * params.group + row % params.group;
}

// Pairs c0..c0 + nc of rows r0..r0 + rows, scaled as decode attention scales q; the
// rows past `rows` are zero.
fn stage_q(r0: u32, rows: u32, kvh: u32, c0: u32, nc: u32, lid: u32) {
    for (var i = lid; i < ROWS * nc; i += WG) {
        let r = i / nc;
        let p = i % nc;
        var v = vec2<f32>(0.0);
        if (r < rows) {
            let j = row_element(r0 + r, kvh, 2u * (c0 + p), params.q_stride);
            v = vec2<f32>(q[j], q[j + 1u]) * params.scale;
        }
        q_tile[r * CHUNK + p] = v;
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let kvh = wid.y;
    let n_rows = params.n_tokens * params.group;
    let n_blocks = (n_rows + ROWS - 1u) / ROWS;
    // The last rows are the latest tokens, which attend to the most positions: they
    // start first, so the longest workgroups do not trail behind the rest.
    let r0 = (n_blocks - 1u - (params.block_first + wid.x)) * ROWS;
    let rows = min(ROWS, n_rows - r0);
    let s0 = wid.z * SLICE;
    let s1 = min(s0 + SLICE, HALF);
    let last_pos = params.start + (r0 + rows - 1u) / params.group;
    // Every row of the block finished in an earlier pass.
    if (last_pos < params.key_first) {
        return;
    }
    let width = s1 - s0;
    let resumed = params.key_first > 0u;

    // A row that a pass before this one left unfinished resumes from its accumulators
    // and state; the rest (and every row of a first pass) start empty.
    for (var i = lid; i < ROWS * SLICE; i += WG) {
        let r = i / SLICE;
        let p = i % SLICE;
        var a = vec2<f32>(0.0);
        if (resumed && r < rows && p < width && row_pos(r0 + r) >= params.key_first) {
            let j = row_element(r0 + r, kvh, 2u * (s0 + p), params.out_stride);
            a = vec2<f32>(out[j], out[j + 1u]);
        }
        acc[i] = a;
    }
    if (lid < ROWS) {
        var ml = vec2<f32>(NO_SCORE, 0.0);
        if (resumed && lid < rows && row_pos(r0 + lid) >= params.key_first) {
            ml = state[state_slot(r0 + lid, kvh)];
        }
        run_max[lid] = ml.x;
        run_sum[lid] = ml.y;
    }
    if (Q_RESIDENT) {
        stage_q(r0, rows, kvh, 0u, HALF, lid);
    }
    workgroupBarrier();

    // Keys before the block's first row's window serve none of its rows.
    let key_end = min(last_pos + 1u, params.key_end);
    for (var t0 = max(params.key_first, first_key(row_pos(r0))); t0 < key_end; t0 += KT) {
        let nt = min(KT, key_end - t0);
        for (var c0 = 0u; c0 < HALF; c0 += CHUNK) {
            let nc = min(CHUNK, HALF - c0);
            if (!Q_RESIDENT) {
                stage_q(r0, rows, kvh, c0, nc, lid);
            }
            for (var i = lid; i < nt * nc; i += WG) {
                let t = i / nc;
                let p = i % nc;
                kv_tile[t * KV_STRIDE + p] = k_pair((t0 + t) * params.n_kv_heads + kvh, c0 + p);
            }
            workgroupBarrier();
            for (var i = lid; i < rows * nt; i += WG) {
                let r = i / nt;
                let t = i % nt;
                var s = 0.0;
                for (var p = 0u; p < nc; p++) {
                    s += dot(q_tile[r * CHUNK + p], kv_tile[t * KV_STRIDE + p]);
                }
                let at = r * KT + t;
                scores[at] = select(scores[at] + s, s, c0 == 0u);
            }
            workgroupBarrier();
        }

        // Row r's online-softmax step over the tile's keys it sees (from its window's
        // first to its own position): the rest are masked out. Until a row has seen
        // a key its max stays NO_SCORE and its weights 0; from its first key on the
        // max is a real score, and exp(NO_SCORE - max) is 0.
        if (lid < rows) {
            let pos = row_pos(r0 + lid);
            let seen = select(0u, min(nt, pos + 1u - t0), pos >= t0);
            let lo = first_key(pos);
            let skip = min(select(0u, lo - t0, lo > t0), seen);
            let row = lid * KT;
            let m_old = run_max[lid];
            var m = m_old;
            for (var t = skip; t < seen; t++) {
                m = max(m, scores[row + t]);
            }
            var tile_sum = 0.0;
            for (var t = 0u; t < nt; t++) {
                let e = select(0.0, exp(scores[row + t] - m), t >= skip && t < seen);
                scores[row + t] = e;
                tile_sum += e;
            }
            let r = exp(m_old - m);
            run_sum[lid] = run_sum[lid] * r + tile_sum;
            run_max[lid] = m;
            rescale[lid] = r;
        }
        workgroupBarrier();

        for (var c0 = s0; c0 < s1; c0 += CHUNK) {
            let nc = min(CHUNK, s1 - c0);
            for (var i = lid; i < nt * nc; i += WG) {
                let t = i / nc;
                let p = i % nc;
                kv_tile[t * KV_STRIDE + p] = v_pair((t0 + t) * params.n_kv_heads + kvh, c0 + p);
            }
            workgroupBarrier();
            for (var i = lid; i < rows * nc; i += WG) {
                let r = i / nc;
                let p = i % nc;
                let at = r * SLICE + c0 - s0 + p;
                var a = acc[at] * rescale[r];
                for (var t = 0u; t < nt; t++) {
                    a += scores[r * KT + t] * kv_tile[t * KV_STRIDE + p];
                }
                acc[at] = a;
            }
            workgroupBarrier();
        }
    }

    // Rows whose last position this pass reached are normalized; the rest keep their
    // running sums for the next pass (one slice writes the state all slices share).
    for (var i = lid; i < rows * width; i += WG) {
        let r = i / width;
        let p = i % width;
        let pos = row_pos(r0 + r);
        if (pos < params.key_first) {
            continue;
        }
        let j = row_element(r0 + r, kvh, 2u * (s0 + p), params.out_stride);
        var v = acc[r * SLICE + p];
        if (pos < params.key_end) {
            v /= run_sum[r];
        } else if (p == 0u && wid.z == 0u) {
            state[state_slot(r0 + r, kvh)] = vec2<f32>(run_max[r], run_sum[r]);
        }
        out[j] = v.x;
        out[j + 1u] = v.y;
    }
}

// attention/prefill over an f32 KV cache.
