// Split-K decode attention, second pass: workgroup h merges query head h's chunks
// (`attention_split.wgsl`): with M the largest chunk max, L = sum_c l_c exp(m_c - M)
// and out = sum_c acc_c exp(m_c - M) / L. Every invocation reads the chunks' (m, l)
// (a few hundred at most, from cache) and owns dimensions lid, lid + WG, ...

const WG: u32 = 128u;

struct Params {
    n_heads: u32,
    head_dim: u32,
    n_chunks: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> part_ml: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> part_acc: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let hd = params.head_dim;
    let first = h * params.n_chunks;
    var m = -3.4e38;
    for (var c = 0u; c < params.n_chunks; c++) {
        m = max(m, part_ml[first + c].x);
    }
    var l = 0.0;
    for (var c = 0u; c < params.n_chunks; c++) {
        let ml = part_ml[first + c];
        l += ml.y * exp(ml.x - m);
    }
    let inv = 1.0 / l;
    for (var d = lid; d < hd; d += WG) {
        var a = 0.0;
        for (var c = 0u; c < params.n_chunks; c++) {
            a += part_acc[(first + c) * hd + d] * exp(part_ml[first + c].x - m);
        }
        out[h * hd + d] = a * inv;
    }
}
