// KV-cache append: the k and v vectors of this position go to row `pos` of the
// layer's caches (layout [pos][kv_head][head_dim], f32).

struct Params {
    kv_dim: u32,
    pos: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= params.kv_dim) {
        return;
    }
    k_cache[params.pos * params.kv_dim + i] = k[i];
    v_cache[params.pos * params.kv_dim + i] = v[i];
}
