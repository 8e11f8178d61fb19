#include "ops/rms_scale.wgsl"
#include "ops/write_f32.wgsl"
#include "ops/rms_norm.wgsl"

// ops/rms_norm: the norm writing f32 only. Its `write_out` comes from here rather than
// from rms_norm.wgsl, which ops/rms_norm_q8 shares.
