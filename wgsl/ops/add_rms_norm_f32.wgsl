#include "ops/rms_scale.wgsl"
#include "ops/write_f32.wgsl"
#include "ops/add_rms_norm.wgsl"

// ops/add_rms_norm: the norm writing f32 only. Its `write_out` comes from here rather than
// from add_rms_norm.wgsl, which ops/add_rms_norm_q8 shares.
