// Staging shared by the drivers on cooperative matrices (coopmat.wgsl, columns.wgsl):
// groups of 32 values written as CT into the includer's `staged` (array<Staged>), where
// the matrix loads read them. The host picks how values are stored (STAGED: put4,
// Staged and STAGED_VALUES from staged_vec4.wgsl or staged_scalar.wgsl); offsets here
// count values.

#include "matmul/group_values.wgsl"

// A staged row's stride in elements of `staged` (the includer's LD counts values).
const LDS: u32 = LD / STAGED_VALUES;

// The element of `staged` that value `at` starts (at a multiple of STAGED_VALUES).
fn cell(at: u32) -> u32 {
    return at / STAGED_VALUES;
}

// 16 staged values from four words of int8 quants: scale * (q + offset) + min.
fn put16(at: u32, q: vec4<u32>, scale: f32, offset: i32, min: f32) {
    for (var i = 0u; i < 4u; i++) {
        put4(at + 4u * i, group_values4(q[i], scale, offset, min));
    }
}

// A weight group's 32 values (the includer's io.wgsl WGroup) at `at`.
fn put_group(at: u32, q: WGroup) {
    put16(at, q.lo, q.scale.x, q.offset, q.min);
    put16(at + 16u, q.hi, q.scale.y, q.offset, q.min);
}
