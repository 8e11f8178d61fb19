// Staging shared by the drivers on cooperative matrices (coopmat.wgsl, columns.wgsl):
// groups of 32 values written as CT into the includer's `staged` (array<CT>), where
// the matrix loads read them. The includer also includes its type's decoder
// (`weight_group`, io.wgsl's contract).

// 16 staged values from four words of int8 quants: scale * (q + offset) + min.
fn put16(at: u32, q: vec4<u32>, scale: f32, offset: i32, min: f32) {
    for (var i = 0u; i < 4u; i++) {
        let c = vec4<CT>(vec4<f32>(unpack4xI8(q[i]) + vec4<i32>(offset)) * scale + min);
        let o = at + 4u * i;
        staged[o] = c.x;
        staged[o + 1u] = c.y;
        staged[o + 2u] = c.z;
        staged[o + 3u] = c.w;
    }
}

// Weight group g of the dispatch's row `row` at staged[at..at + 32]; zeros where it is
// not `live` (past the matrix's rows or K).
fn stage_weights(at: u32, row: u32, g: u32, live: bool) {
    var q = WGroup(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), 0, 0.0);
    if (live) {
        q = weight_group(row * params.row_bytes, g);
    }
    put16(at, q.lo, q.scale.x, q.offset, q.min);
    put16(at + 16u, q.hi, q.scale.y, q.offset, q.min);
}
