// f32 multiply-add throughput: every invocation runs eight independent chains of
// vec4 fma, each step's operand taken from its chain's last value, so nothing can be
// hoisted out of the loop and the chains keep the units busy. With a multiplier below 1
// every chain settles towards b / (1 - a), at most 2: no infinities or denormals, which
// some units take a slow path for. The result is written only when it equals a
// value the host never passes. The yardstick the fma matmuls are held to: 8 floating-
// point operations (4 multiply-adds) per vec4 fma.

struct Params {
    iters: u32,
    never: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> sink: array<u32>;

override WG: u32 = 256u;

// Steps per chain per loop iteration.
const UNROLL: u32 = 4u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    // Depends on `never`, so the compiler cannot fold the chains into constants.
    let a = vec4<f32>(0.5) + vec4<f32>(f32(params.never & 1u) * 0.25);
    let b = vec4<f32>(f32(gid.x & 255u) * (1.0 / 512.0));
    var s0 = vec4<f32>(f32(gid.x & 7u) * 0.125);
    var s1 = s0 + 0.01;
    var s2 = s0 + 0.02;
    var s3 = s0 + 0.03;
    var s4 = s0 + 0.04;
    var s5 = s0 + 0.05;
    var s6 = s0 + 0.06;
    var s7 = s0 + 0.07;
    for (var i = 0u; i < params.iters; i++) {
        for (var u = 0u; u < UNROLL; u++) {
            s0 = fma(s0, a, b);
            s1 = fma(s1, a, b);
            s2 = fma(s2, a, b);
            s3 = fma(s3, a, b);
            s4 = fma(s4, a, b);
            s5 = fma(s5, a, b);
            s6 = fma(s6, a, b);
            s7 = fma(s7, a, b);
        }
    }
    let total = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    let bits = bitcast<u32>(total.x + total.y + total.z + total.w);
    if (bits == params.never) {
        sink[0] = bits;
    }
}
