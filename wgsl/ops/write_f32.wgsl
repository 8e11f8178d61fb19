// `write_out` of the norms writing f32 only (ops/rms_norm, ops/add_rms_norm); their q8
// variants take ops/q8_out.wgsl's.
fn write_out(lid: u32, scale: f32) {
    write_scaled(lid, scale);
}
