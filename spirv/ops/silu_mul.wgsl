// SwiGLU's elementwise part: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    for (var i = gid.x; i < params.n; i += groups.x * 256u) {
        let g = gate[i];
        out[i] = g / (1.0 + exp(-g)) * up[i];
    }
}
