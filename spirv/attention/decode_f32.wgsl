const WG: u32 = 128u;
const HD: u32 = 128u;
const G: u32 = 4u;
const LANE_PAIRS: u32 = 2u;
const SUBGROUPS_MAX: u32 = 4u;

// KV cache in f32: one word per pair of values (exact; twice the bytes of f16).

alias KvWord = vec2<f32>;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return w;
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return v;
}
// What both decode attention kernels (`attention/decode.wgsl` and
// `attention/decode_portable.wgsl`) take and write, in the same bindings, so one
// dispatch shape serves both. HD is the host's; the format include gives KvWord.

struct Params {
    n_kv_heads: u32,
    n_pos: u32,   // positions in the cache, this one included: keys first..n_pos
    chunk: u32,   // positions per chunk (the last may be shorter)
    n_chunks: u32,
    group: u32,   // query heads per KV head
    scale: f32,
    first: u32,   // the first position attended to (a sliding window's; else 0)
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvWord>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvWord>;
// Per query head h and chunk c, at h * n_chunks + c: (m, l).
@group(0) @binding(4) var<storage, read_write> part_ml: array<vec2<f32>>;
// Per query head h and chunk c, HD / 2 pairs at (h * n_chunks + c) * HD / 2.
@group(0) @binding(5) var<storage, read_write> part_acc: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> out: array<vec2<f32>>;

const HALF: u32 = HD / 2u;
// Split-K decode attention (flash-decoding) on subgroups. Workgroup (c, kvh, hg) takes
// the positions of chunk c for the G query heads of head group hg that read KV head
// kvh, so each K and V byte of a chunk is read by one workgroup whatever the GQA ratio,
// and the chunks spread a long context over the whole GPU.
//
// A subgroup takes two positions at a time (c.p0 + 2 * sub, then every 2 * subgroups):
// its lanes split each K and V row into pairs (lane, lane + size, ...), so a row is
// one coalesced read and both rows' reads are in flight together; the scores meet in
// subgroupAdd. Each subgroup keeps its own online softmax per query head: the running
// max m and sum l in registers (a vec4: G <= 4), the accumulator sum exp(s - m) v in
// workgroup memory at the pairs its lanes own. Nothing is kept in arrays in registers:
// drivers move those to slow local memory. At the end the workgroup merges its
// subgroups; with one chunk it writes the normalized output, otherwise (m, l) and the
// accumulator per query head for `attention/combine.wgsl`.
//
// The host sets WG (invocations), HD (head_dim), G (query heads per workgroup, at most
// 4), LANE_PAIRS (HD / 2 over the smallest subgroup, rounded up) and SUBGROUPS_MAX (WG
// over the smallest subgroup). The format include gives KvWord and kv_pair; the
// bindings are `attention/decode_io.wgsl`'s.

const NO_SCORE: f32 = -3.0e38;

var<workgroup> q_scaled: array<vec2<f32>, G * HALF>;
var<workgroup> acc: array<vec2<f32>, SUBGROUPS_MAX * G * HALF>;
var<workgroup> sub_ml: array<vec2<f32>, SUBGROUPS_MAX * G>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sub: u32,
        @builtin(num_subgroups) n_sub: u32,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sg: u32) {
    let kvh = wid.y;
    let g0 = wid.z * G;
    let heads = min(G, params.group - g0);
    let h0 = kvh * params.group + g0;
    let c = wid.x;
    let p0 = params.first + c * params.chunk;
    let p1 = min(p0 + params.chunk, params.n_pos);
    let row_pairs = params.n_kv_heads * HALF;
    let kv_base = kvh * HALF;

    for (var i = lid; i < G * HALF; i += WG) {
        let g = i / HALF;
        var v = vec2<f32>(0.0);
        if (g < heads) {
            v = q[(h0 + g) * HALF + i % HALF] * params.scale;
        }
        q_scaled[i] = v;
    }
    for (var i = lid; i < SUBGROUPS_MAX * G * HALF; i += WG) {
        acc[i] = vec2<f32>(0.0);
    }
    workgroupBarrier();

    var m = vec4<f32>(NO_SCORE);
    var l = vec4<f32>(0.0);
    let mine = sub * G * HALF;
    for (var t = p0 + 2u * sub; t < p1; t += 2u * n_sub) {
        let two = t + 1u < p1;
        let row0 = t * row_pairs + kv_base;
        let row1 = select(row0, row0 + row_pairs, two);
        for (var g = 0u; g < heads; g++) {
            var part0 = 0.0;
            var part1 = 0.0;
            for (var j = 0u; j < LANE_PAIRS; j++) {
                let p = lane + j * sg;
                if (p < HALF) {
                    let qv = q_scaled[g * HALF + p];
                    part0 += dot(qv, kv_pair(k_cache[row0 + p]));
                    part1 += dot(qv, kv_pair(k_cache[row1 + p]));
                }
            }
            let s0 = subgroupAdd(part0);
            let s1 = select(NO_SCORE, subgroupAdd(part1), two);
            let m_old = m[g];
            let m_new = max(m_old, max(s0, s1));
            let r = exp(m_old - m_new);
            let e0 = exp(s0 - m_new);
            let e1 = select(0.0, exp(s1 - m_new), two);
            m[g] = m_new;
            l[g] = l[g] * r + e0 + e1;
            for (var j = 0u; j < LANE_PAIRS; j++) {
                let p = lane + j * sg;
                if (p < HALF) {
                    let a = mine + g * HALF + p;
                    let v = e0 * kv_pair(v_cache[row0 + p]) + e1 * kv_pair(v_cache[row1 + p]);
                    acc[a] = acc[a] * r + v;
                }
            }
        }
    }

    // The workgroup's subgroups merged: with M the largest subgroup max of a head,
    // each subgroup's accumulator counts exp(m - M).
    if (lane == 0u) {
        for (var g = 0u; g < G; g++) {
            sub_ml[sub * G + g] = vec2<f32>(m[g], l[g]);
        }
    }
    workgroupBarrier();
    let one_chunk = params.n_chunks == 1u;
    for (var i = lid; i < heads * HALF; i += WG) {
        let g = i / HALF;
        let p = i % HALF;
        var big_m = NO_SCORE;
        for (var s = 0u; s < n_sub; s++) {
            big_m = max(big_m, sub_ml[s * G + g].x);
        }
        var big_l = 0.0;
        var sum = vec2<f32>(0.0);
        for (var s = 0u; s < n_sub; s++) {
            let ml = sub_ml[s * G + g];
            let w = exp(ml.x - big_m);
            big_l += ml.y * w;
            sum += w * acc[(s * G + g) * HALF + p];
        }
        let h = h0 + g;
        if (one_chunk) {
            out[h * HALF + p] = sum / big_l;
        } else {
            part_acc[(h * params.n_chunks + c) * HALF + p] = sum;
            if (p == 0u) {
                part_ml[h * params.n_chunks + c] = vec2<f32>(big_m, big_l);
            }
        }
    }
}

// attention/decode over an f32 KV cache.
