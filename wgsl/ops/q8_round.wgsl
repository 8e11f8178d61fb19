#include "matvec/q8_x.wgsl"

// One round of an op writing its output quantized for the dot4 kernels (ops/q8_out.wgsl
// for the norms, ops/silu_mul_q8.wgsl, ops/quantize_rows.wgsl) in matvec/q8_x.wgsl's
// layout: each invocation holds four consecutive values, the eight invocations from
// lid - lid % 8 hold group g, and they meet once in workgroup memory for the group's
// amax; each packs its own four values on both planes (q8_group's arithmetic: q8_inv,
// q8_planes), and the group's first invocation writes the tails after the round's
// closing barrier, where the sums of the eight have met. Every invocation of the
// workgroup calls it (two barriers); `valid` says whether group g exists. The op
// declares WG and `out_q8` (array<u32>).

var<workgroup> q8_amaxes: array<f32, WG>;
// Per invocation, the sums of its four values on each plane.
var<workgroup> q8_sums: array<vec2<i32>, WG>;

fn q8_round(lid: u32, g: u32, valid: bool, v: vec4<f32>) {
    let p = lid % 8u;
    let first = lid - p;
    let a = abs(v);
    q8_amaxes[lid] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    var amax = 0.0;
    for (var j = 0u; j < 8u; j++) {
        amax = max(amax, q8_amaxes[first + j]);
    }
    let planes = q8_planes(v, q8_inv(amax));
    let ones = 0x01010101u;
    q8_sums[lid] = vec2<i32>(dot4I8Packed(planes.x, ones), dot4I8Packed(planes.y, ones));
    // Group g's u32s: plane 1 (8), its tail (4), plane 2 (8), the two planes' tail (4).
    let at = 4u * Q8_GROUP_VEC4S * g;
    if (valid) {
        out_q8[at + p] = planes.x;
        out_q8[at + 12u + p] = planes.y;
    }
    // Also closes the round: the next one writes q8_amaxes first and q8_sums only after
    // its first barrier, so the reads below are safe without another.
    workgroupBarrier();
    if (valid && p == 0u) {
        let s_lo = q8_sums[first] + q8_sums[first + 1u] + q8_sums[first + 2u]
                 + q8_sums[first + 3u];
        let s_hi = q8_sums[first + 4u] + q8_sums[first + 5u] + q8_sums[first + 6u]
                 + q8_sums[first + 7u];
        let s1 = vec2<i32>(s_lo.x, s_hi.x);
        let s2 = vec2<i32>(s_lo.y, s_hi.y);
        let tail = q8_tail_of(amax / 127.0, s1.x, s1.y);
        let tail2 = q8_tail2_of(amax, s1, s2);
        for (var j = 0u; j < 4u; j++) {
            out_q8[at + 8u + j] = bitcast<u32>(tail[j]);
            out_q8[at + 20u + j] = bitcast<u32>(tail2[j]);
        }
    }
}
