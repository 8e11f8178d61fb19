#include "attention/kv_f16.wgsl"
#include "attention/kv_rows.wgsl"
#include "attention/flash.wgsl"

// attention/flash over an f16 KV cache.
