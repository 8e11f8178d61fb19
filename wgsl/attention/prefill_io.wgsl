// What the prompt attention kernels (prefill.wgsl, flash.wgsl) share: their parameters
// and bindings, and where a (token, query head) row's token sits, which keys it sees and
// where its values are. The includer sets HD; the format include gives KvWord.

struct Params {
    n_kv_heads: u32,
    group: u32,       // query heads per KV head
    start: u32,       // position of the first token
    n_tokens: u32,
    q_stride: u32,    // elements from one token's q to the next's
    out_stride: u32,  // elements from one token's output to the next's
    scale: f32,       // what q is multiplied by before its dot products
    block_first: u32, // first row block of this dispatch (the grid's x is limited)
    key_first: u32,   // the first key position of this pass
    key_end: u32,     // the pass's keys end before this position
    n_heads: u32,     // query heads: a token's rows of `state`
    window: u32,      // keys a row sees, its own included (0: all up to its own)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<KvWord>;
@group(0) @binding(3) var<storage, read> v_cache: array<KvWord>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// (running max, running sum) of each (token, query head) row between passes.
@group(0) @binding(5) var<storage, read_write> state: array<vec2<f32>>;

// The position of row `row`'s token.
fn row_pos(row: u32) -> u32 {
    return params.start + row / params.group;
}

// The first key a row at `pos` sees: 0, or the start of its window.
fn first_key(pos: u32) -> u32 {
    if (params.window == 0u || pos < params.window) {
        return 0u;
    }
    return pos + 1u - params.window;
}

// Where value d of row `row` (of KV head kvh) is in a buffer of `stride` elements per
// token.
fn row_element(row: u32, kvh: u32, d: u32, stride: u32) -> u32 {
    let head = kvh * params.group + row % params.group;
    return (row / params.group) * stride + head * HD + d;
}
