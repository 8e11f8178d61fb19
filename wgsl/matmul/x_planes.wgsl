// The one formula for the drivers that turn q8 x (q8_x.wgsl) back into values from
// both int8 planes (columns.wgsl, unpack_x.wgsl).

// Four values of x from the two planes' words q1 and q2: d * (256 q1 + q2).
fn q8_planes4(q1: u32, q2: u32, d: f32) -> vec4<f32> {
    return vec4<f32>(256 * unpack4xI8(q1) + unpack4xI8(q2)) * d;
}
