// Fills a buffer with a cheap non-constant pattern so the probe reads real data, not a
// buffer the driver might know to be zero.

struct Params {
    n_u32: u32,
    seed: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = gid.x; i < params.n_u32; i += stride) {
        dst[i] = (i * 2654435761u) ^ params.seed;
    }
}
