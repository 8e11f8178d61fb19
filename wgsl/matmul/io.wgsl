// A matmul's parameters, its weight binding and its weight decoders' contract, shared
// by the drivers (dot4.wgsl, coopmat.wgsl, columns.wgsl, unpack.wgsl), which declare
// what else they bind, and the per-type decoders (<type>.wgsl), which define
//   alias W                   the weight binding's element (u32 or vec4<u32>)
//   fn weight_group(row_byte: u32, g: u32) -> WGroup
// group g (weights 32g .. 32g + 32) of the row starting at byte `row_byte`, reading the
// layout its dot4 matvec uploads (the two share the weight buffers).

struct Params {
    m: u32,          // rows in this dispatch (its weight part)
    k: u32,          // columns
    row_bytes: u32,  // bytes per weight row
    y_offset: u32,   // output element of row 0 of this dispatch within a token's row of y
    n_tokens: u32,
    x_stride: u32,   // vec4s per token in x (6 per group of 32, q8_x.wgsl)
    y_stride: u32,   // floats per token in y
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<W>;

// 32 weights: int8 quants q (lo: weights 0..16, four per word, hi: 16..32), value
// scale[h] * (q + offset) + min for the weights of half h. Every type fits this form:
// Q4_0 and Q5_0 (offset -8, -16), Q4_1 and Q5_1 (min), Q8_0, the K-quants' sub-block
// scales and minimums, and Q6_K's 16-weight scales (a scale per half, offset -32).
struct WGroup {
    lo: vec4<u32>,
    hi: vec4<u32>,
    scale: vec2<f32>,
    offset: i32,
    min: f32,
}
