// RoPE, llama.cpp's "normal" mode (the one for LLAMA with GGUF-permuted Q/K weights):
// within each head, the adjacent pair (x[2i], x[2i+1]) is rotated by
// theta = pos * base^(-2i / rope_dim). Pairs at or beyond rope_dim stay as they are.
//
// cos/sin come from a table the host computed in f64 at load (cs[pos][i] = (cos, sin)):
// GPU sin/cos are only loosely specified for large arguments, and a table lookup is
// exact. The position is a uniform parameter, so the host can record ahead.

struct Params {
    n_heads: u32,
    head_dim: u32,
    rope_dim: u32,
    pos: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half = params.rope_dim / 2u;
    let pair = gid.x;
    if (pair >= params.n_heads * half) {
        return;
    }
    let head = pair / half;
    let i = pair % half;
    let c = cs[params.pos * half + i];
    let j = head * params.head_dim + 2u * i;
    let x0 = x[j];
    let x1 = x[j + 1u];
    x[j] = x0 * c.x - x1 * c.y;
    x[j + 1u] = x0 * c.y + x1 * c.x;
}
