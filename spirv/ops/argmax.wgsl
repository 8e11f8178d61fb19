// Greedy pick on the GPU: token[0] = argmax(logits), the lowest index on ties (the
// CPU sampler's rule). NaN logits never win.
//
// It also counts the logits that are NaN or infinite into token[1], so the 4-byte id
// read back after every step carries, in the same copy, whether the step went wrong;
// and token[2] keeps the id the step embedded (token[0] before this shader overwrites
// it), so a step that did can be replayed to find where. Both tests look at the bits,
// not at float compares, which NaN fails and fast math may drop.
//
// Two dispatches of this shader, because one workgroup scanning a 128K vocabulary
// alone took 0.2 ms on the H200:
//   stage 0: workgroup g scans logits[g * chunk ..][.. chunk] and writes its best
//            (value bits, index) pair and its non-finite count to partial[3g ..][.. 3];
//   stage 1: one workgroup scans the n triples stage 0 wrote and writes token.
// Each is a strided scan, four loads in flight per invocation, then a tree reduction
// on (value, index, count) triples in workgroup memory.

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
const EXPONENT: u32 = 0x7f800000u;

struct Params {
    n: u32,        // stage 0: logits; stage 1: triples
    chunk: u32,    // stage 0: logits per workgroup
    stage: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> partial: array<u32>;
@group(0) @binding(3) var<storage, read_write> token: array<u32>;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;
var<workgroup> best_bad: array<u32, WG>;

struct Best {
    v: f32,
    i: u32,
    // NaN or infinite logits among those this candidate stands for.
    bad: u32,
}

// The better of two candidates: larger value, then lower index; NONE never wins. The
// counts add up.
fn pick(a: Best, b: Best) -> Best {
    var r = a;
    if (b.i != NONE && (a.i == NONE || b.v > a.v || (b.v == a.v && b.i < a.i))) {
        r = b;
    }
    r.bad = a.bad + b.bad;
    return r;
}

// Candidate i of this stage, or NONE past `end`.
fn candidate(i: u32, end: u32) -> Best {
    if (i >= end) {
        return Best(0.0, NONE, 0u);
    }
    if (params.stage == 0u) {
        let v = logits[i];
        let bits = bitcast<u32>(v) & 0x7fffffffu;
        let nan = bits > EXPONENT;
        return Best(v, select(i, NONE, nan), select(0u, 1u, bits >= EXPONENT));
    }
    return Best(bitcast<f32>(partial[3u * i]), partial[3u * i + 1u], partial[3u * i + 2u]);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var start = 0u;
    var end = params.n;
    if (params.stage == 0u) {
        start = wid.x * params.chunk;
        end = min(params.n, start + params.chunk);
    }
    var b = Best(0.0, NONE, 0u);
    for (var i = start + lid; i < end; i += 4u * WG) {
        let c0 = candidate(i, end);
        let c1 = candidate(i + WG, end);
        let c2 = candidate(i + 2u * WG, end);
        let c3 = candidate(i + 3u * WG, end);
        b = pick(pick(b, c0), pick(pick(c1, c2), c3));
    }
    best_v[lid] = b.v;
    best_i[lid] = b.i;
    best_bad[lid] = b.bad;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            let r = pick(
                Best(best_v[lid], best_i[lid], best_bad[lid]),
                Best(best_v[lid + s], best_i[lid + s], best_bad[lid + s]),
            );
            best_v[lid] = r.v;
            best_i[lid] = r.i;
            best_bad[lid] = r.bad;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        if (params.stage == 0u) {
            partial[3u * wid.x] = bitcast<u32>(best_v[0]);
            partial[3u * wid.x + 1u] = best_i[0];
            partial[3u * wid.x + 2u] = best_bad[0];
        } else {
            token[2] = token[0];
            token[1] = best_bad[0];
            // Every logit NaN: fall back to token 0 (token[1] says so).
            token[0] = select(best_i[0], 0u, best_i[0] == NONE);
        }
    }
}
