// SwiGLU's elementwise part, silu(gate) * up, written only quantized, as the dot4
// down projection takes x (matvec/q8_x.wgsl's layout): once per step, where a `glu`
// down projection computes it in every workgroup while staging.
//
// Eight invocations per group of 32, four elements each, meeting in workgroup memory
// for the group's amax and sums as ops/q8_out.wgsl's do (one invocation per group,
// 32 exps and 64 loads in a row, took the H200 about 10 µs a dispatch). The
// arithmetic is the staging's: the same silu, q8_inv, pack4x8snorm and tail, so that
// the matvec multiplies the x it would have quantized itself.

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out_q8: array<u32>;

const WG: u32 = 64u;
const GROUPS_PER_WG: u32 = WG / 8u;
// Each invocation's amax of its four values, then the sum of its four int8 values.
var<workgroup> amaxes: array<f32, WG>;
var<workgroup> sums: array<i32, WG>;

// silu(gate[e]) * up[e], 0 past the end.
fn glu(e: u32) -> f32 {
    if (e >= params.n) {
        return 0.0;
    }
    let a = gate[e];
    return a / (1.0 + exp(-a)) * up[e];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n_groups = (params.n + 31u) / 32u;
    let p = lid % 8u;
    let first = lid - p;
    // Whole rounds of GROUPS_PER_WG groups, so that every invocation reaches the
    // barriers.
    for (var base = wid.x * GROUPS_PER_WG; base < n_groups; base += groups.x * GROUPS_PER_WG) {
        let g = base + lid / 8u;
        let e = 32u * g + 4u * p;
        let v = vec4<f32>(glu(e), glu(e + 1u), glu(e + 2u), glu(e + 3u));
        let a = abs(v);
        amaxes[lid] = max(max(a.x, a.y), max(a.z, a.w));
        workgroupBarrier();
        var amax = 0.0;
        for (var j = 0u; j < 8u; j++) {
            amax = max(amax, amaxes[first + j]);
        }
        let packed = pack4x8snorm(v * q8_inv(amax));
        sums[lid] = dot4I8Packed(packed, 0x01010101u);
        if (g < n_groups) {
            out_q8[12u * g + p] = packed;
        }
        // Also closes the round: the next one writes `amaxes` first and `sums` only
        // after its first barrier.
        workgroupBarrier();
        if (g < n_groups && p == 0u) {
            let s_lo = sums[first] + sums[first + 1u] + sums[first + 2u] + sums[first + 3u];
            let s_hi = sums[first + 4u] + sums[first + 5u] + sums[first + 6u] + sums[first + 7u];
            let tail = q8_tail_of(amax / 127.0, s_lo, s_hi);
            for (var j = 0u; j < 4u; j++) {
                out_q8[12u * g + 8u + j] = bitcast<u32>(tail[j]);
            }
        }
    }
}
