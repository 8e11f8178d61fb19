// Embedding row lookup: out[i] = table[token - first_row][i], for token[r] into row r
// of out for each workgroup row r (one for a decode step, a batch of prompt tokens in
// prefill).
//
// The token id is read from a GPU buffer (written by the host for prompt tokens, or by
// argmax for greedy decode), so consecutive tokens need no CPU round trip. A table
// larger than one binding is split into row parts, one dispatch per part; only the
// dispatch whose part holds the token writes.

struct Params {
    dim: u32,        // row length
    first_row: u32,  // first table row in this binding
    rows: u32,       // rows in this binding
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> token: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let t = token[wid.y];
    if (t < params.first_row || t - params.first_row >= params.rows) {
        return;
    }
    let base = (t - params.first_row) * params.dim;
    for (var i = gid.x; i < params.dim; i += groups.x * 256u) {
        out[wid.y * params.dim + i] = table[base + i];
    }
}
