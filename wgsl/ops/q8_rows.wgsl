// Rows of values written only quantized, as the dot4 kernels take x
// (matvec/q8_x.wgsl's layout; a row's groups end to end, then the next row's): the
// driver of ops/silu_mul_q8 (silu(gate) * up) and ops/quantize_rows (x as it is).
//
// Eight invocations per group of 32, four elements each, quantizing it together as the
// q8 norms do (ops/q8_round.wgsl; one invocation per group, 32 exps and 64 loads in a
// row, took the H200 about 10 µs a dispatch). Row r's element e is input element
// r * stride + e, so the rows may be read out of a wider buffer (the gate and up of a
// prefill batch, every token's side by side).
//
// The root file declares the input bindings, `out_q8` and
//   fn values4(at: u32, e: u32, n: u32) -> vec4<f32>
// the row's four values from element e, at its first element, zeros from n on.

struct Params {
    n: u32,       // values per row
    rows: u32,
    stride: u32,  // input elements from one row to the next
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 64u;
const GROUPS_PER_WG: u32 = WG / 8u;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let per_row = (params.n + 31u) / 32u;
    let n_groups = per_row * params.rows;
    // Whole rounds of GROUPS_PER_WG groups, so that every invocation reaches the
    // barriers.
    for (var base = wid.x * GROUPS_PER_WG; base < n_groups; base += groups.x * GROUPS_PER_WG) {
        let g = base + lid / 8u;
        let r = g / per_row;
        let e = 32u * (g % per_row) + 4u * (lid % 8u);
        var v = vec4<f32>(0.0);
        if (g < n_groups) {
            v = values4(r * params.stride, e, params.n);
        }
        q8_round(lid, g, g < n_groups, v);
    }
}
