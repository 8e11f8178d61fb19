// The one formula for the drivers that turn a weight group (io.wgsl's WGroup) into the
// values they multiply on the matrix units (coop_staging.wgsl, unpack.wgsl).

// Four of a group's values, those of the int8 quants of word q: scale * (q + offset) +
// min.
fn group_values4(q: u32, scale: f32, offset: i32, min: f32) -> vec4<f32> {
    return vec4<f32>(unpack4xI8(q) + vec4<i32>(offset)) * scale + min;
}
