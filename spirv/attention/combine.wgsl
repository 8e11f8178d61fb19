// What both merges of split decode attention (`attention/combine.wgsl` and
// `attention/decode_merge.wgsl`) read first of four chunks of a query head. The includer
// gives ml_at(slot), a slot's (m, l), and NO_SCORE; `n` is the row's chunks.

// Chunks c..c + 4 of the head whose first slot is `first`: their maxes (NO_SCORE past
// the last chunk, so the copies weigh nothing), sums, and the slots read (clamped to
// the last chunk's).
struct FourMl {
    m: vec4<f32>,
    l: vec4<f32>,
    slots: vec4<u32>,
}

fn four_ml(first: u32, c: u32, n: u32) -> FourMl {
    let cs = vec4<u32>(c) + vec4<u32>(0u, 1u, 2u, 3u);
    let s = vec4<u32>(first) + min(cs, vec4<u32>(n - 1u));
    let ml0 = ml_at(s.x);
    let ml1 = ml_at(s.y);
    let ml2 = ml_at(s.z);
    let ml3 = ml_at(s.w);
    let real = cs < vec4<u32>(n);
    return FourMl(select(vec4<f32>(NO_SCORE), vec4<f32>(ml0.x, ml1.x, ml2.x, ml3.x), real),
                  vec4<f32>(ml0.y, ml1.y, ml2.y, ml3.y), s);
}
// The row table of a decode step over many sequences (`AttentionRow` on the host): one
// entry per row of the step, written by the host each step. Row r's q, k and v are row r
// of the qkv rows; its sequence's cache rows are `cache_first + position`, and it attends
// to positions window_first..=pos in `n_chunks` chunks of `chunk` (the split a step of
// this row alone takes, so a row's reduction order never depends on the other rows).

struct AttRow {
    pos: u32,
    cache_first: u32,
    window_first: u32,
    chunk: u32,
    n_chunks: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
// Split-K decode attention, second pass: workgroup h merges query head h's chunks
// (`attention/decode.wgsl`): with M the largest chunk max, L = sum_c l_c exp(m_c - M)
// and out = sum_c acc_c exp(m_c - M) / L.
//
// The pass is a few memory round trips long and nothing else, so it has no barriers
// and no workgroup memory: each invocation merges its own value pairs over all the
// chunks with an online softmax (a running max and sum), reading STEP chunks' (m, l)
// and accumulator pairs in straight-line code before using any of them, so that a
// step's reads are in flight together. Every invocation of a workgroup reads the same
// (m, l), which the hardware serves once. A round takes 40 chunks, so that two
// workgroups per compute unit of the H200 over 8 KV heads (33 chunks) merge in one.

// Workgroup (h, r) merges row r's head h (`attention/decode_io.wgsl`'s layout of rows);
// a row of one chunk was finished by the decode dispatch and is left alone.


const WG: u32 = 64u;
const STEP: u32 = 40u;
const NO_SCORE: f32 = -3.0e38;

struct Params {
    half: u32,      // head_dim / 2
    n_heads: u32,   // query heads per row
    part_stride: u32, // slots per head (decode_io.wgsl)
    out_stride: u32,  // elements from one row's output to the next's
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> part_ml: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> part_acc: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> att_rows: array<AttRow>;

fn ml_at(slot: u32) -> vec2<f32> {
    return part_ml[slot];
}

// Four chunks at value pair p: their maxes (NO_SCORE past the last chunk), sums, and
// accumulator pairs as x and y over the chunks.
struct Four {
    m: vec4<f32>,
    l: vec4<f32>,
    x: vec4<f32>,
    y: vec4<f32>,
}

// Chunks c..c + 4 of the head whose first slot is `first` (see merge_ml.wgsl).
fn four(first: u32, c: u32, n: u32, p: u32) -> Four {
    let ml = four_ml(first, c, n);
    let s = ml.slots;
    let a0 = part_acc[s.x * params.half + p];
    let a1 = part_acc[s.y * params.half + p];
    let a2 = part_acc[s.z * params.half + p];
    let a3 = part_acc[s.w * params.half + p];
    return Four(ml.m, ml.l, vec4<f32>(a0.x, a1.x, a2.x, a3.x), vec4<f32>(a0.y, a1.y, a2.y, a3.y));
}

fn max4(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// The running (m, l, acc) of one value pair.
struct Merged {
    m: f32,
    l: f32,
    acc: vec2<f32>,
}

// `run` with four chunks added, all scaled to the max m (at least theirs and run's).
fn add(run: Merged, m: f32, f: Four) -> Merged {
    let w = exp(f.m - m);
    return Merged(m, run.l + dot(w, f.l), run.acc + vec2<f32>(dot(w, f.x), dot(w, f.y)));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let r = wid.y;
    let n = att_rows[r].n_chunks;
    if (n <= 1u) {
        return;
    }
    let first = (r * params.n_heads + h) * params.part_stride;
    let out_at = (r * params.out_stride) / 2u;
    for (var p = lid; p < params.half; p += WG) {
        var run = Merged(NO_SCORE, 0.0, vec2<f32>(0.0));
        for (var c = 0u; c < n; c += STEP) {
            let f0 = four(first, c, n, p);
            let f1 = four(first, c + 4u, n, p);
            let f2 = four(first, c + 8u, n, p);
            let f3 = four(first, c + 12u, n, p);
            let f4 = four(first, c + 16u, n, p);
            let f5 = four(first, c + 20u, n, p);
            let f6 = four(first, c + 24u, n, p);
            let f7 = four(first, c + 28u, n, p);
            let f8 = four(first, c + 32u, n, p);
            let f9 = four(first, c + 36u, n, p);
            let m_lo = max(max(f0.m, f1.m), max(f2.m, f3.m));
            let m_hi = max(max(f4.m, f5.m), max(f6.m, f7.m));
            let m = max(run.m, max4(max(max(m_lo, m_hi), max(f8.m, f9.m))));
            let r = exp(run.m - m);
            run = Merged(m, run.l * r, run.acc * r);
            run = add(add(add(add(add(run, m, f0), m, f1), m, f2), m, f3), m, f4);
            run = add(add(add(add(add(run, m, f5), m, f6), m, f7), m, f8), m, f9);
        }
        out[out_at + h * params.half + p] = run.acc / run.l;
    }
}
