// Staging shared by the drivers on cooperative matrices (coopmat.wgsl, columns.wgsl):
// groups of 32 values written as CT into the includer's `staged` (array<CT>), where
// the matrix loads read them.

// 16 staged values from four words of int8 quants: scale * (q + offset) + min.
fn put16(at: u32, q: vec4<u32>, scale: f32, offset: i32, min: f32) {
    for (var i = 0u; i < 4u; i++) {
        let v = vec4<f32>(unpack4xI8(q[i]) + vec4<i32>(offset)) * scale + min;
        let c = vec4<CT>(v);
        let o = at + 4u * i;
        staged[o] = c.x;
        staged[o + 1u] = c.y;
        staged[o + 2u] = c.z;
        staged[o + 3u] = c.w;
    }
}
