// The decode columns' K spans summed (columns.wgsl with K_SPANS > 1): y[t * y_stride +
// y_offset + r] = the sum over spans s, in span order, of spans[(s * n_tokens + t) * m
// + r]. The order is fixed, so a token's output depends on its own spans alone.

struct Params {
    m: u32,          // rows (outputs per token)
    n_tokens: u32,
    spans: u32,
    y_offset: u32,   // output element of row 0 within a token's row of y
    y_stride: u32,   // floats per token in y
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> spans: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) id: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let n = params.m * params.n_tokens;
    for (var i = id.x; i < n; i += groups.x * WG) {
        var sum = spans[i];
        for (var s = 1u; s < params.spans; s++) {
            sum += spans[s * n + i];
        }
        y[(i / params.m) * params.y_stride + params.y_offset + i % params.m] = sum;
    }
}
