// Greedy pick on the GPU: token[0] = argmax(logits), the lowest index on ties (the
// CPU sampler's rule). One workgroup: a strided scan, then a tree reduction on
// (value, index) pairs. NaN logits never win.

const WG: u32 = 256u;

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> token: array<u32>;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

// Whether (v, i) ranks before (bv, bi).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    var bv = -3.4028235e38;
    var bi = 0xffffffffu;
    for (var i = lid; i < params.n; i += WG) {
        let v = logits[i];
        // Indices only grow within this loop, so ties keep the earlier one.
        if (v > bv || (v == bv && bi == 0xffffffffu)) {
            bv = v;
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s && better(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid])) {
            best_v[lid] = best_v[lid + s];
            best_i[lid] = best_i[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        // All logits NaN or -inf below f32::MIN: fall back to token 0.
        token[0] = select(best_i[0], 0u, best_i[0] == 0xffffffffu);
    }
}
