// Staging shared by the drivers on cooperative matrices (coopmat.wgsl, columns.wgsl):
// groups of 32 values written as CT into the includer's `staged` (array<CT>), where
// the matrix loads read them.

#include "matmul/group_values.wgsl"

// Four values as CT at staged[at..at + 4].
fn put4(at: u32, v: vec4<f32>) {
    let c = vec4<CT>(v);
    staged[at] = c.x;
    staged[at + 1u] = c.y;
    staged[at + 2u] = c.z;
    staged[at + 3u] = c.w;
}

// 16 staged values from four words of int8 quants: scale * (q + offset) + min.
fn put16(at: u32, q: vec4<u32>, scale: f32, offset: i32, min: f32) {
    for (var i = 0u; i < 4u; i++) {
        put4(at + 4u * i, group_values4(q[i], scale, offset, min));
    }
}
