// Split-K decode attention, second pass: workgroup h merges query head h's chunks
// (`attention/decode.wgsl`): with M the largest chunk max, L = sum_c l_c exp(m_c - M)
// and out = sum_c acc_c exp(m_c - M) / L.
//
// Every step is spread over the workgroup, since a loop over the chunks in one
// invocation waits a memory round trip per chunk: M and L are tree reductions over
// the chunks; each chunk's weight exp(m_c - M) goes to workgroup memory, CHUNKS at a
// time; and each value pair is summed by WG / width invocations (width = the pairs
// taken at once), each over every (WG / width)-th chunk, then added up.

const WG: u32 = 256u;
const CHUNKS: u32 = 256u;
const NO_SCORE: f32 = -3.0e38;

struct Params {
    half: u32,      // head_dim / 2
    n_chunks: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> part_ml: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> part_acc: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec2<f32>>;

var<workgroup> reduce: array<f32, WG>;
var<workgroup> weight: array<f32, CHUNKS>;
var<workgroup> partial: array<vec2<f32>, WG>;

// The maximum (max_of = true) or the sum of every invocation's `v`.
fn workgroup_reduce(v: f32, lid: u32, max_of: bool) -> f32 {
    reduce[lid] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            let a = reduce[lid];
            let b = reduce[lid + stride];
            reduce[lid] = select(a + b, max(a, b), max_of);
        }
        workgroupBarrier();
    }
    let r = reduce[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let half = params.half;
    let n = params.n_chunks;
    let first = h * n;
    var m = NO_SCORE;
    for (var c = lid; c < n; c += WG) {
        m = max(m, part_ml[first + c].x);
    }
    let big_m = workgroup_reduce(m, lid, true);
    var l = 0.0;
    for (var c = lid; c < n; c += WG) {
        let ml = part_ml[first + c];
        l += ml.y * exp(ml.x - big_m);
    }
    let inv = 1.0 / workgroup_reduce(l, lid, false);

    let width = min(half, WG);
    let lanes = WG / width;
    let r = lid / width;
    let pl = lid % width;
    for (var p0 = 0u; p0 < half; p0 += width) {
        let p = p0 + pl;
        var a = vec2<f32>(0.0);
        for (var c0 = 0u; c0 < n; c0 += CHUNKS) {
            let nc = min(CHUNKS, n - c0);
            workgroupBarrier();
            for (var c = lid; c < nc; c += WG) {
                weight[c] = exp(part_ml[first + c0 + c].x - big_m) * inv;
            }
            workgroupBarrier();
            if (r < lanes && p < half) {
                for (var c = r; c < nc; c += lanes) {
                    a += weight[c] * part_acc[(first + c0 + c) * half + p];
                }
            }
        }
        partial[lid] = a;
        workgroupBarrier();
        if (r == 0u && p < half) {
            var sum = vec2<f32>(0.0);
            for (var i = 0u; i < lanes; i++) {
                sum += partial[i * width + pl];
            }
            out[h * half + p] = sum;
        }
        workgroupBarrier();
    }
}
