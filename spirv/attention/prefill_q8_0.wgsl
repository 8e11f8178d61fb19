const WG: u32 = 64u;
const HD: u32 = 128u;
const KV_ROW: u32 = 36u;
const ROWS: u32 = 32u;
const TILE_QUADS: u32 = 1u;
const KT: u32 = 32u;
const CHUNK: u32 = 32u;
const SLICE: u32 = 64u;

// KV cache in q8_0: each block of 32 values of a head's row is 32 int8 values q and a
// scale d = max|x| / 127, the values d * q (q = x / d rounded half away from zero, as
// ggml's quantize_row_q8_0). A cache row (one position's KV head of head_dim values) is
// head_dim / 4 words of four int8 values, then head_dim / 32 f32 scales, then padding
// to a multiple of four words (16 bytes): 36 words for a head of 128, where f16 takes 64.
// ggml keeps d as f16; here it is f32 in the same padded row, so d adds no error.

alias KvWord = u32;
// A head's value pairs in a q8_0 KV cache (`attention/kv_q8_0.wgsl`), for the kernels
// that read the cache a pair at a time: cache row `row` (position * n_kv_heads + KV
// head) is KV_ROW words, pair p in the half of word p / 2 that p % 2 says, its scale
// the f32 at word HD / 4 + p / 16. The includer declares `k_cache` and `v_cache` and
// sets HD and KV_ROW.
//
// As kv_rows.wgsl, a pair can be read in two steps: its raw words (the word holding it,
// the bits of its scale; zeros where there is no pair) then its values.

alias KvRaw = vec2<u32>;

fn q8_pair(word: u32, p: u32, d: f32) -> vec2<f32> {
    let q = vec4<f32>(unpack4xI8(word));
    return select(q.xy, q.zw, p % 2u == 1u) * d;
}

fn k_raw(row: u32, p: u32) -> KvRaw {
    let first = row * KV_ROW;
    return vec2<u32>(k_cache[first + p / 2u], k_cache[first + HD / 4u + p / 16u]);
}

fn v_raw(row: u32, p: u32) -> KvRaw {
    let first = row * KV_ROW;
    return vec2<u32>(v_cache[first + p / 2u], v_cache[first + HD / 4u + p / 16u]);
}

fn raw_pair(raw: KvRaw, p: u32) -> vec2<f32> {
    return q8_pair(raw.x, p, bitcast<f32>(raw.y));
}

fn k_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(k_raw(row, p), p);
}

fn v_pair(row: u32, p: u32) -> vec2<f32> {
    return raw_pair(v_raw(row, p), p);
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
// Both products are tiled in registers: an invocation computes the scores of 8 rows
// by 4 keys, and adds 8 rows by 4 output pairs, so each value it reads from workgroup
// memory serves 4 or 8 multiply-adds (one per row or key of its tile), not one. Rows
// are stored in fours (a vec4 per 4 rows' value), keys and pairs so that neighbouring
// invocations read neighbouring words.
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
// Accumulators live in workgroup memory between chunks; private values are scalars and
// vectors, no arrays: arrays in registers indexed at run time are moved to slow local
// memory by drivers. No subgroup operations, so any subgroup size is right.
//
// The host sets WG (invocations, at least ROWS), HD (head_dim, even), ROWS (a multiple
// of 4 TILE_QUADS), TILE_QUADS (row quads of an invocation's register tile: 2, 8 rows,
// or 1, 4 rows: twice the invocations on the same workgroup memory), KT (a multiple of
// 4), CHUNK (pairs per staged chunk, a multiple of 4) and SLICE (output pairs per
// workgroup, at most HD / 2); the workgroup memory they take is the host's
// `PrefillAttention::workgroup_bytes`. The format includes give KvWord, k_pair and
// v_pair. The second row quad of a tile is written out under `if (TILE_QUADS == 2u)`,
// a constant the compiler folds.


const HALF: u32 = HD / 2u;
const ROW_QUADS: u32 = ROWS / 4u;
const ROW_TILES: u32 = ROW_QUADS / TILE_QUADS;
const KEY_QUADS: u32 = KT / 4u;
const PAIR_QUADS: u32 = CHUNK / 4u;
// K is staged [pair][key], its rows one key longer than the tile, so the pairs that
// neighbouring invocations stage fall in different memory banks; V is staged
// [key][pair].
const K_STRIDE: u32 = KT + 1u;
// With one chunk per head the scaled q rows are staged once, not once per tile.
const Q_RESIDENT: bool = CHUNK >= HALF;
const NO_SCORE: f32 = -3.0e38;

// Scaled q: [pair][x or y][row quad].
var<workgroup> q_tile: array<vec4<f32>, CHUNK * 2u * ROW_QUADS>;
var<workgroup> kv_tile: array<vec2<f32>, CHUNK * K_STRIDE>;
// Scores, then weights: [key][row quad].
var<workgroup> scores: array<vec4<f32>, KT * ROW_QUADS>;
// Output pairs of the slice: [pair][x or y][row quad].
var<workgroup> acc: array<vec4<f32>, SLICE * 2u * ROW_QUADS>;
var<workgroup> run_max: array<f32, ROWS>;
var<workgroup> run_sum: array<f32, ROWS>;
var<workgroup> rescale: array<vec4<f32>, ROW_QUADS>;

// The state slot of row `row` (of KV head kvh): its token's, its query head's.
fn state_slot(row: u32, kvh: u32) -> u32 {
    return (row / params.group) * params.n_heads + kvh * params.group + row % params.group;
}

// Where component `xy` of pair `p` (of the slice) of row quad `rq` accumulates.
fn acc_at(p: u32, xy: u32, rq: u32) -> u32 {
    return (2u * p + xy) * ROW_QUADS + rq;
}

// Pairs c0..c0 + nc of rows r0..r0 + rows, scaled as decode attention scales q; the
// rows past `rows` are zero.
fn stage_q(r0: u32, rows: u32, kvh: u32, c0: u32, nc: u32, lid: u32) {
    for (var i = lid; i < ROWS * nc; i += WG) {
        let r = i % ROWS;
        let p = i / ROWS;
        var v = vec2<f32>(0.0);
        if (r < rows) {
            let j = row_element(r0 + r, kvh, 2u * (c0 + p), params.q_stride);
            v = vec2<f32>(q[j], q[j + 1u]) * params.scale;
        }
        q_tile[2u * p * ROW_QUADS + r / 4u][r % 4u] = v.x;
        q_tile[(2u * p + 1u) * ROW_QUADS + r / 4u][r % 4u] = v.y;
    }
}

// Adds the scores of row tile rt (the 4 TILE_QUADS rows of row quads TILE_QUADS rt
// on) with keys kq, kq + KEY_QUADS, .. over the staged K chunk of nc pairs into the
// tile's scores (the first chunk starts them). A matrix's column is a key, its rows
// the quad's rows.
fn add_scores(rt: u32, kq: u32, nc: u32, first: bool) {
    let qa = TILE_QUADS * rt;
    var sa = mat4x4<f32>();
    var sb = mat4x4<f32>();
    for (var p = 0u; p < nc; p++) {
        let q = 2u * p * ROW_QUADS + qa;
        let qax = q_tile[q];
        let qay = q_tile[q + ROW_QUADS];
        let k = p * K_STRIDE + kq;
        let k0 = kv_tile[k];
        let k1 = kv_tile[k + KEY_QUADS];
        let k2 = kv_tile[k + 2u * KEY_QUADS];
        let k3 = kv_tile[k + 3u * KEY_QUADS];
        sa[0] += qax * k0.x + qay * k0.y;
        sa[1] += qax * k1.x + qay * k1.y;
        sa[2] += qax * k2.x + qay * k2.y;
        sa[3] += qax * k3.x + qay * k3.y;
        if (TILE_QUADS == 2u) {
            let qbx = q_tile[q + 1u];
            let qby = q_tile[q + ROW_QUADS + 1u];
            sb[0] += qbx * k0.x + qby * k0.y;
            sb[1] += qbx * k1.x + qby * k1.y;
            sb[2] += qbx * k2.x + qby * k2.y;
            sb[3] += qbx * k3.x + qby * k3.y;
        }
    }
    if (!first) {
        sa += read_scores(kq, qa);
    }
    write_scores(kq, qa, sa);
    if (TILE_QUADS == 2u) {
        if (!first) {
            sb += read_scores(kq, qa + 1u);
        }
        write_scores(kq, qa + 1u, sb);
    }
}

// The scores of row quad rq with keys kq, kq + KEY_QUADS, ...
fn read_scores(kq: u32, rq: u32) -> mat4x4<f32> {
    let at = kq * ROW_QUADS + rq;
    let step = KEY_QUADS * ROW_QUADS;
    return mat4x4<f32>(scores[at], scores[at + step], scores[at + 2u * step], scores[at + 3u * step]);
}

fn write_scores(kq: u32, rq: u32, s: mat4x4<f32>) {
    let at = kq * ROW_QUADS + rq;
    let step = KEY_QUADS * ROW_QUADS;
    scores[at] = s[0];
    scores[at + step] = s[1];
    scores[at + 2u * step] = s[2];
    scores[at + 3u * step] = s[3];
}

// The accumulators of the slice's pairs p0 + pq, p0 + pq + PAIR_QUADS, .. for row quad
// rq, component xy, scaled by `f`: a matrix's column is a pair, its rows the quad's
// rows. Pairs past the chunk's nc (a head not a multiple of 4 pairs) read the chunk's
// last pair's, which `store_acc` does not store back.
fn load_acc(p0: u32, pq: u32, nc: u32, xy: u32, rq: u32, f: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(
        acc[acc_at(p0 + min(pq, nc - 1u), xy, rq)] * f,
        acc[acc_at(p0 + min(pq + PAIR_QUADS, nc - 1u), xy, rq)] * f,
        acc[acc_at(p0 + min(pq + 2u * PAIR_QUADS, nc - 1u), xy, rq)] * f,
        acc[acc_at(p0 + min(pq + 3u * PAIR_QUADS, nc - 1u), xy, rq)] * f,
    );
}

fn store_acc(p0: u32, pq: u32, nc: u32, xy: u32, rq: u32, a: mat4x4<f32>) {
    if (pq < nc) {
        acc[acc_at(p0 + pq, xy, rq)] = a[0];
    }
    if (pq + PAIR_QUADS < nc) {
        acc[acc_at(p0 + pq + PAIR_QUADS, xy, rq)] = a[1];
    }
    if (pq + 2u * PAIR_QUADS < nc) {
        acc[acc_at(p0 + pq + 2u * PAIR_QUADS, xy, rq)] = a[2];
    }
    if (pq + 3u * PAIR_QUADS < nc) {
        acc[acc_at(p0 + pq + 3u * PAIR_QUADS, xy, rq)] = a[3];
    }
}

// Adds the weights of row tile rt times the staged V chunk's pairs pq, pq + PAIR_QUADS,
// .. (of nc) over the tile's nt keys into the accumulators of the slice's pairs from
// p0, first rescaling them by the rows' factors. Every pair of the chunk is one
// invocation's; the barrier after this keeps the next chunk's reads after its writes.
fn add_values(rt: u32, pq: u32, p0: u32, nc: u32, nt: u32) {
    let qa = TILE_QUADS * rt;
    // The second quad is qa's again where tiles have one (never stored).
    let qb = qa + TILE_QUADS - 1u;
    var xa = load_acc(p0, pq, nc, 0u, qa, rescale[qa]);
    var ya = load_acc(p0, pq, nc, 1u, qa, rescale[qa]);
    var xb = mat4x4<f32>();
    var yb = mat4x4<f32>();
    if (TILE_QUADS == 2u) {
        xb = load_acc(p0, pq, nc, 0u, qb, rescale[qb]);
        yb = load_acc(p0, pq, nc, 1u, qb, rescale[qb]);
    }
    for (var t = 0u; t < nt; t++) {
        let wa = scores[t * ROW_QUADS + qa];
        let wb = scores[t * ROW_QUADS + qb];
        let v = t * CHUNK + pq;
        let v0 = kv_tile[v];
        let v1 = kv_tile[v + PAIR_QUADS];
        let v2 = kv_tile[v + 2u * PAIR_QUADS];
        let v3 = kv_tile[v + 3u * PAIR_QUADS];
        xa[0] += wa * v0.x;
        xa[1] += wa * v1.x;
        xa[2] += wa * v2.x;
        xa[3] += wa * v3.x;
        ya[0] += wa * v0.y;
        ya[1] += wa * v1.y;
        ya[2] += wa * v2.y;
        ya[3] += wa * v3.y;
        if (TILE_QUADS == 2u) {
            xb[0] += wb * v0.x;
            xb[1] += wb * v1.x;
            xb[2] += wb * v2.x;
            xb[3] += wb * v3.x;
            yb[0] += wb * v0.y;
            yb[1] += wb * v1.y;
            yb[2] += wb * v2.y;
            yb[3] += wb * v3.y;
        }
    }
    store_acc(p0, pq, nc, 0u, qa, xa);
    store_acc(p0, pq, nc, 1u, qa, ya);
    if (TILE_QUADS == 2u) {
        store_acc(p0, pq, nc, 0u, qb, xb);
        store_acc(p0, pq, nc, 1u, qb, yb);
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
        let r = i % ROWS;
        let p = i / ROWS;
        var a = vec2<f32>(0.0);
        if (resumed && r < rows && p < width && row_pos(r0 + r) >= params.key_first) {
            let j = row_element(r0 + r, kvh, 2u * (s0 + p), params.out_stride);
            a = vec2<f32>(out[j], out[j + 1u]);
        }
        acc[acc_at(p, 0u, r / 4u)][r % 4u] = a.x;
        acc[acc_at(p, 1u, r / 4u)][r % 4u] = a.y;
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
            // Indexed by the chunk's constant width (divisions by it are shifts or
            // multiplies; by nc, a run-time value, they are divisions).
            for (var i = lid; i < nt * CHUNK; i += WG) {
                let t = i / CHUNK;
                let p = i % CHUNK;
                if (p < nc) {
                    kv_tile[p * K_STRIDE + t] =
                        k_pair((t0 + t) * params.n_kv_heads + kvh, c0 + p);
                }
            }
            workgroupBarrier();
            for (var m = lid; m < ROW_TILES * KEY_QUADS; m += WG) {
                add_scores(m / KEY_QUADS, m % KEY_QUADS, nc, c0 == 0u);
            }
            workgroupBarrier();
        }

        // Row r's online-softmax step over the tile's keys it sees (from its window's
        // first to its own position): the rest, and the keys past the tile's nt (whose
        // scores are stale), are masked out. Until a row has seen a key its max stays
        // NO_SCORE and its weights 0; from its first key on the max is a real score,
        // and exp(NO_SCORE - max) is 0.
        if (lid < rows) {
            let pos = row_pos(r0 + lid);
            let seen = select(0u, min(nt, pos + 1u - t0), pos >= t0);
            let lo = first_key(pos);
            let skip = min(select(0u, lo - t0, lo > t0), seen);
            let quad = lid / 4u;
            let lane = lid % 4u;
            let m_old = run_max[lid];
            var m = m_old;
            for (var t = skip; t < seen; t++) {
                m = max(m, scores[t * ROW_QUADS + quad][lane]);
            }
            var tile_sum = 0.0;
            for (var t = 0u; t < nt; t++) {
                let at = t * ROW_QUADS + quad;
                let e = select(0.0, exp(scores[at][lane] - m), t >= skip && t < seen);
                scores[at][lane] = e;
                tile_sum += e;
            }
            let r = exp(m_old - m);
            run_sum[lid] = run_sum[lid] * r + tile_sum;
            run_max[lid] = m;
            rescale[quad][lane] = r;
        }
        // A row past the block's (q zero) takes no softmax step: its weights and
        // accumulators, whatever they hold, meet only each other and are never stored.
        workgroupBarrier();

        for (var c0 = s0; c0 < s1; c0 += CHUNK) {
            let nc = min(CHUNK, s1 - c0);
            for (var i = lid; i < nt * CHUNK; i += WG) {
                let t = i / CHUNK;
                let p = i % CHUNK;
                if (p < nc) {
                    kv_tile[t * CHUNK + p] = v_pair((t0 + t) * params.n_kv_heads + kvh, c0 + p);
                }
            }
            workgroupBarrier();
            for (var m = lid; m < ROW_TILES * PAIR_QUADS; m += WG) {
                add_values(m / PAIR_QUADS, m % PAIR_QUADS, c0 - s0, nc, nt);
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
        var v = vec2<f32>(acc[acc_at(p, 0u, r / 4u)][r % 4u], acc[acc_at(p, 1u, r / 4u)][r % 4u]);
        if (pos < params.key_end) {
            v /= run_sum[r];
        } else if (p == 0u && wid.z == 0u) {
            state[state_slot(r0 + r, kvh)] = vec2<f32>(run_max[r], run_sum[r]);
        }
        out[j] = v.x;
        out[j + 1u] = v.y;
    }
}

// attention/prefill over a q8_0 KV cache.
