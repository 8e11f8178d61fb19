#include "attention/kv_f32.wgsl"
#include "attention/kv_rows.wgsl"
#include "attention/flash.wgsl"

// attention/flash over an f32 KV cache.
