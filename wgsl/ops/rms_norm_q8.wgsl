#include "ops/rms_scale.wgsl"
#include "ops/q8_out.wgsl"
#include "ops/rms_norm.wgsl"

// ops/rms_norm_q8: the norm writing its output also quantized (ops/q8_out.wgsl).
