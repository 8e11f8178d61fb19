// Split-K decode attention's merge in the decode dispatch itself (MERGE = 1): each
// workgroup of a column (one KV head and head group, every chunk) counts itself done
// after its partials are written, and the last one merges the column's chunks, so no
// second dispatch waits on the first one's tail. With M the largest chunk max of a
// head, L = sum_c l_c exp(m_c - M) and out = sum_c acc_c exp(m_c - M) / L.
//
// Why the last workgroup sees the others' partials: every workgroup's writes are
// ordered before its count by a device-scope barrier (SPIR-V: a control barrier with
// device memory scope and acquire-release semantics), and the last one's reads after
// its count by another; and the partials are written and read as atomics, which no
// compute unit's cache serves stale. Plain loads were not enough: on the H200 the
// merger of a single column read partials older than the others' writes, in three runs
// out of three (`decode_attention_matches_the_reference`, f32 2/1x32 over 1,000
// positions; the windowed f16 and q8_0 cases too; `results/attention_merge`). Metal's
// threadgroup_barrier orders device memory only within a threadgroup, so the router
// keeps the combine pass there.
//
// The merge is a few memory round trips long: each invocation merges one quad of a
// head's values over all the chunks, 20 chunks' reads in flight a round (straight-line
// code, as in `attention/combine.wgsl`). The includer (`attention/decode.wgsl`) gives
// params, part_ml, part_acc, out (16-byte words), HD, WG, NO_SCORE and max4.

#include "attention/merge_ml.wgsl"

// The partials, out and back through atomics (see above): a u32 at a time, bitcast.
fn put_ml(slot: u32, ml: vec2<f32>) {
    atomicStore(&part_ml[2u * slot], bitcast<u32>(ml.x));
    atomicStore(&part_ml[2u * slot + 1u], bitcast<u32>(ml.y));
}

fn ml_at(slot: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(atomicLoad(&part_ml[2u * slot])),
                     bitcast<f32>(atomicLoad(&part_ml[2u * slot + 1u])));
}

// Word i (four values) of the accumulators.
fn put_acc(i: u32, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) {
        atomicStore(&part_acc[4u * i + j], bitcast<u32>(v[j]));
    }
}

fn acc_at(i: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(atomicLoad(&part_acc[4u * i])),
                     bitcast<f32>(atomicLoad(&part_acc[4u * i + 1u])),
                     bitcast<f32>(atomicLoad(&part_acc[4u * i + 2u])),
                     bitcast<f32>(atomicLoad(&part_acc[4u * i + 3u])));
}

// Per column ((row * KV heads + KV head) * head groups + head group): its chunks done in
// this step. The
// last one sets it back to 0, so every step starts from zeros (the buffer's first).
@group(0) @binding(8) var<storage, read_write> merge_count: array<atomic<u32>>;
var<workgroup> merging: u32;

const MERGE_ROUND: u32 = 20u;
const QUADS: u32 = HD / 4u;

// Whether this workgroup is the last of `column`'s `n_chunks` to finish its chunk. Call in
// uniform control flow, after the partials are written.
fn last_of_column(column: u32, n_chunks: u32, lid: u32) -> bool {
    storageBarrier();
    if (lid == 0u) {
        let done = atomicAdd(&merge_count[column], 1u) + 1u;
        let last = done == n_chunks;
        if (last) {
            atomicStore(&merge_count[column], 0u);
        }
        merging = select(0u, 1u, last);
    }
    return workgroupUniformLoad(&merging) == 1u;
}

// Four chunks at one quad: their maxes (NO_SCORE past the last chunk), sums and
// accumulators.
struct Four {
    m: vec4<f32>,
    l: vec4<f32>,
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
}

// Chunks c..c + 4 of the head whose first slot is `first` (see merge_ml.wgsl).
fn four_chunks(first: u32, c: u32, n: u32, quad: u32) -> Four {
    let ml = four_ml(first, c, n);
    let s = ml.slots;
    return Four(ml.m, ml.l, acc_at(s.x * QUADS + quad), acc_at(s.y * QUADS + quad),
                acc_at(s.z * QUADS + quad), acc_at(s.w * QUADS + quad));
}

// The running (m, l, acc) of one quad.
struct Merged {
    m: f32,
    l: f32,
    acc: vec4<f32>,
}

// `run` with four chunks added, all scaled to the max m (at least theirs and run's).
fn add_four(run: Merged, m: f32, f: Four) -> Merged {
    let w = exp(f.m - m);
    return Merged(m, run.l + dot(w, f.l),
                  run.acc + w.x * f.a0 + w.y * f.a1 + w.z * f.a2 + w.w * f.a3);
}

// Merges a row's `n` chunks of its query heads h0..h0 + heads into `out`: the row's
// partial slots are those of heads `row_heads` (the rows before it) + h, its output at
// element `out_at`.
fn merge_chunks(h0: u32, heads: u32, row_heads: u32, out_at: u32, n: u32, lid: u32) {
    storageBarrier();
    for (var i = lid; i < heads * QUADS; i += WG) {
        let h = h0 + i / QUADS;
        let quad = i % QUADS;
        let first = (row_heads + h) * params.part_stride;
        var run = Merged(NO_SCORE, 0.0, vec4<f32>(0.0));
        for (var c = 0u; c < n; c += MERGE_ROUND) {
            let f0 = four_chunks(first, c, n, quad);
            let f1 = four_chunks(first, c + 4u, n, quad);
            let f2 = four_chunks(first, c + 8u, n, quad);
            let f3 = four_chunks(first, c + 12u, n, quad);
            let f4 = four_chunks(first, c + 16u, n, quad);
            let m = max(run.m, max4(max(max(max(f0.m, f1.m), max(f2.m, f3.m)), f4.m)));
            let r = exp(run.m - m);
            run = Merged(m, run.l * r, run.acc * r);
            run = add_four(add_four(add_four(add_four(add_four(run, m, f0), m, f1), m, f2),
                                    m, f3), m, f4);
        }
        out[out_at / 4u + h * QUADS + quad] = run.acc / run.l;
    }
}
