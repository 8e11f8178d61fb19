// Per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3), in place: each head's
// values v become v / sqrt(mean(v^2) + eps) * w, with w the q weights for a query head
// and the k weights for a KV head (w holds both, q's first).
//
// Workgroup (h, r) takes head h of row r: query heads h < n_q_heads at h * head_dim,
// KV heads after them at k_first + (h - n_q_heads) * head_dim, every offset within the
// row that starts at r * row_stride (decode passes one row, a prefill batch its
// tokens'). Each invocation reads and rewrites the same elements, so the norm needs no
// second buffer.

struct Params {
    head_dim: u32,
    n_q_heads: u32,
    k_first: u32,
    row_stride: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let hd = params.head_dim;
    var base = wid.y * params.row_stride + h * hd;
    var w_first = 0u;
    if (h >= params.n_q_heads) {
        base = wid.y * params.row_stride + params.k_first + (h - params.n_q_heads) * hd;
        w_first = hd;
    }
    var acc = 0.0;
    for (var i = lid; i < hd; i += WG) {
        let v = qkv[base + i];
        acc += v * v;
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(partial[0] / f32(hd) + params.eps);
    for (var i = lid; i < hd; i += WG) {
        qkv[base + i] = qkv[base + i] * scale * w[w_first + i];
    }
}
