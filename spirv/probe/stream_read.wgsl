// Streaming read: every invocation walks the buffer with a grid stride, four 16-byte
// loads in flight per iteration. The sum is written only when it equals a value the
// host never passes, which keeps the loads alive without costing a write per thread.

struct Params {
    n_vec4: u32,
    never: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> sink: array<u32>;

override WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * WG;
    var acc = vec4<u32>(0u);
    var i = gid.x;
    let n = params.n_vec4;
    loop {
        if (i + 3u * stride >= n) { break; }
        acc += src[i] + src[i + stride] + src[i + 2u * stride] + src[i + 3u * stride];
        i += 4u * stride;
    }
    loop {
        if (i >= n) { break; }
        acc += src[i];
        i += stride;
    }
    let total = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (total == params.never) {
        sink[0] = total;
    }
}
