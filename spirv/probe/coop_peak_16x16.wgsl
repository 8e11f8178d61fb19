enable f16;
enable wgpu_cooperative_matrix;
const S: u32 = 16u;
alias CT = f16;
alias MatA = coop_mat16x16<f16, A>;
alias MatB = coop_mat16x16<f16, B>;
alias MatC = coop_mat16x16<f32, C>;

// Cooperative-matrix throughput: every subgroup runs eight independent chains of
// coopMultiplyAdd, each step's accumulator its chain's last, on two matrices loaded
// once, so nothing can be hoisted out of the loop and the chains keep the matrix units
// busy. The inputs are small (at most 0.012), so a chain grows by under 0.003 a step: no
// infinities or denormals. The accumulators are written only when the host passes a
// `never` it never passes. The yardstick the cooperative-matrix matmuls are held to:
// 2 * S^3 operations (S^3 multiply-adds) per coopMultiplyAdd.
//
// The host prepends the `f16` (where CT is f16) and `wgpu_cooperative_matrix` enables
// and S, CT, MatA, MatB, MatC, as for the matmuls (`matmul/coopmat.wgsl`).

struct Params {
    iters: u32,
    never: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> sink: array<f32>;

override WG: u32 = 128u;

// Steps per chain per loop iteration.
const UNROLL: u32 = 4u;
const CHAINS: u32 = 8u;

var<workgroup> inputs: array<CT, 2u * S * S>;
var<workgroup> outputs: array<f32, CHAINS * S * S>;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wid: vec3<u32>) {
    for (var i = lid; i < 2u * S * S; i += WG) {
        inputs[i] = CT(f32((i * 7u + wid.x) % 13u) * 0.001);
    }
    for (var i = lid; i < CHAINS * S * S; i += WG) {
        outputs[i] = 0.0;
    }
    workgroupBarrier();
    let a = coopLoad<MatA>(&inputs[0], S);
    let b = coopLoad<MatB>(&inputs[S * S], S);
    var c0 = coopLoad<MatC>(&outputs[0], S);
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    var c4 = c0;
    var c5 = c0;
    var c6 = c0;
    var c7 = c0;
    for (var i = 0u; i < params.iters; i++) {
        for (var u = 0u; u < UNROLL; u++) {
            c0 = coopMultiplyAdd(a, b, c0);
            c1 = coopMultiplyAdd(a, b, c1);
            c2 = coopMultiplyAdd(a, b, c2);
            c3 = coopMultiplyAdd(a, b, c3);
            c4 = coopMultiplyAdd(a, b, c4);
            c5 = coopMultiplyAdd(a, b, c5);
            c6 = coopMultiplyAdd(a, b, c6);
            c7 = coopMultiplyAdd(a, b, c7);
        }
    }
    // A branch every invocation takes alike (cooperative operations need uniform
    // control flow), on a value the compiler cannot know.
    if (params.never == 1u) {
        workgroupBarrier();
        coopStore(c0, &outputs[0u * S * S], S);
        coopStore(c1, &outputs[1u * S * S], S);
        coopStore(c2, &outputs[2u * S * S], S);
        coopStore(c3, &outputs[3u * S * S], S);
        coopStore(c4, &outputs[4u * S * S], S);
        coopStore(c5, &outputs[5u * S * S], S);
        coopStore(c6, &outputs[6u * S * S], S);
        coopStore(c7, &outputs[7u * S * S], S);
        workgroupBarrier();
        var total = 0.0;
        for (var i = lid; i < CHAINS * S * S; i += WG) {
            total += outputs[i];
        }
        sink[lid] = total;
    }
}
