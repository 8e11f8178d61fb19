#include "attention/kv_f32.wgsl"
#include "attention/kv_rows.wgsl"
#include "attention/prefill.wgsl"

// attention/prefill over an f32 KV cache.
