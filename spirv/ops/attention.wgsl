// Decode attention over the KV cache with grouped-query heads: one workgroup of 256
// invocations per query head h, reading kv head h / (n_heads / n_kv_heads). Scores
// take a team of up to 16 invocations per position; the weighted sum of V splits the
// positions over WG / head_dim groups of head_dim invocations (coalesced V reads),
// whose partial sums meet in workgroup memory.
//
//   s[t] = q_h · k[t] * scale          for t in 0..n_pos
//   p = softmax(s)                     (max subtracted first)
//   out_h = sum_t p[t] * v[t]
//
// Scores go to a per-head scratch row in device memory, so any context length works
// with fixed workgroup memory; the reductions are tree reductions (no subgroups).

const WG: u32 = 256u;

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_pos: u32,      // positions in the cache, this one included
    max_pos: u32,    // row stride of the score scratch
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read> v_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> red: array<f32, WG>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let hd = params.head_dim;
    let kvh = h / (params.n_heads / params.n_kv_heads);
    let kv_dim = params.n_kv_heads * hd;
    let q_base = h * hd;
    let row = h * params.max_pos;

    // Scores: a team of `team` invocations per position, each summing every team-th
    // dimension, so short contexts still keep the whole workgroup loading. (One
    // invocation per position, each walking all of a 128-wide head, cost 25-37 us per
    // Llama-3-8B layer on the H200 at 64 positions.)
    let team = max(1u, min(16u, WG / max(params.n_pos, 1u)));
    let tl = lid % team;
    let per_round = WG / team;
    var m = -3.4e38;
    for (var t0 = 0u; t0 < params.n_pos; t0 += per_round) {
        let t = t0 + lid / team;
        var part = 0.0;
        if (t < params.n_pos && lid < per_round * team) {
            let k_base = t * kv_dim + kvh * hd;
            var d = tl;
            // Two sums, two loads of each in flight.
            var part1 = 0.0;
            for (; d + team < hd; d += 2u * team) {
                part += q[q_base + d] * k_cache[k_base + d];
                part1 += q[q_base + d + team] * k_cache[k_base + d + team];
            }
            if (d < hd) {
                part += q[q_base + d] * k_cache[k_base + d];
            }
            part += part1;
        }
        red[lid] = part;
        workgroupBarrier();
        if (tl == 0u && t < params.n_pos && lid < per_round * team) {
            var s = 0.0;
            for (var j = 0u; j < team; j++) {
                s += red[lid + j];
            }
            s *= params.scale;
            scores[row + t] = s;
            m = max(m, s);
        }
        workgroupBarrier();
    }
    m = reduce_max(lid, m);
    // The exponentials below read scores other invocations wrote.
    storageBarrier();

    var sum = 0.0;
    for (var t = lid; t < params.n_pos; t += WG) {
        let e = exp(scores[row + t] - m);
        scores[row + t] = e;
        sum += e;
    }
    sum = reduce_sum(lid, sum);
    // The weighted sum reads every score: make the writes of the whole workgroup visible.
    storageBarrier();

    let inv = 1.0 / sum;
    // Invocation lid owns dimension d0 + lid % lanes for positions g, g + groups, ...
    let lanes = min(hd, WG);
    let groups = WG / lanes;
    let g = lid / lanes;
    let dl = lid % lanes;
    for (var d0 = 0u; d0 < hd; d0 += lanes) {
        let d = d0 + dl;
        var acc = 0.0;
        if (g < groups && d < hd) {
            let v_base = kvh * hd + d;
            // Four positions per iteration, for the same reason as the scores.
            var t = g;
            for (; t + 3u * groups < params.n_pos; t += 4u * groups) {
                let t1 = t + groups;
                let t2 = t1 + groups;
                let t3 = t2 + groups;
                acc += (scores[row + t] * v_cache[t * kv_dim + v_base]
                      + scores[row + t1] * v_cache[t1 * kv_dim + v_base])
                     + (scores[row + t2] * v_cache[t2 * kv_dim + v_base]
                      + scores[row + t3] * v_cache[t3 * kv_dim + v_base]);
            }
            for (; t < params.n_pos; t += groups) {
                acc += scores[row + t] * v_cache[t * kv_dim + v_base];
            }
        }
        red[lid] = acc;
        workgroupBarrier();
        if (g == 0u && d < hd) {
            var total = 0.0;
            for (var j = 0u; j < groups; j++) {
                total += red[j * lanes + dl];
            }
            out[q_base + d] = total * inv;
        }
        workgroupBarrier();
    }
}
