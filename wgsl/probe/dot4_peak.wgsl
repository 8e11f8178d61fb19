// Integer dot-product throughput: every invocation runs eight independent chains of
// dot4I8Packed, each step's operand taken from its chain's last sum, so nothing can be
// hoisted out of the loop and the chains keep the units busy. The result is written
// only when it equals a value the host never passes. The yardstick the dot4 matmuls are
// held to: 8 integer operations (4 multiply-adds) per dot4I8Packed.

struct Params {
    iters: u32,
    never: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> sink: array<u32>;

override WG: u32 = 256u;

// Steps per chain per loop iteration.
const UNROLL: u32 = 4u;

fn step(s: i32, y: u32) -> i32 {
    return s + dot4I8Packed(bitcast<u32>(s), y);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let y = gid.x * 2654435761u ^ params.never;
    var s0 = i32(gid.x);
    var s1 = s0 + 1;
    var s2 = s0 + 2;
    var s3 = s0 + 3;
    var s4 = s0 + 4;
    var s5 = s0 + 5;
    var s6 = s0 + 6;
    var s7 = s0 + 7;
    for (var i = 0u; i < params.iters; i++) {
        for (var u = 0u; u < UNROLL; u++) {
            s0 = step(s0, y);
            s1 = step(s1, y);
            s2 = step(s2, y);
            s3 = step(s3, y);
            s4 = step(s4, y);
            s5 = step(s5, y);
            s6 = step(s6, y);
            s7 = step(s7, y);
        }
    }
    let total = bitcast<u32>(s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7);
    if (total == params.never) {
        sink[0] = total;
    }
}
